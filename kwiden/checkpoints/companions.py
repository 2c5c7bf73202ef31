"""The files beside a checkpoint's weights that the next tool reads, and that
growth and saving leave true: the tokenizer's and generation's (the
vocabulary does not grow), and sentence-transformers' (its list of modules,
its pooling, its maximum length), so that a grown MiniLM still pools as the
original did. `copy_companions(src, dst, width)` copies them, the pooling's
width set to the new one.

A sentence-transformers module with weights after the encoder (a `Dense`)
reads the encoder's width: it is copied where the width is the source's,
and refused, naming it, where growth changed it, rather than copied into a
folder whose vectors sentence-transformers would compute with the wrong
weights, or refuse to compute. A module's folder must lie inside the
checkpoint's: `modules.json` is a user's file, and a path such as `.` or
`../x` would copy the weights or write outside the target."""

import dataclasses
import pathlib
import shutil

from kwiden.checkpoints.formats import CONFIG_FILES
from kwiden.files import json_text, read_json

TOKENIZER_FILES = ("vocab.txt", "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model", "generation_config.json", "chat_template.jinja", "chat_template.json")  # fmt: skip
SENTENCE_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
ENCODER_MODULE = "Transformer"  # the checkpoint itself, at the folder's top
# sentence-transformers' modules whose folders hold no weights: they compute the same on a wider encoder.
WEIGHTLESS_MODULES = (ENCODER_MODULE, "Pooling", "Normalize")
POOLING_WIDTH = "word_embedding_dimension"


@dataclasses.dataclass(frozen=True)
class Module:
    """One module `modules.json` lists: its kind (`Pooling`, `Dense`, …: the type's last part), its full type, and
    its folder relative to the checkpoint's (`.` for the encoder, which is the checkpoint)."""

    kind: str
    type: str
    path: pathlib.PurePosixPath

    @property
    def weighted(self):
        return self.kind not in WEIGHTLESS_MODULES


def sentence_modules(folder):
    """The `Module`s a sentence-transformers `modules.json` lists (none without one); a module other than the
    encoder whose folder is not a sub-folder of the checkpoint's is refused, naming it."""
    folder = pathlib.Path(folder)
    path = folder / "modules.json"
    if not path.is_file():
        return []
    listed = read_json(path, f"{path} is not the JSON sentence-transformers writes", "repair it")
    if not isinstance(listed, list) or not all(isinstance(m, dict) and isinstance(m.get("type"), str) for m in listed):
        raise ValueError(f"{path} is not a list of modules with their types, as sentence-transformers writes; "
                         "repair it.")  # fmt: skip
    modules = []
    for module in listed:
        kind = module["type"].rsplit(".", 1)[-1]
        where = pathlib.PurePosixPath(str(module.get("path", "")))
        inside = not where.is_absolute() and ".." not in where.parts
        if kind != ENCODER_MODULE and (not inside or where.parts == ()):
            raise ValueError(f"{path}: {module['type']}'s path {str(module.get('path', ''))!r} is not a sub-folder of "
                             f"{folder}; each module but the encoder lives in one of its own (1_Pooling).")  # fmt: skip
        modules.append(Module(kind, module["type"], where))
    return modules


def pooling_config(folder):
    """`(the pooling module's config, its path)`, or `(None, None)` for a folder without one; a `modules.json` that
    lists a Pooling whose `config.json` is missing is refused."""
    folder = pathlib.Path(folder)
    listed = [module for module in sentence_modules(folder) if module.kind == "Pooling"]
    path = folder / (listed[0].path if listed else "1_Pooling") / "config.json"
    if not path.is_file():
        if listed:
            raise ValueError(f"{folder / 'modules.json'} lists a Pooling module at {str(listed[0].path)!r}, but "
                             f"{path} is missing: restore it, or pass pooling=.")  # fmt: skip
        return None, None
    config = read_json(path, f"{path} is not the JSON sentence-transformers writes", "repair it, or pass pooling=")
    return config, path


def width_of(folder):
    """The hidden size a checkpoint folder's config says (`hidden_size`), or None."""
    for name in CONFIG_FILES.values():
        path = pathlib.Path(folder) / name
        if path.is_file():
            config = read_json(path, f"{path} is not JSON", "repair it")
            return config.get("hidden_size") if isinstance(config, dict) else None
    return None


def refuse_weighted_modules(folder, width, remedy):
    """Refuse a folder whose sentence-transformers modules hold weights that read another width than `width` (a
    grown model's), ending with `remedy`."""
    weighted = [module.type for module in sentence_modules(folder) if module.weighted]
    before = width_of(folder)
    if weighted and before != width:
        raise ValueError(
            f"{pathlib.Path(folder) / 'modules.json'} lists {', '.join(weighted)} after the encoder: its weights read "
            f"the encoder's {before} features, and this model's are {width}; kwiden does not grow them. {remedy}"
        )


def companion_files(folder):
    """The companions `folder` holds, as paths relative to it: the tokenizer's and generation's files, and
    sentence-transformers' files and its modules' folders (the encoder's, which is the checkpoint, left out)."""
    folder = pathlib.Path(folder)
    found = [name for name in (*TOKENIZER_FILES, *SENTENCE_FILES) if (folder / name).is_file()]
    for module in sentence_modules(folder):
        if module.kind != ENCODER_MODULE and (folder / module.path).is_dir():
            found += sorted(str(p.relative_to(folder)) for p in (folder / module.path).rglob("*") if p.is_file())
    return tuple(found)


GROWN_REMEDY = ("Grow a copy of the folder without that module (and its line in modules.json), and train the module "
                "again on the grown encoder.")  # fmt: skip


def copy_companions(src, dst, width, remedy=GROWN_REMEDY):
    """Copy `src`'s companions (`companion_files`) into `dst`, for a model `width` wide: a pooling's width written
    as `width`, a module with weights refused where `width` is not the source's (the refusal ending with
    `remedy`); their paths."""
    src, dst = pathlib.Path(src), pathlib.Path(dst)
    refuse_weighted_modules(src, width, remedy)
    _, pooling = pooling_config(src)
    copied = companion_files(src)
    for name in copied:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        if pooling is not None and src / name == pooling:
            config = read_json(pooling, f"{pooling} is not JSON", "repair it")
            if isinstance(config, dict) and POOLING_WIDTH in config:
                config[POOLING_WIDTH] = width
            (dst / name).write_text(json_text(config, name), encoding="utf-8")
        else:
            shutil.copyfile(src / name, dst / name)
    return copied


def refuse_stale_sentence_files(directory, copied):
    """Refuse saving into an existing folder whose sentence-transformers files the save does not replace: they
    would describe another model (its pooling, its width) to the next tool."""
    stale = [name for name in SENTENCE_FILES if (pathlib.Path(directory) / name).is_file() and name not in copied]
    if stale:
        raise ValueError(f"{directory} holds {', '.join(stale)} (sentence-transformers'), which this save does not "
                         "write: they would describe another model. Delete them, or save into another folder.")  # fmt: skip
