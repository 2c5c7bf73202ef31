"""A grown sentence-transformers folder keeps what the next tool reads: its tokenizer, its modules.json and its
pooling (the width made the grown one), so its sentence vectors are the original's copied, whether grown as a
folder (`grow_checkpoint`) or in memory and saved (`save_checkpoint`); a module with weights is refused."""

import json
import shutil

import numpy as np
import pytest

import kwiden
from kwiden.testing import randomize_weights, tiny_config

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
TEXTS = ["a b c d", "e f", "g h i j k l m"]
MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]


@pytest.fixture(scope="module")
def sentence_folder(tmp_path_factory):
    """A tiny BERT laid out as sentence-transformers writes all-MiniLM-L6-v2: mean pooling, a maximum length."""
    folder = tmp_path_factory.mktemp("st")
    bert = randomize_weights(kwiden.build_transformer_model(tiny_config(vocab_size=len(WORDS)), with_pool=True))
    kwiden.save_checkpoint(bert, folder)
    (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    (folder / "modules.json").write_text(json.dumps(MODULES))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 12, "do_lower_case": False}))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 16, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}))  # fmt: skip
    return folder


def copied_vectors(vectors, k=2):
    """A k-times-wider model's vectors of the same texts: each coordinate copied k times, unit length again."""
    wide = np.repeat(vectors.astype("float64"), k, axis=1)
    return wide / np.linalg.norm(wide, axis=1, keepdims=True)


def assert_keeps_the_sentence_vectors(small_folder, big_folder):
    small, big = kwiden.SentenceEncoder(small_folder), kwiden.SentenceEncoder(big_folder)
    assert (big.pooling, big.maxlen, big.tokenizer.lowercase) == ("mean", 12, True)
    np.testing.assert_allclose(big.encode(TEXTS), copied_vectors(small.encode(TEXTS)), rtol=1e-5, atol=1e-6)
    pooling = json.loads((big_folder / "1_Pooling" / "config.json").read_text())
    assert pooling["word_embedding_dimension"] == 32 and pooling["pooling_mode_mean_tokens"]
    assert json.loads((big_folder / "modules.json").read_text()) == MODULES


