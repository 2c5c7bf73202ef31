"""Nothing lost, nothing silently wrong: checkpoints saved atomically, folders
with two checkpoints refused, files checked against kwiden's manifest, NaN
refused, and one-line errors for damaged or wrong input."""

import errno
import json
import os

import keras
import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf
from checkpoint_folders import MODELS, tensors_of

import kwiden
from kwiden.checkpoints import MANIFEST, SAFETENSORS, SafetensorsWriter
from kwiden.files import TEMPORARY
from kwiden.testing import numpy_outputs, padded_batch, randomize_weights, tiny_config

pytestmark = pytest.mark.filterwarnings("ignore:Google's BERT code")

CONFIG_FILES = {"hf": "config.json", "google": "bert_config.json"}


def contents(folder):
    """`{file name: bytes}` of a folder."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def no_temporary_folders(parent):
    return [path.name for path in parent.iterdir() if TEMPORARY in path.name] == []


def outputs(folder, **flags):
    return numpy_outputs(kwiden.build_transformer_model(checkpoint_path=folder, **flags), padded_batch())


def disk_full_midway(monkeypatch, format):
    """Make the format's writer write part of its file, then fail as a full disk does."""

    def safetensors_writer(writer, name, value):
        writer.file.write(b"\x00" * 64)
        raise OSError(errno.ENOSPC, "No space left on device")

    def google_writer(prefix, tensor_names, shape_and_slices, tensors):
        with open(f"{prefix}.data-00000-of-00001", "wb") as file:
            file.write(b"\x00" * 64)
        raise tf.errors.ResourceExhaustedError(None, None, f"{prefix}.data-00000-of-00001; No space left on device")

    if format == "hf":
        monkeypatch.setattr(SafetensorsWriter, "write", safetensors_writer)
    else:
        monkeypatch.setattr(tf.raw_ops, "SaveV2", google_writer)


@pytest.mark.parametrize("format", ["hf", "google"])
def test_a_failed_save_leaves_the_old_checkpoint_as_it_was(bert, tmp_path, monkeypatch, format):
    old = bert(seed=0)
    folder = kwiden.save_checkpoint(old, tmp_path / "ckpt", format=format)
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n")  # the user's own file
    before = contents(folder)
    expected = outputs(folder)
    disk_full_midway(monkeypatch, format)
    with pytest.raises((OSError, tf.errors.ResourceExhaustedError), match="No space left on device"):
        kwiden.save_checkpoint(bert(seed=1), folder, format=format)
    assert contents(folder) == before
    assert no_temporary_folders(tmp_path)
    for a, b in zip(expected, outputs(folder)):
        np.testing.assert_array_equal(a, b)
    # nothing new is visible where there was no folder
    with pytest.raises((OSError, tf.errors.ResourceExhaustedError), match="No space left on device"):
        kwiden.save_checkpoint(old, tmp_path / "new", format=format)
    assert not (tmp_path / "new").exists() and no_temporary_folders(tmp_path)


@pytest.mark.parametrize("format", ["hf", "google"])
def test_saving_again_replaces_kwidens_files_and_keeps_the_others(bert, tmp_path, format):
    folder = kwiden.save_checkpoint(bert(seed=0), tmp_path / "ckpt", format=format)
    (tmp_path / "plain").mkdir()
    assert folder.stat().st_mode == (tmp_path / "plain").stat().st_mode  # the umask's, as any new folder
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    stale = folder / "bert_model.ckpt.data-00001-of-00002"  # an older save's second shard
    if format == "google":
        stale.write_bytes(b"old")
    new = bert(seed=1)
    kwiden.save_checkpoint(new, folder, format=format)
    assert (folder / "vocab.txt").read_text() == "[PAD]\n[UNK]\n" and not stale.exists()
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["kwiden_manifest"] == 1 and manifest["format"] == format
    assert sorted(manifest["files"]) == sorted(set(os.listdir(folder)) - {MANIFEST, "vocab.txt"})
    assert CONFIG_FILES[format] in manifest["files"]
    for a, b in zip(numpy_outputs(new, padded_batch()), outputs(folder)):
        np.testing.assert_array_equal(a, b)
    assert no_temporary_folders(tmp_path)


