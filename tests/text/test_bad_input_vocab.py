"""Vocabularies whose line endings or first bytes other readers take
otherwise: refused with the fault named, or (a byte-order mark) read as
Python's utf-8-sig reads them."""

import pytest
from test_tokenizer import VOCAB

import kwiden
from kwiden.text.tokenizer import read_vocabulary


def written(tmp_path, text):
    path = tmp_path / "vocab.txt"
    path.write_bytes(text.encode("utf-8"))
    return path


def test_cr_line_endings_alone_are_named(tmp_path):
    path = written(tmp_path, "\r".join(VOCAB) + "\r")
    with pytest.raises(ValueError, match=r"vocab.txt uses CR line endings \(\\r\) alone, .*save it with \\n line endings"):  # fmt: skip
        kwiden.Tokenizer(path)


def test_a_carriage_return_inside_a_token_names_its_line(tmp_path):
    path = written(tmp_path, "\n".join(VOCAB[:4] + ["play\ring"] + VOCAB[4:]) + "\n")
    with pytest.raises(ValueError, match=r"vocab.txt, line 5, holds a carriage return \(\\r\) inside the token 'play\\ring'"):  # fmt: skip
        kwiden.Tokenizer(path)


def test_crlf_line_endings_read_as_lf_ones(tmp_path):
    """Windows' \r\n: the \r is a line end's space, as `tokenizers` strips it."""
    crlf = kwiden.Tokenizer(written(tmp_path, "\r\n".join(VOCAB) + "\r\n"))
    assert crlf.vocab_size == len(VOCAB)
    assert crlf.encode("我爱 Playing hello") == ([2, 5, 6, 11, 12, 9, 3], [0] * 7)


def test_a_byte_order_mark_is_no_part_of_the_first_token(tmp_path):
    """Notepad's UTF-8 starts with U+FEFF; the first token stays [UNK], id 0 (not '\ufeff[UNK]')."""
    tokens = ["[UNK]"] + [token for token in VOCAB if token != "[UNK]"]
    path = written(tmp_path, "\ufeff" + "\n".join(tokens) + "\n")
    assert read_vocabulary(path)[0] == "[UNK]"
    tokenizer = kwiden.Tokenizer(path)
    assert tokenizer.vocab_size == len(tokens)
    assert tokenizer.encode("天")[0] == [tokens.index("[CLS]"), 0, tokens.index("[SEP]")]
