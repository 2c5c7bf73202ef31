"""What a model folder says about its tokenizer, read once for every entry point: which file holds it
(`tokenizer.json`, else a WordPiece `vocab.txt`), whether it lower-cases (`tokenizer_config.json`'s
`do_lower_case`, True where the folder has none, as BERT's uncased releases and Hugging Face's
`BertTokenizer` default), its special tokens, and how many tokens a text may have (sentence-transformers'
`max_seq_length`, else `model_max_length`)."""

import dataclasses
import pathlib

from kwiden.files import read_json

TOKENIZER_CONFIG = "tokenizer_config.json"
SENTENCE_CONFIG = "sentence_bert_config.json"
# The files a folder's tokenizer is read from, the first found wins (Hugging Face's fast tokenizer first).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")
# Hugging Face writes model_max_length as int(1e30) where the length is not known.
UNKNOWN_LENGTH = 10**6
# tokenizer_config.json's names of the special tokens, by their role.
SPECIAL_KEYS = {"unk": "unk_token", "cls": "cls_token", "sep": "sep_token", "pad": "pad_token", "mask": "mask_token"}
# Tokenizer files kwiden cannot read, and what they are.
OTHER_FILES = {
    "vocab.json": "a byte-level BPE's vocab.json (with merges.txt)",
    "tokenizer.model": "a SentencePiece tokenizer.model",
    "spiece.model": "a SentencePiece spiece.model",
}
REMEDY = (
    "give a folder holding a tokenizer.json or a WordPiece vocab.txt (transformers writes a tokenizer.json "
    "with AutoTokenizer.from_pretrained(folder).save_pretrained(folder))"
)


@dataclasses.dataclass(frozen=True)
class TokenizerSettings:
    """What a folder says about its tokenizer.

    lowercase: lower-case (and strip accents, unless `strip_accents` says otherwise) before WordPiece;
        True where no `tokenizer_config.json` says (BERT's uncased convention).
    strip_accents: None: as `lowercase`.
    maxlen: tokens a text at most, [CLS] and [SEP] included; None where the folder does not say.
    special: the special tokens' texts by role ("unk", "cls", "sep", "pad", "mask") that the folder names.
    said: the file that set `lowercase`, or None.
    """

    lowercase: bool = True
    strip_accents: bool = None
    maxlen: int = None
    special: dict = dataclasses.field(default_factory=dict)
    said: str = None


def read_settings(folder, fallback=None):
    """The `TokenizerSettings` of `folder`; where it has no `tokenizer_config.json`, `fallback`'s (a
    checkpoint folder whose vocabulary was given from elsewhere)."""
    folder = pathlib.Path(folder)
    config_path = folder / TOKENIZER_CONFIG
    if not config_path.is_file() and fallback is not None and (pathlib.Path(fallback) / TOKENIZER_CONFIG).is_file():
        config_path = pathlib.Path(fallback) / TOKENIZER_CONFIG
    config = _read_object(config_path) if config_path.is_file() else {}
    lowercase = config.get("do_lower_case", True)
    strip_accents = config.get("strip_accents")
    for key, value in (("do_lower_case", lowercase), ("strip_accents", strip_accents)):
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{config_path}: {key} is {value!r}, not true or false; repair it.")
    special = {role: _token_text(config.get(key)) for role, key in SPECIAL_KEYS.items()}
    special = {role: text for role, text in special.items() if text is not None}
    said = str(config_path) if "do_lower_case" in config else None
    return TokenizerSettings(lowercase, strip_accents, _maxlen(folder, config), special, said)


def _maxlen(folder, config):
    """sentence-transformers' `max_seq_length` (what it cuts texts to), else `model_max_length`; None where
    neither is a length (Hugging Face writes 1e30 for one not known)."""
    path = folder / SENTENCE_CONFIG
    sentence = _read_object(path) if path.is_file() else {}
    for length in (sentence.get("max_seq_length"), config.get("model_max_length")):
        if isinstance(length, int) and not isinstance(length, bool) and 3 <= length < UNKNOWN_LENGTH:
            return length
    return None


def _read_object(path):
    value = read_json(path, f"{path} is not the JSON Hugging Face writes", "repair it")
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not the object (keys and values) Hugging Face writes; repair it.")
    return value


def _token_text(value):
    """A special token as tokenizer_config.json spells it: a text, or Hugging Face's AddedToken object."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def tokenizer_file(path, flag, remedy="", names=TOKENIZER_FILES):
    """The file a folder's tokenizer is read from (the first of `names` found), or `path` itself
    when it is a file; refused, naming the folder (as `flag` calls it), what it holds and what would work
    (`remedy` adding what else would)."""
    path = pathlib.Path(path)
    if path.is_file() or (path.suffix == ".txt" and not path.is_dir()):  # a vocab.txt's own checks name it
        return path
    if not path.is_dir():
        raise ValueError(f"{flag} {path}: no such file or folder; {REMEDY}{remedy}.")
    found = [path / name for name in names if (path / name).is_file()]
    if found:
        return found[0]
    others = [what for name, what in OTHER_FILES.items() if (path / name).is_file()]
    holds = f", only {' and '.join(others)}, which kwiden does not read" if others else ""
    raise ValueError(f"{flag} {path} is a folder with no tokenizer.json or vocab.txt in it{holds}: {REMEDY}{remedy}.")
