"""Which checkpoint a path holds: Hugging Face folders (`config.json` +
`model.safetensors`, or shards a `model.safetensors.index.json` names) and
Google's TensorFlow checkpoints (`bert_config.json` + `bert_model.ckpt.*`)."""

import collections.abc
import dataclasses
import pathlib
import re
from typing import Optional

from kwiden.checkpoints.manifest import verify_manifest
from kwiden.files import read_json

FORMATS = ("hf", "google")
SAFETENSORS = "model.safetensors"
# A sharded Hugging Face checkpoint: its index maps each tensor to its file.
SAFETENSORS_INDEX = "model.safetensors.index.json"
GOOGLE_PREFIX = "bert_model.ckpt"
CONFIG_FILES = {"hf": "config.json", "google": "bert_config.json"}
FORMAT_TITLES = {"hf": "Hugging Face's (model.safetensors)", "google": "Google's (bert_model.ckpt.*)"}
OWNERS = {"hf": "Hugging Face's", "google": "Google's"}


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint found on disk (`open_checkpoint`'s): its `format`, its
    weights' `path` (a safetensors file or a Google prefix), the `config`
    file beside them (None where there is none) and the files its
    `kwiden-manifest.json` vouched for (`verified`, empty without one).
    Its tensors' reader is opened once and kept (`reading.tensors_of`), so
    that checking a config and loading read the files' headers once."""

    format: str
    path: pathlib.Path
    config: Optional[pathlib.Path] = None
    verified: tuple = ()
    opened: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)


def open_checkpoint(checkpoint_path):
    """Find a checkpoint (`detect_format`) and its config, and check its
    files against the folder's `kwiden-manifest.json` where there is one
    (`verify_manifest`). Returns a `Checkpoint`."""
    if isinstance(checkpoint_path, Checkpoint):
        return checkpoint_path
    folder = pathlib.Path(checkpoint_path)
    verified = verify_manifest(folder) if folder.is_dir() else ()  # first: it names a missing file best
    format, path = detect_format(checkpoint_path)
    if not folder.is_dir():
        verified = verify_manifest(path.parent)
    return Checkpoint(format, path, _config_file(format, path), verified)


def config_beside(checkpoint_path):
    """The `config.json` or `bert_config.json` beside a checkpoint's weights
    (the format's own where a folder holds both)."""
    if isinstance(checkpoint_path, Checkpoint):
        path, config = checkpoint_path.path, checkpoint_path.config
    else:
        format, path = detect_format(checkpoint_path)
        config = _config_file(format, path)
    if config is None:
        raise FileNotFoundError(f"No config.json or bert_config.json beside {path}; pass `config` or `config_path`.")
    return config


def folder_config(checkpoint):
    """`(folder, its config file, the config)` of the checkpoint folder `checkpoint`, refused where it is no folder
    or its config is not JSON; read without Keras, so that a command refuses a wrong folder at once."""
    folder = pathlib.Path(checkpoint)
    if not folder.is_dir():
        raise ValueError(f"{checkpoint} is not a checkpoint folder (one with config.json, weights and a tokenizer).")
    path = config_beside(folder)
    return folder, path, read_json(path, f"{path} is not JSON", "repair it")


def _config_file(format, path):
    own = CONFIG_FILES[format]
    names = [own] + [name for name in CONFIG_FILES.values() if name != own]
    return next((path.parent / name for name in names if (path.parent / name).is_file()), None)


def detect_format(checkpoint_path):
    """`(format, path)`: a Hugging Face safetensors file, or a Google checkpoint prefix.

    A folder must hold one checkpoint: one with `model.safetensors` and a
    Google checkpoint, or two Google checkpoints, is refused, naming the
    files (pass the one meant instead of the folder).
    """
    path = pathlib.Path(checkpoint_path)
    if path.is_dir():
        found = weight_files(path)
        if len(found) > 1:
            files = "; ".join(describe(path, name) for name in found)
            raise ValueError(
                f"The folder {path} holds more than one checkpoint ({files}), and kwiden cannot tell which is meant: "
                "pass the one to load as checkpoint_path (a .safetensors file or a Google prefix such as "
                f"{path / GOOGLE_PREFIX}), or move the others away."
            )
        if not found:
            torch_only = " (PyTorch's pytorch_model.bin is not read: save it as safetensors)" * any(
                path.glob("pytorch_model*.bin")
            )
            raise FileNotFoundError(
                f"No {SAFETENSORS}, {SAFETENSORS_INDEX} or *.ckpt.index in {path}: a Hugging Face folder holds "
                f"one of the first two, a Google one the third{torch_only}."
            )
        return _weights_at(path / found[0])
    if path.is_file() and (
        path.suffix == ".safetensors" or path.name == SAFETENSORS_INDEX or _GOOGLE_FILE.search(path.name)
    ):
        return _weights_at(path)
    if path.with_name(path.name + ".index").is_file():
        return "google", path
    if path.exists():
        raise ValueError(
            f"{path} is not a checkpoint kwiden reads: give a folder, a .safetensors file or a Google "
            "checkpoint prefix (such as bert_model.ckpt, beside bert_model.ckpt.index)."
        )
    if path.suffix == ".safetensors":
        raise FileNotFoundError(f"The checkpoint file {path} does not exist.")
    raise FileNotFoundError(
        f"The checkpoint folder {path} does not exist (nor a Google checkpoint {path}.index): give a folder "
        "with model.safetensors or bert_model.ckpt.*, a .safetensors file or a Google checkpoint prefix."
    )


# A Google checkpoint's own files: `<prefix>.index` and `<prefix>.data-00000-of-00001`.
_GOOGLE_FILE = re.compile(r"\.(index|data-\d+-of-\d+)$")


def weight_files(folder):
    """The weights in `folder`: `model.safetensors`, a sharded one's index
    and each Google checkpoint's index."""
    indexes = sorted(p.name for p in folder.glob("*.ckpt*.index") if p.is_file())
    hf = [name for name in (SAFETENSORS, SAFETENSORS_INDEX) if (folder / name).is_file()]
    return hf + indexes


def _weights_at(file):
    """`(format, path)` of a weight file: a safetensors file, or the prefix of a Google checkpoint's file."""
    if file.suffix == ".safetensors" or file.name == SAFETENSORS_INDEX:
        return "hf", file
    prefix = file.with_name(_GOOGLE_FILE.sub("", file.name))
    if not prefix.with_name(prefix.name + ".index").is_file():
        raise FileNotFoundError(f"{file} is part of a Google checkpoint, but {prefix}.index is missing.")
    return "google", prefix


def google_files(folder, prefix):
    """The files of the Google checkpoint `prefix` (a name) in `folder`."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(prefix + ".") and _GOOGLE_FILE.search(p.name))


def describe(folder, weight_file):
    """A weight file and the files that go with it, with whose they are."""
    if weight_file in (SAFETENSORS, SAFETENSORS_INDEX):
        return f"{OWNERS['hf']} {weight_file}"
    return f"{OWNERS['google']} {', '.join(google_files(folder, weight_file[: -len('.index')]))}"


class Tensors(collections.abc.Mapping):
    """A mapping of tensors read when asked for; `names` holds their names
    (and what the reader needs to find each)."""

    names = {}

    def __contains__(self, name):
        return name in self.names

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)


def damaged(path, error):
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"The checkpoint {path} is damaged or not a checkpoint ({detail}); write or download it again."
