"""BERT's WordPiece tokenizer, on Hugging Face's `tokenizers` library."""

import collections
import pathlib
import re

import numpy as np

from kwiden.files import find_key, read_text

# The tokens BERT's WordPiece cannot do without: unknown words, and the two
# that `encode` puts around texts.
REQUIRED_TOKENS = ("[UNK]", "[CLS]", "[SEP]")
BYTE_ORDER_MARK = "\ufeff"
# What `tokenizers` strips from the end of a vocabulary line (Rust's
# whitespace: Python's but for the separators \x1c-\x1f).
LINE_END_SPACES = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
)
# The code points a Python string may hold but no UTF-8 text can: what bytes that are not UTF-8 become when read
# with errors="surrogateescape" (as Python reads a command line), and what JSON's "\ud800" escapes give.
SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text, where):
    """`text`, refused (a ValueError beginning with `where`, "Prompt 2") where it is not a string or holds a lone
    surrogate, which no tokenizer reads and no file can hold.

    >>> check_text("caf" + chr(0xDCE9), "Text 0")
    Traceback (most recent call last):
    ...
    ValueError: Text 0 is not valid Unicode: it holds a lone surrogate (U+DCE9) at character 3, as bytes that are not UTF-8 become when read as text (a command line, a file opened with errors="surrogateescape") or a JSON escape such as "\\ud800" gives. Give UTF-8 text.
    """
    if not isinstance(text, str):
        raise ValueError(f"{where} is a {type(text).__name__}, not a text (str).")
    found = SURROGATE.search(text)
    if found:
        raise ValueError(
            f"{where} is not valid Unicode: it holds a lone surrogate (U+{ord(found.group()):04X}) at character "
            f"{found.start()}, as bytes that are not UTF-8 become when read as text (a command line, a file opened "
            'with errors="surrogateescape") or a JSON escape such as "\\ud800" gives. Give UTF-8 text.'
        )
    return text


def check_json_texts(value, where):
    """`value` (parsed JSON), refused where one of its strings is not valid Unicode (`check_text`), naming `where`
    ("train.json, line 3") and the key."""
    found = find_key(value, lambda item: isinstance(item, str) and SURROGATE.search(item) is not None)
    if found is not None:
        check_text(found[1], f"{where}: {found[0] or 'the value'}")
    return value


def check_texts(texts, what="Text"):
    """Each of `texts` checked by `check_text`, named `what` and its index; the list."""
    return [check_text(text, f"{what} {index}") for index, text in enumerate(texts)]


class Tokenizer:
    """WordPiece with CJK characters split one by one, as BERT (and the Chinese
    BERT and RoBERTa-wwm releases) tokenize.

    `encode(first, second=None, maxlen=None)` gives `(token_ids, segment_ids)`
    for one text or a pair: `[CLS] first [SEP] second [SEP]`, segment 0 then 1,
    the longer text truncated first to fit `maxlen`. Calling the tokenizer on
    a list of texts (or of pairs) gives the two arrays padded with 0, ready for
    a kwiden BERT; an empty list gives two int32 arrays of shape (0, 0).

    The vocabulary is checked when the tokenizer is made (`read_vocabulary`):
    a missing file, a folder, an empty file, one without [UNK], [CLS] or
    [SEP], one that repeats a token (whose ids would skip, leaving
    `vocab_size` below the largest id) and one with a carriage return (\\r)
    other than in a \\r\\n line ending are refused with an error naming the
    file (and the lines at fault). A UTF-8 byte-order mark is skipped.

    Args:
        vocab_path: the model's `vocab.txt`, one token a line, ids from 0.
        lowercase: lower-case and strip accents first (uncased models); False
            for cased models. Chinese models are usually uncased.
        maxlen: the default `maxlen` (512, BERT's positions).

    Example:

    >>> import tempfile, os
    >>> vocab = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(vocab, "w").write("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "我", "爱", "hello"]))
    >>> Tokenizer(vocab).encode("Hello 我爱", "我")
    ([2, 7, 5, 6, 3, 5, 3], [0, 0, 0, 0, 0, 1, 1])
    """

    def __init__(self, vocab_path, lowercase=True, maxlen=512):
        from tokenizers import BertWordPieceTokenizer

        tokens = read_vocabulary(vocab_path)
        self.vocab_path = str(vocab_path)
        self.lowercase = lowercase
        self.maxlen = maxlen
        # The checked tokens, not the file: `tokenizers` would read a byte-order mark into the first token.
        self._tokenizer = BertWordPieceTokenizer(
            {token: i for i, token in enumerate(tokens)},
            lowercase=lowercase,
            strip_accents=lowercase,
            handle_chinese_chars=True,
        )

    @property
    def vocab_size(self):
        return self._tokenizer.get_vocab_size()

    def tokenize(self, text):
        """The word pieces of `text`, with [CLS] and [SEP], truncated to the default `maxlen`."""
        self._truncate(None)
        return self._tokenizer.encode(check_text(text, "The text")).tokens

    def encode(self, first, second=None, maxlen=None):
        self._truncate(maxlen)
        first = check_text(first, "The first text")
        second = None if second is None else check_text(second, "The second text")
        encoding = self._tokenizer.encode(first, second)
        return encoding.ids, encoding.type_ids

    def __call__(self, texts, maxlen=None):
        """Padded `[token_ids, segment_ids]` arrays for a list of texts or of
        `(first, second)` pairs."""
        return list(self.encode_batch(texts, maxlen)[:2])

    def encode_batch(self, texts, maxlen=None):
        """`(token_ids, segment_ids, cut)`: the padded arrays of a list of
        texts or of pairs, and how many of them were cut to `maxlen`."""
        if isinstance(texts, str):
            raise ValueError("Call the tokenizer on a list of texts (or of pairs); for one text use `encode`.")
        self._truncate(maxlen)
        texts = [_checked_item(item, index) for index, item in enumerate(texts)]
        encodings = self._tokenizer.encode_batch(texts)
        length = max((len(e.ids) for e in encodings), default=0)
        token_ids = np.zeros((len(encodings), length), "int32")
        segment_ids = np.zeros_like(token_ids)
        for row, e in enumerate(encodings):
            token_ids[row, : len(e.ids)] = e.ids
            segment_ids[row, : len(e.ids)] = e.type_ids
        return token_ids, segment_ids, sum(bool(e.overflowing) for e in encodings)

    def _truncate(self, maxlen):
        maxlen = self.maxlen if maxlen is None else maxlen
        if maxlen < 3:
            raise ValueError(f"`maxlen` must leave room for [CLS] and [SEP], at least 3; got maxlen={maxlen}.")
        self._tokenizer.enable_truncation(maxlen, strategy="longest_first")


