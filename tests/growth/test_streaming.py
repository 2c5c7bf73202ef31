"""`kwiden.grow_checkpoint`: a Hugging Face folder grown tensor by tensor is,
bit for bit, what loading it, `kwiden.grow` and `save_checkpoint` write; it
loads and computes the small model's function; it appears whole or not at
all; bad input is refused naming the file and the tensor."""

import json
import pathlib

import numpy as np
import pytest
from checkpoint_folders import DECODER, MODELS, SIZES, tensors_of

import kwiden
from kwiden import cli
from kwiden.checkpoints import SAFETENSORS, SAFETENSORS_INDEX
from kwiden.growth import streaming as grow_module
from kwiden.testing import randomize_weights

IDS = np.array([[3, 7, 11, 2, 9, 4], [5, 1, 8, 8, 30, 2]])


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A small random checkpoint of each family (every weight non-zero)."""
    root = tmp_path_factory.mktemp("sources")
    made = {}
    for family, config in MODELS.items():
        model = randomize_weights(kwiden.build_transformer_model(config, model=family), seed=1, std=0.3)
        made[family] = kwiden.save_checkpoint(model, root / family)
    return made


def grown_in_memory(src, dst, **options):
    small = kwiden.build_transformer_model(checkpoint_path=src)
    kwiden.save_checkpoint(kwiden.grow(small, **options), dst)
    return dst


def assert_same_tensors(a, b):
    a, b = tensors_of(a), tensors_of(b)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), f"{name} differs"


CASES = [
    ("llama", dict(k=2, heads="count", seed=3)),
    ("llama", dict(k=2, heads="count", seed=4, depth=2)),
    ("qwen2", dict(k=2, heads="count", seed=5)),
    ("gpt", dict(k=2, heads="size", seed=6)),
]


@pytest.mark.parametrize("family, options", CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
def test_bit_for_bit_as_load_grow_save(folders, tmp_path, family, options):
    src = folders[family]
    grown = kwiden.grow_checkpoint(src, tmp_path / "streamed", max_shard_size=3000, **options)
    assert len(grown.files) > 1 and (tmp_path / "streamed" / SAFETENSORS_INDEX).is_file()
    expected = grown_in_memory(src, tmp_path / "in-memory", **options)
    assert_same_tensors(tmp_path / "streamed", expected)
    written = json.loads((tmp_path / "streamed" / "config.json").read_text())
    assert written == json.loads((expected / "config.json").read_text())
    assert grown.parameters == kwiden.build_transformer_model(checkpoint_path=expected).count_params()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in-memory", "streamed"]  # no temporary folder left


@pytest.mark.parametrize("family", sorted(MODELS))
def test_grown_folder_computes_the_small_models_function(folders, tmp_path, family):
    grown = kwiden.grow_checkpoint(folders[family], tmp_path / "big", k=2, heads="count", seed=0)
    small = kwiden.build_transformer_model(checkpoint_path=folders[family])
    big = kwiden.build_transformer_model(checkpoint_path=grown.path)
    assert big.count_params() == grown.parameters > small.count_params() == grown.source_parameters
    expected, got = np.asarray(small(IDS)), np.asarray(big(IDS))
    assert np.max(np.abs(got - expected)) <= 1e-5 * np.max(np.abs(expected))


def test_bfloat16_stays_bfloat16_and_float32_matches_the_keras_path(folders, tmp_path):
    source = tensors_of(folders["llama"])
    config = json.loads((folders["llama"] / "config.json").read_text())
    half = tmp_path / "bf16"
    half.mkdir()
    import ml_dtypes
    from safetensors.numpy import save_file

    save_file({n: v.astype(ml_dtypes.bfloat16) for n, v in source.items()}, str(half / SAFETENSORS))
    (half / "config.json").write_text(json.dumps(config))
    kwiden.grow_checkpoint(half, tmp_path / "grown-bf16", k=2, heads="count", seed=0)
    assert {v.dtype.name for v in tensors_of(tmp_path / "grown-bf16").values()} == {"bfloat16"}
    assert json.loads((tmp_path / "grown-bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    kwiden.grow_checkpoint(half, tmp_path / "grown-f32", k=2, heads="count", seed=0, dtype="float32")
    assert_same_tensors(tmp_path / "grown-f32", grown_in_memory(half, tmp_path / "keras", k=2, heads="count", seed=0))


def test_a_failure_midway_leaves_nothing(folders, tmp_path, monkeypatch):
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("disk full")
        return original(*args, **kwargs)

    original = grow_module._grown_tensor
    monkeypatch.setattr(grow_module, "_grown_tensor", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        kwiden.grow_checkpoint(folders["llama"], tmp_path / "big", k=2, heads="count", max_shard_size=3000)
    assert list(tmp_path.iterdir()) == []  # no destination, no temporary folder
    empty = tmp_path / "empty"
    empty.mkdir()
    calls.clear()
    with pytest.raises(RuntimeError, match="disk full"):
        kwiden.grow_checkpoint(folders["llama"], empty, k=2, heads="count")
    assert [p.name for p in tmp_path.iterdir()] == ["empty"] and list(empty.iterdir()) == []


def copy_folder(src, dst):
    dst.mkdir()
    for file in pathlib.Path(src).iterdir():
        if file.name != "kwiden-manifest.json":
            (dst / file.name).write_bytes(file.read_bytes())
    return dst


def test_bad_input_is_refused_naming_the_file_and_tensor(folders, tmp_path):
    src = folders["llama"]
    with pytest.raises(FileExistsError, match="not empty"):
        kwiden.grow_checkpoint(src, folders["qwen2"], k=2)
    with pytest.raises(ValueError, match="is .* or inside it"):
        kwiden.grow_checkpoint(src, src, k=2)
    with pytest.raises(ValueError, match="rotary frequencies were copied by growth"):
        kwiden.grow_checkpoint(src, tmp_path / "size", k=2, heads="size")
    assert list(tmp_path.iterdir()) == []
    # a shard the index names is missing
    sharded = kwiden.grow_checkpoint(src, tmp_path / "sharded", k=1, heads="count", spread=0, max_shard_size=3000).path
    (sharded / "kwiden-manifest.json").unlink()
    shard = sorted(sharded.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=f"The shard .*{shard.name} is missing"):
        kwiden.grow_checkpoint(sharded, tmp_path / "out1", k=2, heads="count")
    # unknown model_type
    unknown = copy_folder(src, tmp_path / "unknown")
    config = json.loads((unknown / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps({**config, "model_type": "falcon"}))
    with pytest.raises(ValueError, match=r"unknown/config.json: The config's model_type 'falcon'"):
        kwiden.grow_checkpoint(unknown, tmp_path / "out2", k=2, heads="count")
    # the config says another size than the tensors have
    wrong = copy_folder(src, tmp_path / "wrong")
    (wrong / "config.json").write_text(json.dumps({**config, "intermediate_size": 32}))
    with pytest.raises(
        ValueError,
        match=r"needs 'model.layers.0.mlp.gate_proj.weight' of shape \(32, 16\); the checkpoint's has \(\d+, 16\) \(\S+model.safetensors: ",
    ):
        kwiden.grow_checkpoint(wrong, tmp_path / "out3", k=2, heads="count")
    # mixed dtypes
    from safetensors.numpy import save_file

    mixed = copy_folder(src, tmp_path / "mixed")
    values = tensors_of(src)
    values["model.norm.weight"] = values["model.norm.weight"].astype("float16")
    save_file(values, str(mixed / SAFETENSORS))
    with pytest.raises(ValueError, match="mixes dtypes: .* is float32 and 'model.norm.weight'( .*)? is float16"):
        kwiden.grow_checkpoint(mixed, tmp_path / "out4", k=2, heads="count")
    # NaN found midway: refused, nothing written
    nan = copy_folder(src, tmp_path / "nan")
    values["model.norm.weight"] = np.full(16, np.nan, "float32")
    save_file(values, str(nan / SAFETENSORS))
    with pytest.raises(
        ValueError,
        match=r"'model.norm.weight' \(for 'Output-Norm/gamma'\) holds 16 NaN.*grow it anyway. Nothing was written",
    ):
        kwiden.grow_checkpoint(nan, tmp_path / "out5", k=2, heads="count")
    assert not (tmp_path / "out5").exists() and not [p for p in tmp_path.iterdir() if "kwiden-tmp" in p.name]


def test_a_tensor_too_big_for_memory_is_refused_before_writing(folders, tmp_path, monkeypatch):
    monkeypatch.setattr(grow_module, "available_memory", lambda: 10_000)
    with pytest.raises(
        kwiden.GrowthError, match=r"Growing 'model.embed_tokens.weight' to shape \(50, 32\) needs about"
    ):
        kwiden.grow_checkpoint(folders["llama"], tmp_path / "big", k=2, heads="count")
    assert list(tmp_path.iterdir()) == []


def test_cli_grows_a_folder(folders, tmp_path, capsys):
    dst = tmp_path / "big"
    assert cli.main(["grow", str(folders["gpt"]), str(dst), "--factor", "2", "--heads", "count"]) == 0
    assert f"saved {dst}" in capsys.readouterr().out
    assert_same_tensors(dst, grown_in_memory(folders["gpt"], tmp_path / "keras", k=2, heads="count", seed=0))
    assert cli.main(["grow", str(folders["gpt"]), str(dst), "--factor", "2"]) == 1
    assert "not empty" in capsys.readouterr().err
    assert cli.main(["grow", str(folders["gpt"]), str(tmp_path / "c"), "--factor", "2", "--check"]) == 1
    assert "--check" in capsys.readouterr().err
    assert cli.main(["grow", str(folders["gpt"]), str(tmp_path / "big.keras"), "--factor", "2"]) == 1
    assert "is a folder, grown (as a Hugging Face checkpoint) into a new folder" in capsys.readouterr().err
    llama = tmp_path / "llama-big"  # a folder grows by head count unless told otherwise: LLaMA's config can say it
    assert cli.main(["grow", str(folders["llama"]), str(llama), "--factor", "2"]) == 0
    assert_same_tensors(llama, grown_in_memory(folders["llama"], tmp_path / "llama-keras", k=2, heads="count", seed=0))


@pytest.mark.parametrize("family, heads", [("bert", "size"), ("roformer", "count")])
def test_encoders_with_their_mlm_head_grow_bit_for_bit(tmp_path, family, heads):
    config = dict(SIZES, num_attention_heads=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    small = randomize_weights(kwiden.build_transformer_model(config, model=family, with_mlm=True), seed=2, std=0.3)
    src = kwiden.save_checkpoint(small, tmp_path / "small")
    # BERT's config has one ε, and the grown MLM norm keeps the small one's: both paths warn alike.
    with pytest.warns(UserWarning, match="one layer_norm_eps; 0.0005 is written"):
        kwiden.grow_checkpoint(src, tmp_path / "streamed", k=2, heads=heads, seed=1)
    loaded = kwiden.build_transformer_model(checkpoint_path=src, with_mlm=True)
    with pytest.warns(UserWarning, match="one layer_norm_eps; 0.0005 is written"):
        kwiden.save_checkpoint(kwiden.grow(loaded, 2, heads=heads, seed=1), tmp_path / "in-memory")
    assert_same_tensors(tmp_path / "streamed", tmp_path / "in-memory")
    streamed, in_memory = (json.loads((tmp_path / f / "config.json").read_text()) for f in ("streamed", "in-memory"))
    assert streamed == in_memory and streamed["hidden_size"] == 32


def test_tensors_the_config_leaves_out_are_refused_as_loading_refuses_them(tmp_path):
    biased = dict(DECODER, num_attention_heads=4, attention_bias=True, mlp_bias=True)
    model = randomize_weights(kwiden.build_transformer_model(biased, model="llama"), seed=1, std=0.3)
    src = kwiden.save_checkpoint(model, tmp_path / "biased")
    config = json.loads((src / "config.json").read_text())
    (src / "kwiden-manifest.json").unlink()  # the config is edited by hand below
    (src / "config.json").write_text(json.dumps({**config, "attention_bias": False, "mlp_bias": False}))
    match = r"holds 'model.layers.0.self_attn.q_proj.bias', for which this LLaMA has no weight"
    with pytest.raises(ValueError, match=match):
        kwiden.build_transformer_model(checkpoint_path=src)
    with pytest.raises(ValueError, match=match):
        kwiden.grow_checkpoint(src, tmp_path / "big", k=2)
    assert not (tmp_path / "big").exists()


def test_the_tokenizers_files_are_copied_and_no_others(folders, tmp_path, capsys):
    src = copy_folder(folders["llama"], tmp_path / "src")
    beside = {"tokenizer.json": '{"model": {}}', "generation_config.json": '{"bos_token_id": 1}', "vocab.txt": "a\n"}
    for name, text in beside.items():
        (src / name).write_text(text)
    (src / "pytorch_model.bin").write_bytes(b"the small model's old weights")
    grown = kwiden.grow_checkpoint(src, tmp_path / "big", k=2)
    assert grown.copied == ("vocab.txt", "tokenizer.json", "generation_config.json")
    for name, text in beside.items():
        assert (tmp_path / "big" / name).read_text() == text
    assert not (tmp_path / "big" / "pytorch_model.bin").exists()
    kwiden.build_transformer_model(checkpoint_path=tmp_path / "big")  # the manifest vouches for the copies too
    assert cli.main(["grow", str(src), str(tmp_path / "big2"), "--factor", "2"]) == 0
    assert "copied beside them: vocab.txt, tokenizer.json, generation_config.json" in capsys.readouterr().out