def test_a_folder_grown_as_a_folder_pools_as_the_original(sentence_folder, tmp_path):
    grown = kwiden.grow_checkpoint(sentence_folder, tmp_path / "big", k=2)
    assert set(grown.copied) >= {"vocab.txt", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"}
    assert_keeps_the_sentence_vectors(sentence_folder, tmp_path / "big")


def test_a_model_grown_in_memory_saves_with_the_folders_tokenizer_and_pooling(sentence_folder, tmp_path):
    small = kwiden.build_transformer_model(checkpoint_path=sentence_folder)
    big = kwiden.grow(small, 2)
    assert big.checkpoint_folder == sentence_folder
    kwiden.save_checkpoint(big, tmp_path / "big")
    assert_keeps_the_sentence_vectors(sentence_folder, tmp_path / "big")
    existing = tmp_path / "existing"  # into a folder that exists: the sub-folder's file is moved in too
    existing.mkdir()
    kwiden.save_checkpoint(big, existing)
    assert_keeps_the_sentence_vectors(sentence_folder, existing)
    kwiden.save_checkpoint(big, tmp_path / "bare", copy_from=None)
    assert sorted(p.name for p in (tmp_path / "bare").iterdir()) == ["config.json", "kwiden-manifest.json",
                                                                      "model.safetensors"]  # fmt: skip


def test_a_module_with_weights_after_the_pooling_is_refused(sentence_folder, tmp_path):
    folder = shutil.copytree(sentence_folder, tmp_path / "dense")
    modules = [*MODULES[:2], {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    message = r"modules.json lists sentence_transformers.models.Dense after the encoder: its weights read the"
    with pytest.raises(ValueError, match=message):
        kwiden.grow_checkpoint(folder, tmp_path / "big", k=2)
    assert not (tmp_path / "big").exists()
    big = kwiden.grow(kwiden.build_transformer_model(checkpoint_path=folder), 2)
    with pytest.raises(ValueError, match=message):
        kwiden.save_checkpoint(big, tmp_path / "big")
    assert not (tmp_path / "big").exists()


def with_modules(source, target, modules, pooling="1_Pooling"):
    """A copy of `source` whose modules.json lists `modules` (its pooling folder renamed `pooling`)."""
    folder = shutil.copytree(source, target)
    if pooling != "1_Pooling":
        (folder / "1_Pooling").rename(folder / pooling.rstrip("/"))
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


@pytest.mark.parametrize("path", [".", "", "../victim", "/tmp"])
def test_a_module_folder_outside_the_checkpoints_is_refused_before_anything_is_written(sentence_folder, tmp_path,
                                                                                      path):  # fmt: skip
    """modules.json is a user's file: a Normalize at "." had copied the small weights over the grown ones, and a
    Pooling at "../victim" had written beside the target."""
    modules = [*MODULES[:2], {"idx": 2, "name": "2", "path": path, "type": "sentence_transformers.models.Normalize"}]
    folder = with_modules(sentence_folder, tmp_path / "src", modules)
    with pytest.raises(ValueError, match=rf"Normalize's path '{path}' is not a sub-folder of .*src"):
        kwiden.grow_checkpoint(folder, tmp_path / "big", k=2)
    assert not (tmp_path / "big").exists()


def test_a_pooling_folder_is_found_by_its_path_however_written(sentence_folder, tmp_path):
    modules = [MODULES[0], {**MODULES[1], "path": "1_Pooling/"}, MODULES[2]]
    folder = with_modules(sentence_folder, tmp_path / "slash", modules)
    kwiden.grow_checkpoint(folder, tmp_path / "big", k=2)
    assert json.loads((tmp_path / "big" / "1_Pooling" / "config.json").read_text())["word_embedding_dimension"] == 32
    shutil.rmtree(folder / "1_Pooling")  # listed, but gone: not read as another pooling
    with pytest.raises(ValueError, match=r"lists a Pooling module at '1_Pooling', but .*config.json is missing"):
        kwiden.SentenceEncoder(folder)


def test_a_module_with_weights_is_copied_where_the_width_stays(sentence_folder, tmp_path):
    modules = [*MODULES[:2], {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]
    folder = with_modules(sentence_folder, tmp_path / "dense", modules)
    (folder / "2_Dense").mkdir()
    (folder / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 16, "out_features": 8}))
    kwiden.grow_checkpoint(folder, tmp_path / "deeper", k=1, ffn_factor=2)  # the width stays 16: the Dense fits
    assert (tmp_path / "deeper" / "2_Dense" / "config.json").read_text() == (
        folder / "2_Dense" / "config.json"
    ).read_text()
    kwiden.save_checkpoint(kwiden.build_transformer_model(checkpoint_path=folder), tmp_path / "saved")
    assert (tmp_path / "saved" / "2_Dense" / "config.json").is_file()


def test_what_is_saved_is_described_by_no_other_models_files(sentence_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(sentence_folder.parent)
    small = kwiden.build_transformer_model(checkpoint_path=sentence_folder.name)  # a relative path
    assert small.checkpoint_folder == sentence_folder.resolve() and small.checkpoint_folder.is_absolute()
    kwiden.save_checkpoint(kwiden.grow(small, 2), tmp_path / "F")
    plain = kwiden.build_transformer_model(tiny_config(vocab_size=len(WORDS)), with_pool=True)
    with pytest.raises(ValueError, match=r"F holds modules.json, sentence_bert_config.json \(sentence-transformers'\), "
                                         r"which this save does not write"):  # fmt: skip
        kwiden.save_checkpoint(plain, tmp_path / "F")
    for bad in ("nowhere", str(sentence_folder / "vocab.txt"), False):
        with pytest.raises(ValueError, match=r"copy_from=.*: give the folder whose tokenizer's files"):
            kwiden.save_checkpoint(plain, tmp_path / "G", copy_from=bad)
