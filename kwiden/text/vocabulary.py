"""The tokenizers `kwiden pretrain` reads its corpus with: bytes, a WordPiece
`vocab.txt`, a `tokenizer.json`, or a WordPiece vocabulary built on the corpus.
All are Hugging Face `tokenizers` objects, so one code path tokenizes and one
writes the tokenizer beside the trained model."""

import dataclasses
import pathlib

import numpy as np

from kwiden.files import replaced_atomically
from kwiden.text import tokenizer as wordpiece

BYTES = "bytes"
# The tokens a BERT vocabulary has, in Google's order after [PAD].
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# How tokenizers spell the tokens the objectives need, first match wins.
PAD_NAMES = ("[PAD]", "<pad>", "<|pad|>", "<|endoftext|>")
MASK_NAMES = ("[MASK]", "<mask>", "<|mask|>")
SEPARATOR_NAMES = ("[SEP]", "</s>", "<|endoftext|>", "<eos>", "<|im_end|>")
CLS_NAMES = ("[CLS]", "<s>")


@dataclasses.dataclass
class CorpusTokenizer:
    """A `tokenizers.Tokenizer` and the ids the objectives use (None where it has none).

    `kind` is "bytes", "wordpiece" or "json"; `separator` ends each line of
    the corpus in the token stream (none for bytes, whose newline is a byte).
    """

    tokenizer: object
    kind: str
    source: str
    pad: int = None
    mask: int = None
    separator: int = None
    cls: int = None

    @property
    def vocab_size(self):
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode_lines(self, lines, what="Text"):
        """Each line's ids (no special tokens), and each id's character offsets in its line; a line that is not
        valid text refused, named `what` and its index."""
        lines = wordpiece.check_texts(lines, what)
        if self.kind == BYTES:
            ids = [np.frombuffer(line.encode("utf-8"), np.uint8).astype(np.int64) + 1 for line in lines]
            return ids, None
        encodings = self.tokenizer.encode_batch(lines, add_special_tokens=False)
        return [np.asarray(e.ids, np.int64) for e in encodings], [e.offsets for e in encodings]

    def save(self, folder):
        """Write the tokenizer where a model folder keeps it: `vocab.txt` for
        WordPiece (what BERT loaders read: kwiden.SentenceEncoder, kwiden
        similar, the CLUE scripts), and `tokenizer.json` for a tokenizer read
        from one (a Hugging Face BERT's keeps both)."""
        folder = pathlib.Path(folder)
        if type(self.tokenizer.model).__name__ == "WordPiece":
            vocabulary = self.tokenizer.get_vocab(with_added_tokens=True)
            with replaced_atomically(folder / "vocab.txt") as temporary:
                temporary.write_text("".join(t + "\n" for t in sorted(vocabulary, key=vocabulary.get)), "utf-8")
            if self.kind == "wordpiece":
                return folder / "vocab.txt"
        with replaced_atomically(folder / "tokenizer.json") as temporary:
            self.tokenizer.save(str(temporary))
        return folder / "tokenizer.json"


def byte_tokenizer():
    """UTF-8 bytes as ids 1..256, [PAD] 0 and [MASK] 257 (258 ids): what the
    shipped demo trains on, as a `tokenizer.json` any `tokenizers` user reads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    characters = _byte_characters()
    vocabulary = {"[PAD]": 0, **{characters[b]: b + 1 for b in range(256)}, "[MASK]": 257}
    tokenizer = Tokenizer(models.BPE(vocab=vocabulary, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["[PAD]", "[MASK]"])
    return _described(tokenizer, BYTES, BYTES)


def _byte_characters():
    """GPT-2's printable stand-in for each byte (what `ByteLevel` maps bytes to)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}


def load_tokenizer(spec, flag="--tokenizer"):
    """`"bytes"`, a WordPiece `vocab.txt`, a `tokenizer.json`, or a model
    folder holding one of them."""
    if spec == BYTES:
        return byte_tokenizer()
    path = pathlib.Path(spec)
    if path.is_dir():
        found = [path / name for name in ("tokenizer.json", "vocab.txt") if (path / name).is_file()]
        if not found:
            raise ValueError(f"{flag} {path} is a folder with no tokenizer.json or vocab.txt in it.")
        path = found[0]
    if not path.is_file():
        raise ValueError(f"{flag} {spec}: no such file; give 'bytes', a vocab.txt or a tokenizer.json.")
    if path.suffix == ".json":
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises its own Exception for a file it cannot read
            raise ValueError(f"{flag} {path} is not a tokenizer.json `tokenizers` can read: {error}") from None
        # A saved truncation or padding would cut or pad every line of the corpus.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        if tokenizer.get_vocab(with_added_tokens=True) == byte_tokenizer().tokenizer.get_vocab(with_added_tokens=True):
            return _described(tokenizer, BYTES, str(path))  # kwiden's bytes, saved beside a model: read as bytes
        return _described(tokenizer, "json", str(path))
    return _described(wordpiece.Tokenizer(path)._tokenizer, "wordpiece", str(path))


def build_vocabulary(lines, size, folder, lowercase=True):
    """A WordPiece vocabulary of `size` tokens trained on `lines` (an iterable
    of texts), CJK characters one a token as Google's Chinese BERT, with
    BERT's special tokens; written as `folder/vocab.txt`."""
    from tokenizers import BertWordPieceTokenizer

    least = len(BERT_SPECIAL_TOKENS) + 1
    if size < least:
        raise ValueError(f"--build-vocab {size} is too small: a WordPiece vocabulary needs at least {least} tokens.")
    trainer = BertWordPieceTokenizer(
        lowercase=lowercase, strip_accents=lowercase, handle_chinese_chars=True, clean_text=True
    )
    # limit_alphabet: the trainer keeps 1,000 characters by default, and a Chinese corpus has thousands, each
    # a token; all are kept up to the vocabulary's size.
    trainer.train_from_iterator(lines, vocab_size=size, special_tokens=list(BERT_SPECIAL_TOKENS), show_progress=False,
                                limit_alphabet=size)  # fmt: skip
    built = _described(trainer._tokenizer, "wordpiece", f"--build-vocab {size}")
    path = built.save(folder)
    return _described(load_tokenizer(path).tokenizer, "wordpiece", str(path))


def _described(tokenizer, kind, source):
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)

    def first(names):
        return next((vocabulary[name] for name in names if name in vocabulary), None)

    separator = None if kind == BYTES else first(SEPARATOR_NAMES)
    return CorpusTokenizer(tokenizer, kind, source, first(PAD_NAMES), first(MASK_NAMES), separator, first(CLS_NAMES))