def test_an_interrupted_move_into_place_is_refused_on_load(bert, tmp_path, monkeypatch):
    folder = kwiden.save_checkpoint(bert(seed=0), tmp_path / "ckpt")
    replace, calls = os.replace, []

    def killed_after_the_manifest(source, target):
        calls.append(target)
        if len(calls) > 1:
            raise OSError(errno.EIO, "Input/output error")
        replace(source, target)

    monkeypatch.setattr(os, "replace", killed_after_the_manifest)
    with pytest.raises(OSError, match="Input/output error"):
        kwiden.save_checkpoint(bert(seed=1, num_attention_heads=4), folder)
    monkeypatch.undo()
    assert no_temporary_folders(tmp_path)
    with pytest.raises(ValueError, match=r"ckpt/config.json is not the file kwiden wrote \(another sha256, says kwiden-manifest.json\)"):  # fmt: skip
        kwiden.build_transformer_model(checkpoint_path=folder)


def test_a_folder_with_two_checkpoints_is_refused(bert, tmp_path):
    model = bert()
    folder = kwiden.save_checkpoint(model, tmp_path / "ckpt")
    before = contents(folder)
    with pytest.raises(
        ValueError,
        match=r"ckpt holds Hugging Face's model.safetensors; saving Google's \(bert_model.ckpt.\*\) weights beside "
        r"them would leave two checkpoints .* Save into another folder, or delete those files first\.",
    ):
        kwiden.save_checkpoint(bert(seed=1), folder, format="google")
    assert contents(folder) == before
    google = kwiden.save_checkpoint(bert(seed=1), tmp_path / "google", format="google")
    with pytest.raises(ValueError, match=r"google holds Google's bert_model.ckpt.data-00000-of-00001, bert_model.ckpt.index; saving Hugging Face's"):  # fmt: skip
        kwiden.save_checkpoint(model, google)
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001", "bert_config.json"):
        (folder / name).write_bytes((google / name).read_bytes())  # put there by hand
    (folder / MANIFEST).unlink()
    with pytest.raises(
        ValueError,
        match=r"The folder \S+ckpt holds more than one checkpoint \(Hugging Face's model.safetensors; Google's "
        r"bert_model.ckpt.data-00000-of-00001, bert_model.ckpt.index\), and kwiden cannot tell which is meant: "
        r"pass the one to load as checkpoint_path",
    ):
        kwiden.build_transformer_model(checkpoint_path=folder)
    # named, either loads, with its own format's config
    for a, b in zip(numpy_outputs(model, padded_batch()), outputs(folder / "model.safetensors")):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(outputs(google), outputs(folder / "bert_model.ckpt")):
        np.testing.assert_array_equal(a, b)
    (folder / "model.safetensors").unlink()
    (google / "bert_model.ckpt.index").rename(google / "model.ckpt-1000.index")
    (google / "bert_model.ckpt.data-00000-of-00001").rename(google / "model.ckpt-1000.data-00000-of-00001")
    for name in ("model.ckpt-1000.index", "model.ckpt-1000.data-00000-of-00001"):
        (folder / name).write_bytes((google / name).read_bytes())
    with pytest.raises(ValueError, match=r"Google's bert_model.ckpt.data-00000-of-00001, bert_model.ckpt.index; Google's model.ckpt-1000"):  # fmt: skip
        kwiden.build_transformer_model(checkpoint_path=folder)
    with pytest.raises(ValueError, match=r"ckpt holds Google's model.ckpt-1000.data-00000-of-00001, model.ckpt-1000.index; saving Google's"):  # fmt: skip
        kwiden.save_checkpoint(model, folder, format="google")


@pytest.mark.parametrize("format", ["hf", "google"])
def test_a_changed_byte_is_refused_naming_the_file(bert, tmp_path, format):
    folder = kwiden.save_checkpoint(bert(), tmp_path / "ckpt", format=format)
    weights = folder / ("model.safetensors" if format == "hf" else "bert_model.ckpt.data-00000-of-00001")
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01  # one bit of the last tensor's data
    weights.write_bytes(bytes(data))
    with pytest.raises(
        ValueError,
        match=rf"{weights.name} is not the file kwiden wrote \(another sha256, says kwiden-manifest.json\): it was "
        r"damaged or changed since.*if another tool rewrote it on purpose, delete \S+kwiden-manifest.json\.",
    ):
        kwiden.build_transformer_model(checkpoint_path=folder)
    weights.write_bytes(bytes(data[:-100]))
    with pytest.raises(ValueError, match=rf"{weights.name} is not the file kwiden wrote \(\d+ bytes where \d+ were written"):  # fmt: skip
        kwiden.build_transformer_model(checkpoint_path=folder)
    weights.unlink()
    with pytest.raises(FileNotFoundError, match=rf"{weights.name} is missing, though \S+kwiden-manifest.json lists it"):  # fmt: skip
        kwiden.build_transformer_model(checkpoint_path=folder, config=tiny_config())


