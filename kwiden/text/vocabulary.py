"""The one loader of a tokenizer (`load_tokenizer`), for every entry point: bytes, a WordPiece
`vocab.txt`, a `tokenizer.json`, or a model folder holding one, read as its files say
(`kwiden.text.folder`); and a WordPiece vocabulary built on a corpus. All are Hugging Face
`tokenizers` objects, so one code path tokenizes and one writes the tokenizer beside the trained
model."""

import dataclasses
import json
import pathlib

import numpy as np

from kwiden.files import json_text, replaced_atomically
from kwiden.text import folder as settings_of
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
    `lowercase`: whether it lower-cases a text first (a `vocab.txt` as its
    folder says, a `tokenizer.json` as its normalizer does); `maxlen`: the tokens a text
    at most, as the folder says (None where it does not).
    """

    tokenizer: object
    kind: str
    source: str
    pad: int = None
    mask: int = None
    separator: int = None
    cls: int = None
    lowercase: bool = None
    maxlen: int = None

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
        similar, the CLUE scripts), with a `tokenizer_config.json` saying
        `do_lower_case: false` for a cased one (uncased is what a folder
        without one is read as); and `tokenizer.json` for a tokenizer read
        from one (a Hugging Face BERT's keeps both)."""
        folder = pathlib.Path(folder)
        if type(self.tokenizer.model).__name__ == "WordPiece":
            vocabulary = self.tokenizer.get_vocab(with_added_tokens=True)
            with replaced_atomically(folder / "vocab.txt") as temporary:
                temporary.write_text("".join(t + "\n" for t in sorted(vocabulary, key=vocabulary.get)), "utf-8")
            if self.lowercase is False:
                with replaced_atomically(folder / settings_of.TOKENIZER_CONFIG) as temporary:
                    temporary.write_text(json_text({"do_lower_case": False}, "tokenizer_config.json"), "utf-8")
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


def load_tokenizer(spec, flag="--tokenizer", lowercase=None, fallback=None, remedy=""):
    """The tokenizer of `spec`, loaded one way for every entry point (`kwiden
    pretrain`'s corpus, `SentenceEncoder`, `kwiden.generate`, `kwiden.similar`,
    the CLUE scripts): `"bytes"`, a WordPiece `vocab.txt`, a `tokenizer.json`,
    or a model folder holding one of them (its `tokenizer.json` first).

    A `vocab.txt` is read as its folder's `tokenizer_config.json` says
    (`do_lower_case`, `strip_accents`, the special tokens' names), or `fallback`'s
    where its folder has none, lower-cased where neither says (BERT's uncased
    convention); `lowercase` overrides (and a folder's `vocab.txt` is then read
    before its `tokenizer.json`). A `tokenizer.json` carries its own
    normalizer; one that disagrees with its folder's `do_lower_case` is
    refused. The folder's `max_seq_length` (sentence-transformers), else
    its `model_max_length`, is the tokenizer's `maxlen`. What is no tokenizer
    is refused, named by `flag` and followed by `remedy`."""
    if spec == BYTES:
        return byte_tokenizer()
    # lowercase= given: the folder's vocab.txt, which it applies to (a tokenizer.json says for itself).
    names = settings_of.TOKENIZER_FILES[::-1] if lowercase is not None else settings_of.TOKENIZER_FILES
    path = settings_of.tokenizer_file(spec, flag, remedy, names)
    settings = settings_of.read_settings(path.parent, fallback)
    if path.suffix != ".json":
        lowercase = settings.lowercase if lowercase is None else bool(lowercase)
        tokenizer = wordpiece.wordpiece(path, lowercase, settings.strip_accents, settings.special)
        return _described(tokenizer, "wordpiece", str(path), settings, lowercase)
    if lowercase is not None:
        raise ValueError(f"lowercase={lowercase!r}: {path} is a tokenizer.json, whose normalizer says whether it "
                         "lower-cases; leave lowercase= out.")  # fmt: skip
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
    lowercase = _lowercases(json.loads(tokenizer.to_str()).get("normalizer"))
    if settings.said is not None and settings.lowercase != lowercase:
        raise ValueError(f"{settings.said} says do_lower_case {str(settings.lowercase).lower()}, but {path}'s "
                         f"normalizer {'lower-cases' if lowercase else 'keeps the case'}: the two files disagree. "
                         "Repair the one that is wrong (transformers' save_pretrained writes both alike).")  # fmt: skip
    # Its special tokens are its own: tokenizer_config.json's names (LLaMA's pad_token "<unk>") are not read.
    return _described(tokenizer, "json", str(path), dataclasses.replace(settings, special={}), lowercase)


def _lowercases(normalizer):
    """Whether a tokenizer.json's `normalizer` (its JSON) lower-cases: BERT's with `lowercase`, or a Lowercase
    step in a sequence."""
    if not isinstance(normalizer, dict):
        return False
    if normalizer.get("type") == "Sequence":
        return any(_lowercases(step) for step in normalizer.get("normalizers", []))
    return normalizer.get("type") == "Lowercase" or bool(
        normalizer.get("type") == "BertNormalizer" and normalizer.get("lowercase")
    )


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
    if trainer.get_vocab_size() <= len(BERT_SPECIAL_TOKENS):
        raise ValueError(f"--build-vocab {size}: the corpus gave the vocabulary no token beside the special ones; "
                         "give a corpus of text, or a --tokenizer.")  # fmt: skip
    built = _described(trainer, "wordpiece", f"--build-vocab {size}", lowercase=lowercase)
    return load_tokenizer(built.save(folder), lowercase=lowercase)


def _described(tokenizer, kind, source, settings=None, lowercase=None):
    """A `CorpusTokenizer`: the special tokens' ids by the names the folder gives them (`settings`), else
    by the names tokenizers usually give them."""
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    settings = settings_of.TokenizerSettings() if settings is None else settings

    def first(role, names):
        names = ((settings.special[role],) if role in settings.special else ()) + names
        return next((vocabulary[name] for name in names if name in vocabulary), None)

    separator = None if kind == BYTES else first("sep", SEPARATOR_NAMES)
    pad, mask, cls = first("pad", PAD_NAMES), first("mask", MASK_NAMES), first("cls", CLS_NAMES)
    return CorpusTokenizer(tokenizer, kind, source, pad, mask, separator, cls, lowercase, settings.maxlen)