def _checked_item(item, index):
    """A text, or a `(first, second)` pair, checked by `check_text`."""
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return tuple(check_text(text, f"Text {index}, {side}") for text, side in zip(item, ("first", "second")))
    return check_text(item, f"Text {index}")


def read_vocabulary(vocab_path):
    """The tokens of a WordPiece `vocab.txt`, in id order, as `tokenizers`
    reads them (one a line, trailing spaces dropped, a leading UTF-8
    byte-order mark skipped). Raises, naming the file, where it is missing,
    a folder, empty, not UTF-8, uses \\r line endings alone, holds a \\r
    inside a token (naming the line), lacks one of `REQUIRED_TOKENS` or
    repeats a token (naming it and its lines).

    >>> import tempfile, os
    >>> vocab = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(vocab, "w").write("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "hello"]))
    >>> read_vocabulary(vocab)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: The vocabulary .../vocab.txt repeats 'hello' on lines 5 and 7; ...
    """
    path = pathlib.Path(vocab_path)
    inside = " (its vocab.txt?)" if (path / "vocab.txt").is_file() else ""
    # Line endings kept as they are: `tokenizers` (Hugging Face's fast tokenizers) ends lines at \n alone.
    text = read_text(
        path, "The vocabulary", "the model's vocab.txt", in_folder=f"the vocab.txt file{inside}", newline=""
    )
    # Windows editors start UTF-8 files with a mark that is no part of the first token (Python's utf-8-sig).
    lines = text.removeprefix(BYTE_ORDER_MARK).split("\n")
    if lines[-1] == "":  # the newline ending the last line
        lines.pop()
    if not lines:
        raise ValueError(f"The vocabulary {path} is empty; a WordPiece vocab.txt has one token a line.")
    tokens = [line.rstrip(LINE_END_SPACES) for line in lines]  # a \r\n line's \r goes here
    refuse_carriage_returns(path, tokens)
    missing = [token for token in REQUIRED_TOKENS if token not in tokens]
    if missing:
        raise ValueError(
            f"The vocabulary {path} has no {' or '.join(missing)} line: BERT's WordPiece needs [UNK] for unknown "
            "words and [CLS] and [SEP] around texts. Is it a WordPiece vocab.txt?"
        )
    lines_of = collections.defaultdict(list)
    for number, token in enumerate(tokens, 1):
        lines_of[token].append(number)
    repeated = {token: numbers for token, numbers in lines_of.items() if len(numbers) > 1}
    if repeated:
        token, numbers = next(iter(repeated.items()))
        where = ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"
        others = len(repeated) - 1
        more = f" (and {others} more repeated token{'s' * (others > 1)})" if others else ""
        raise ValueError(
            f"The vocabulary {path} repeats {token!r} on lines {where}{more}; each token must have one line, "
            "or ids skip and vocab_size falls below the largest id."
        )
    return tokens


def refuse_carriage_returns(path, tokens):
    """A \\r left inside a token: readers that take \\r for a line break
    (Python's text mode, Hugging Face's `BertTokenizer`) would read more
    lines, and every later token another id."""
    inside = [number for number, token in enumerate(tokens, 1) if "\r" in token]
    if not inside:
        return
    if len(tokens) == 1:
        raise ValueError(
            f"The vocabulary {path} uses CR line endings (\\r) alone, which `tokenizers` reads as one line; "
            "save it with \\n line endings."
        )
    number = inside[0]
    others = f" (and {len(inside) - 1} more lines)" if len(inside) > 1 else ""
    raise ValueError(
        f"The vocabulary {path}, line {number}{others}, holds a carriage return (\\r) inside the token "
        f"{tokens[number - 1]!r}, which other readers take for a line break, shifting every later id; "
        "remove it, or save the file with \\n line endings."
    )