def test_the_manifest_checks_the_config_too(bert, tmp_path):
    """The number of heads (and ε, the activation) changes no shape, so the
    weights cannot tell a wrong one; the manifest's hash of the config can."""
    folder = kwiden.save_checkpoint(bert(), tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_attention_heads": 4}))
    with pytest.raises(ValueError, match=r"config.json is not the file kwiden wrote"):
        kwiden.build_transformer_model(checkpoint_path=folder)
    (folder / MANIFEST).write_text("{not json")
    with pytest.raises(ValueError, match=r"kwiden-manifest.json is not a manifest kwiden can read \(Expecting"):
        kwiden.build_transformer_model(checkpoint_path=folder)
    (folder / MANIFEST).write_text(json.dumps({"kwiden_manifest": 1, "files": {"../x": {}}}))
    with pytest.raises(ValueError, match=r"its entry '../x' is not a file name with bytes and a sha256"):
        kwiden.build_transformer_model(checkpoint_path=folder)


def test_checkpoints_written_by_others_load_without_a_manifest(bert, tmp_path):
    model = bert(with_mlm=True)
    folder = kwiden.save_checkpoint(model, tmp_path / "ckpt")
    (folder / MANIFEST).unlink()
    for a, b in zip(numpy_outputs(model, padded_batch()), outputs(folder, with_mlm=True)):
        np.testing.assert_array_equal(a, b)


def test_damaged_files_without_a_manifest_are_refused(bert, tmp_path):
    google = kwiden.save_checkpoint(bert(), tmp_path / "google", format="google")
    (google / MANIFEST).unlink()
    data = google / "bert_model.ckpt.data-00000-of-00001"
    intact = data.read_bytes()
    data.write_bytes(intact[: len(intact) // 2])
    with pytest.raises(
        ValueError,
        match=r"The checkpoint \S+google/bert_model.ckpt is damaged or not a checkpoint \(reading '[^']+' failed: .*\); "
        r"write or download it again\.$",
    ):
        kwiden.build_transformer_model(checkpoint_path=google)
    flipped = bytearray(intact)
    flipped[-5] ^= 0x01
    data.write_bytes(bytes(flipped))  # TensorFlow's own checksums catch it
    with pytest.raises(ValueError, match=r"bert_model.ckpt is damaged or not a checkpoint \(reading '[^']+' failed"):
        kwiden.build_transformer_model(checkpoint_path=google)
    (google / "bert_model.ckpt.index").write_bytes(b"\x00" * 10)
    with pytest.raises(ValueError, match=r"bert_model.ckpt is damaged or not a checkpoint"):
        kwiden.build_transformer_model(checkpoint_path=google)
    hf = kwiden.save_checkpoint(bert(), tmp_path / "hf")
    (hf / MANIFEST).unlink()
    weights = hf / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"The checkpoint \S+hf/model.safetensors is damaged or not a checkpoint"):
        kwiden.build_transformer_model(checkpoint_path=hf)


def test_nan_and_inf_are_refused_unless_allowed(bert, tmp_path):
    model = bert()
    folder = kwiden.save_checkpoint(model, tmp_path / "ckpt")
    (folder / MANIFEST).unlink()  # rewritten below, as another tool would
    tensors = safetensors.numpy.load_file(folder / "model.safetensors")
    tensors["encoder.layer.0.output.dense.weight"][3, 4] = np.nan
    tensors["embeddings.LayerNorm.bias"][0] = np.inf
    safetensors.numpy.save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(
        ValueError,
        match=r"model.safetensors's tensor 'embeddings.LayerNorm.bias' \(for 'Embedding-Norm/beta'\) holds 1 NaN or "
        r"infinite values, which would make the model's outputs NaN; pass allow_nonfinite=True to load it anyway\.",
    ):
        kwiden.build_transformer_model(checkpoint_path=folder)
    loaded = kwiden.build_transformer_model(checkpoint_path=folder, allow_nonfinite=True)
    assert np.isnan(loaded.get_layer("Transformer-0-FeedForward").output_kernel.numpy()[4, 3])
    with pytest.raises(
        ValueError,
        match=r"'Embedding-Norm/beta' holds 1 NaN or infinite values, and loading would refuse the checkpoint; "
        r"pass allow_nonfinite=True to write it anyway\.",
    ):
        kwiden.save_checkpoint(loaded, tmp_path / "nan")
    assert not (tmp_path / "nan").exists()
    written = kwiden.save_checkpoint(loaded, tmp_path / "nan", allow_nonfinite=True)
    with pytest.raises(ValueError, match=r"holds 1 NaN or infinite values"):
        kwiden.build_transformer_model(checkpoint_path=written)


def test_configs_that_are_not_json_are_named_with_the_error_position(bert, tmp_path):
    folder = kwiden.save_checkpoint(bert(), tmp_path / "ckpt")
    (folder / MANIFEST).unlink()
    (folder / "config.json").write_text('{"vocab_size": 97,\n "hidden_size": 16,,\n}')
    message = (
        r"The config file \S+ckpt/config.json is not valid JSON: Expecting property name enclosed in double quotes "
        r"at line 2, column 20 \(character 38\)\. Fix it, or pass `config` instead\.$"
    )
    with pytest.raises(ValueError, match=message):
        kwiden.build_transformer_model(checkpoint_path=folder)
    with pytest.raises(ValueError, match=message):
        kwiden.build_transformer_model(config_path=folder / "config.json")
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"config.json holds a JSON list, not an object of keys such as hidden_size"):
        kwiden.build_transformer_model(checkpoint_path=folder)
    (folder / "config.json").write_bytes(b'{"hidden_size": "\xff"}')
    with pytest.raises(ValueError, match=r"config.json is not UTF-8 text \(at byte offset 17\), so not JSON"):
        kwiden.build_transformer_model(checkpoint_path=folder)
    with pytest.raises(FileNotFoundError, match=r"The config file \S+missing.json does not exist"):
        kwiden.build_transformer_model(config_path=tmp_path / "missing.json")
    with pytest.raises(ValueError, match=r"The config file \S+ckpt is a folder; give the config.json in it"):
        kwiden.build_transformer_model(config_path=folder)
    with pytest.raises(ValueError, match=r"config's hidden_size='16' must be whole numbers"):
        kwiden.build_transformer_model(tiny_config(hidden_size="16"))


def test_a_checkpoint_path_that_is_no_checkpoint(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"notes.txt is not a checkpoint kwiden reads: give a folder"):
        kwiden.build_transformer_model(tiny_config(), checkpoint_path=tmp_path / "notes.txt")
    with pytest.raises(ValueError, match=r"\S+notes.txt is a file; save_checkpoint writes a folder"):
        kwiden.save_checkpoint(kwiden.build_transformer_model(tiny_config()), tmp_path / "notes.txt")


def test_a_value_beyond_float16_is_refused_not_written_as_infinite(tmp_path):
    llama = randomize_weights(kwiden.build_transformer_model(MODELS["llama"], model="llama"), seed=1)
    large = kwiden.save_checkpoint(llama, tmp_path / "large")
    values = tensors_of(large)
    values["model.norm.weight"] = np.full(16, 70000.0, "float32")  # finite in float32, beyond float16's 65504
    safetensors.numpy.save_file(values, str(large / SAFETENSORS))
    (large / MANIFEST).unlink()  # changed on purpose
    with pytest.raises(ValueError, match=r"The grown 'model.norm.weight' does not fit in float16: 32 of its entries would be infinite there, its largest magnitude being 70000 where float16 holds at most 65504"):  # fmt: skip
        kwiden.grow_checkpoint(large, tmp_path / "half", k=2, dtype="float16")
    assert not (tmp_path / "half").exists()
    keras.config.set_dtype_policy("float16")
    try:  # loading into a float16 model: the same refusal, before any weight is assigned
        with pytest.raises(ValueError, match=r"large/model.safetensors's 'model.norm.weight' does not fit in float16: 16 of its entries"):  # fmt: skip
            kwiden.build_transformer_model(checkpoint_path=large)
    finally:
        keras.config.set_dtype_policy("float32")
    kwiden.grow_checkpoint(large, tmp_path / "bf16", k=2, dtype="bfloat16")  # bfloat16's range holds it
    assert kwiden.build_transformer_model(checkpoint_path=tmp_path / "bf16") is not None
