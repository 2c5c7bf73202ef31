"""The files beside a checkpoint's weights that the next tool reads, and that
growth and saving leave true: the tokenizer's and generation's (the
vocabulary does not grow), and sentence-transformers' (its list of modules,
its pooling, its maximum length), so that a grown MiniLM still pools as the
original did. `copy_companions(src, dst, hidden_size)` copies them, the
pooling's width set to the new one.

A sentence-transformers module with weights after the encoder (a `Dense`)
reads the encoder's width, which growth changes: a folder listing one is
refused (`refuse_weighted_modules`), naming it, rather than copied into a
folder whose vectors sentence-transformers would compute with the wrong
weights, or refuse to compute."""

import pathlib
import shutil

from kwiden.files import json_text, read_json

TOKENIZER_FILES = ("vocab.txt", "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model", "generation_config.json", "chat_template.jinja", "chat_template.json")  # fmt: skip
SENTENCE_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
# sentence-transformers' modules whose folders hold no weights: they compute the same on a wider encoder.
WEIGHTLESS_MODULES = ("Transformer", "Pooling", "Normalize")
POOLING_WIDTH = "word_embedding_dimension"


def sentence_modules(folder):
    """`[(kind, path)]` of the modules a sentence-transformers `modules.json` lists (none without one)."""
    path = pathlib.Path(folder) / "modules.json"
    if not path.is_file():
        return []
    listed = read_json(path, f"{path} is not the JSON sentence-transformers writes", "repair it")
    if not isinstance(listed, list) or not all(isinstance(m, dict) and isinstance(m.get("type"), str) for m in listed):
        raise ValueError(f"{path} is not a list of modules with their types, as sentence-transformers writes; "
                         "repair it.")  # fmt: skip
    return [(module["type"], str(module.get("path", ""))) for module in listed]


def weighted_modules(folder):
    """The modules `modules.json` lists that hold weights of their own (a `Dense` after the pooling)."""
    return [kind for kind, _ in sentence_modules(folder) if kind.rsplit(".", 1)[-1] not in WEIGHTLESS_MODULES]


def refuse_weighted_modules(folder, what):
    """Refuse a folder whose sentence-transformers modules hold weights `what` (growth) would not make fit."""
    others = weighted_modules(folder)
    if others:
        raise ValueError(
            f"{pathlib.Path(folder) / 'modules.json'} lists {', '.join(others)} after the encoder: its weights read "
            f"the encoder's width, which {what} changes, and kwiden does not grow them. Grow a copy of the folder "
            "without that module (and its line in modules.json), and train the module again on the grown encoder."
        )


def companion_files(folder):
    """The companions `folder` holds, as paths relative to it: the tokenizer's and generation's files, and
    sentence-transformers' files and its weightless modules' folders."""
    folder = pathlib.Path(folder)
    found = [name for name in (*TOKENIZER_FILES, *SENTENCE_FILES) if (folder / name).is_file()]
    for _, path in sentence_modules(folder):
        if path and (folder / path).is_dir():
            found += sorted(str(p.relative_to(folder)) for p in (folder / path).rglob("*") if p.is_file())
    return tuple(found)


def copy_companions(src, dst, hidden_size):
    """Copy `src`'s companions (`companion_files`) into `dst`, a pooling's width written as `hidden_size`; their
    paths. A module with weights is refused first (`refuse_weighted_modules`)."""
    src, dst = pathlib.Path(src), pathlib.Path(dst)
    refuse_weighted_modules(src, "growth")
    pooling = {path for kind, path in sentence_modules(src) if kind.endswith("Pooling")}
    copied = companion_files(src)
    for name in copied:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        if str(pathlib.Path(name).parent) in pooling and pathlib.Path(name).name == "config.json":
            config = read_json(src / name, f"{src / name} is not JSON", "repair it")
            if isinstance(config, dict) and POOLING_WIDTH in config:
                config[POOLING_WIDTH] = hidden_size
            (dst / name).write_text(json_text(config, name), encoding="utf-8")
        else:
            shutil.copyfile(src / name, dst / name)
    return copied
