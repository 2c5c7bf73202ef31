"""`kwiden.Tokenizer`: BERT WordPiece with CJK characters split, pairs, truncation, padding."""

import numpy as np
import pytest

import kwiden

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "我",
    "爱",
    "北",
    "京",
    "hello",
    "world",
    "play",
    "##ing",
    "café",
]


@pytest.fixture
def tokenizer(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB), encoding="utf-8")
    return kwiden.Tokenizer(path)


def test_chinese_is_split_per_character_and_words_into_pieces(tokenizer):
    assert tokenizer.tokenize("我爱北京 Playing") == ["[CLS]", "我", "爱", "北", "京", "play", "##ing", "[SEP]"]
    assert tokenizer.encode("我爱天安门") == ([2, 5, 6, 1, 1, 1, 3], [0, 0, 0, 0, 0, 0, 0])
    assert tokenizer.vocab_size == len(VOCAB)


def test_pairs_get_segments_and_the_longer_text_is_truncated_first(tokenizer):
    ids, segments = tokenizer.encode("我爱北京我爱北京", "hello world", maxlen=8)
    assert ids == [2, 5, 6, 7, 3, 9, 10, 3]
    assert segments == [0, 0, 0, 0, 0, 1, 1, 1]


def test_batches_are_padded_with_zeros(tokenizer):
    token_ids, segment_ids = tokenizer(["我爱北京", "hello"])
    np.testing.assert_array_equal(token_ids, [[2, 5, 6, 7, 8, 3], [2, 9, 3, 0, 0, 0]])
    assert token_ids.dtype == np.int32 and segment_ids.shape == token_ids.shape and not segment_ids.any()
    token_ids, segment_ids = tokenizer([("我爱", "hello")])
    np.testing.assert_array_equal(segment_ids, [[0, 0, 0, 0, 1, 1]])


def test_cased_tokenizer_keeps_case_and_accents(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB), encoding="utf-8")
    assert kwiden.Tokenizer(path, lowercase=False).tokenize("Hello café")[1:3] == ["[UNK]", "café"]
    assert kwiden.Tokenizer(path).tokenize("Hello café")[1:3] == ["hello", "[UNK]"]


def test_tokenize_does_not_depend_on_the_last_call(tokenizer):
    tokenizer.encode("我爱北京", maxlen=4)
    assert tokenizer.tokenize("我爱北京") == ["[CLS]", "我", "爱", "北", "京", "[SEP]"]
    with pytest.raises(ValueError, match=r"on a list of texts .* for one text use `encode`"):
        tokenizer("我爱北京")


def test_too_short_maxlen_is_refused(tokenizer):
    with pytest.raises(ValueError, match=r"`maxlen` must leave room for \[CLS\] and \[SEP\], at least 3; got maxlen=2"):
        tokenizer.encode("我", maxlen=2)
