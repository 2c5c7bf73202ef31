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


def test_bad_vocabularies_are_refused_when_the_tokenizer_is_made(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"The vocabulary \S+missing.txt does not exist; give the model's vocab.txt"):  # fmt: skip
        kwiden.Tokenizer(tmp_path / "missing.txt")
    (tmp_path / "nothing").mkdir()
    with pytest.raises(ValueError, match=r"The tokenizer \S+nothing is a folder with no tokenizer.json or vocab.txt in it: give a folder holding a tokenizer.json or a WordPiece vocab.txt"):  # fmt: skip
        kwiden.Tokenizer(tmp_path / "nothing")
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB), encoding="utf-8")
    assert kwiden.Tokenizer(tmp_path).encode("我爱") == kwiden.Tokenizer(tmp_path / "vocab.txt").encode(
        "我爱"
    )  # its vocab.txt
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"The vocabulary \S+empty.txt is empty; a WordPiece vocab.txt has one token a line"):  # fmt: skip
        kwiden.Tokenizer(empty)
    no_unk = tmp_path / "no-unk.txt"
    no_unk.write_text("\n".join(token for token in VOCAB if token != "[UNK]"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"The vocabulary \S+no-unk.txt has no \[UNK\] line: BERT's WordPiece needs \[UNK\] for unknown words"):  # fmt: skip
        kwiden.Tokenizer(no_unk)
    no_sep = tmp_path / "no-sep.txt"
    no_sep.write_text("\n".join(token for token in VOCAB if token not in ("[CLS]", "[SEP]")), encoding="utf-8")
    with pytest.raises(ValueError, match=r"no-sep.txt has no \[CLS\] or \[SEP\] line"):
        kwiden.Tokenizer(no_sep)
    latin = tmp_path / "latin-1.txt"
    latin.write_bytes("\n".join(VOCAB).replace("é", "e").encode() + "\ncafé".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin-1.txt is not UTF-8 text \(at byte offset \d+\)"):
        kwiden.Tokenizer(latin)


def test_a_vocabulary_that_repeats_a_token_is_refused_naming_its_lines(tmp_path):
    """Repeated, `tokenizers` keeps the last id: vocab_size would fall below the largest id."""
    repeated = tmp_path / "vocab.txt"
    repeated.write_text("\n".join(VOCAB + ["hello", "world  ", "我"]) + "\n", encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=r"The vocabulary \S+vocab.txt repeats '我' on lines 6 and 17 \(and 2 more repeated tokens\); "
        r"each token must have one line, or ids skip and vocab_size falls below the largest id\.",
    ):
        kwiden.Tokenizer(repeated)
    # A last line's newline makes no token; nor does `tokenizers` strip \x1c (which Python counts as a space).
    ended = tmp_path / "ended.txt"
    ended.write_text("\n".join(VOCAB + ["world\x1c"]) + "\n", encoding="utf-8")
    assert kwiden.Tokenizer(ended).vocab_size == len(VOCAB) + 1


def test_an_empty_batch_gives_empty_arrays(tokenizer):
    token_ids, segment_ids = tokenizer([])
    assert token_ids.shape == segment_ids.shape == (0, 0)
    assert token_ids.dtype == segment_ids.dtype == np.int32
