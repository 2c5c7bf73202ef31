"""BERT's WordPiece on Hugging Face's `tokenizers` library: a `vocab.txt` read and checked, the
tokenizer built on it, and the checks every text passes before any tokenizer reads it."""

import collections
import pathlib
import re

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


def read_vocabulary(vocab_path, required=REQUIRED_TOKENS):
    """The tokens of a WordPiece `vocab.txt`, in id order, as `tokenizers`
    reads them (one a line, trailing spaces dropped, a leading UTF-8
    byte-order mark skipped). Raises, naming the file, where it is missing,
    a folder, empty, not UTF-8, uses \\r line endings alone, holds a \\r
    inside a token (naming the line), lacks one of `required` (the unknown
    token, then the two around a text: `REQUIRED_TOKENS` by default) or
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
    missing = [token for token in required if token not in tokens]
    if missing:
        unknown, first, last = required
        raise ValueError(
            f"The vocabulary {path} has no {' or '.join(missing)} line: BERT's WordPiece needs {unknown} for unknown "
            f"words and {first} and {last} around texts. Is it a WordPiece vocab.txt?"
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


def wordpiece(vocab_path, lowercase=True, strip_accents=None, special=None):
    """A `tokenizers.Tokenizer` on the WordPiece `vocab_path` (checked by `read_vocabulary`), as BERT (and
    the Chinese BERT and RoBERTa-wwm releases) tokenize: CJK characters one a token, lower-cased and
    accents stripped where `lowercase` (`strip_accents`: None, as `lowercase`), `[CLS] first [SEP] second
    [SEP]` around texts. `special` names the special tokens by role ("unk", "cls", "sep", "pad", "mask")
    where a folder's tokenizer_config.json spells them otherwise than BERT."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    names = {"unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]", **(special or {})}
    tokens = read_vocabulary(vocab_path, (names["unk"], names["cls"], names["sep"]))
    # The checked tokens, not the file: `tokenizers` would read a byte-order mark into the first token.
    vocabulary = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.WordPiece(vocabulary, unk_token=names["unk"]))
    strip = lowercase if strip_accents is None else strip_accents
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=strip, lowercase=lowercase)  # fmt: skip
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(
        (names["sep"], vocabulary[names["sep"]]), (names["cls"], vocabulary[names["cls"]])
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    # Special tokens are read whole in a text, and left out of a decoded one.
    tokenizer.add_special_tokens(
        [names[role] for role in ("unk", "sep", "cls", "pad", "mask") if names[role] in vocabulary]
    )
    return tokenizer
