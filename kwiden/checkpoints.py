"""Checkpoint formats: Hugging Face folders (`config.json` + `model.safetensors`,
read with numpy only) and Google's TensorFlow checkpoints (`bert_config.json` +
`bert_model.ckpt.*`, read and written with TensorFlow's checkpoint ops,
TensorFlow imported only then).

This module knows the files; the model's family (`kwiden.models.Family`) knows
the rest: which tensor holds each weight (`checkpoint_names`) and the
`config.json` (`to_hf_config`). Each kwiden variable is named by its layer
and weight (`kwiden.naming`). Loading is all or nothing: a missing tensor, a
wrong shape, a NaN or a damaged file raises before any weight is assigned.

What kwiden writes it can vouch for: `save_checkpoint` writes into a
temporary sibling folder and moves the files into place only once all are
written, with `kwiden-manifest.json` recording each file's size and sha256;
loading checks the files against it wherever it is found, and refuses a folder
that holds more than one checkpoint.
"""

import collections.abc
import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import re
from typing import Optional

import numpy as np

from kwiden import naming
from kwiden.files import give_mode, json_text, temporary_beside
from kwiden.layout import Layout, checkpoint_shape, join_parts, to_checkpoint, to_kwiden
from kwiden.models.config import read_config_file
from kwiden.models.family import FAMILIES, family_of, get_family

FORMATS = ("hf", "google")
SAFETENSORS = "model.safetensors"
# A sharded Hugging Face checkpoint: its index maps each tensor to its file.
SAFETENSORS_INDEX = "model.safetensors.index.json"
GOOGLE_PREFIX = "bert_model.ckpt"
CONFIG_FILES = {"hf": "config.json", "google": "bert_config.json"}
FORMAT_TITLES = {"hf": "Hugging Face's (model.safetensors)", "google": "Google's (bert_model.ckpt.*)"}
OWNERS = {"hf": "Hugging Face's", "google": "Google's"}

# The record of a checkpoint kwiden wrote: each file's size and sha256.
MANIFEST = "kwiden-manifest.json"
MANIFEST_VERSION = 1

# The layers whose rows are the vocabulary (`keep_tokens` selects them), and
# the optional heads a checkpoint may lack.
VOCABULARY_ROWS = (naming.EMBEDDING_TOKEN, naming.MLM_BIAS, naming.OUTPUT_LOGITS)
HEADS = (naming.POOLER_DENSE, naming.MLM_DENSE, naming.MLM_NORM, naming.MLM_BIAS)


# Other names the same tensor has in Hugging Face files: older checkpoints
# (bert-base-uncased among them) keep LayerNorm's `gamma`/`beta`, and some MLM
# files hold the output bias only as the decoder's.
HF_ALTERNATIVES = {".LayerNorm.weight": ".LayerNorm.gamma", ".LayerNorm.bias": ".LayerNorm.beta",
                   "cls.predictions.bias": "cls.predictions.decoder.bias"}  # fmt: skip


def find_tensor(name, tensors):
    """`name`, or the alternative name under which `tensors` holds it."""
    if name in tensors:
        return name
    for new, old in HF_ALTERNATIVES.items():
        if name.endswith(new) and name[: -len(new)] + old in tensors:
            return name[: -len(new)] + old
    return None


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint found on disk (`open_checkpoint`'s): its `format`, its
    weights' `path` (a safetensors file or a Google prefix), the `config`
    file beside them (None where there is none) and the files its
    `kwiden-manifest.json` vouched for (`verified`, empty without one)."""

    format: str
    path: pathlib.Path
    config: Optional[pathlib.Path] = None
    verified: tuple = ()


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
        found = _weight_files(path)
        if len(found) > 1:
            files = "; ".join(_describe(path, name) for name in found)
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


def _weight_files(folder):
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


def _google_files(folder, prefix):
    """The files of the Google checkpoint `prefix` (a name) in `folder`."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(prefix + ".") and _GOOGLE_FILE.search(p.name))


def _describe(folder, weight_file):
    """A weight file and the files that go with it, with whose they are."""
    if weight_file in (SAFETENSORS, SAFETENSORS_INDEX):
        return f"{OWNERS['hf']} {weight_file}"
    return f"{OWNERS['google']} {', '.join(_google_files(folder, weight_file[: -len('.index')]))}"


def verify_manifest(folder):
    """Check each file `folder`'s `kwiden-manifest.json` lists against its
    recorded size and sha256. Returns the names checked, or `()` where there
    is no manifest (a folder written by another tool). Raises naming the
    first file that is missing or differs.
    """
    folder = pathlib.Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        return ()
    files = _read_manifest(path)
    for name, record in files.items():
        file = folder / name
        if not file.is_file():
            raise FileNotFoundError(
                f"{file} is missing, though {path} lists it: the file was deleted, or a save into {folder} was "
                "interrupted. Save or download the checkpoint again."
            )
        size = file.stat().st_size
        if size != record["bytes"] or _sha256(file) != record["sha256"]:
            how = f"{size} bytes where {record['bytes']} were written" if size != record["bytes"] else "another sha256"
            raise ValueError(
                f"{file} is not the file kwiden wrote ({how}, says {MANIFEST}): it was damaged or changed since, or "
                "a save into this folder was interrupted. Save or download the checkpoint again; if another tool "
                f"rewrote it on purpose, delete {path}."
            )
    return tuple(files)


def _read_json(path, problem, remedy):
    """The JSON value in `path`; a ValueError saying `problem`, the parser's
    error and the `remedy` where it is not UTF-8 JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{problem} ({error}); {remedy}.") from None


def _read_manifest(path):
    """`{file name: {"bytes": …, "sha256": …}}` from a manifest, checked."""
    problem = f"{path} is not a manifest kwiden can read"
    manifest = _read_json(path, problem, "save the checkpoint again, or delete it to load unchecked")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("kwiden_manifest") != MANIFEST_VERSION:
        raise ValueError(
            f"{problem} (version {MANIFEST_VERSION}, with its files' sizes and sha256); save the checkpoint again."
        )
    for name, record in files.items():
        if (
            pathlib.Path(name).name != name
            or name in ("", ".", "..")
            or not isinstance(record, dict)
            or not isinstance(record.get("bytes"), int)
            or not re.fullmatch(r"[0-9a-f]{64}", str(record.get("sha256")))
        ):
            raise ValueError(f"{problem}: its entry {name!r} is not a file name with bytes and a sha256.")
    return files


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_tensors(format, path):
    """`{tensor name: array}`, each tensor read when asked for: from one
    safetensors file, from the shards a `model.safetensors.index.json` names,
    or from a Google checkpoint. A file that cannot be read raises a
    ValueError saying it is damaged; a shard the index names but the folder
    lacks, a FileNotFoundError naming it."""
    if format == "hf":
        return SafetensorsTensors(path)
    return _read_google(path)


class _Named(collections.abc.Mapping):
    """A mapping of tensors read when asked for; `names` holds their names
    (and what the reader needs to find each)."""

    names = {}

    def __contains__(self, name):
        return name in self.names

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)


class SafetensorsTensors(_Named):
    """The tensors of a safetensors file, or of the shards a
    `model.safetensors.index.json` names, read one by one (numpy arrays,
    bfloat16 as `ml_dtypes.bfloat16`) so that no more than one is held.
    `.files` maps each tensor to its file; `.shape(name)` and `.dtype(name)`
    read the header only."""

    def __init__(self, path):
        path = pathlib.Path(path)
        self.path = path
        self._handles = {}
        if path.name == SAFETENSORS_INDEX:
            self.files = {name: path.parent / file for name, file in _read_index(path).items()}
        else:
            self.files = {name: path for name in self._open(path).keys()}
        for file in dict.fromkeys(self.files.values()):
            self._check_shard(file)

    def _check_shard(self, file):
        if not file.is_file():
            wanted = next(name for name, other in self.files.items() if other == file)
            raise FileNotFoundError(
                f"The shard {file} is missing: {self.path} names it for '{wanted}' and other tensors. "
                "Download or copy the whole checkpoint again."
            )
        held = set(self._open(file).keys())
        lacking = [name for name, other in self.files.items() if other == file and name not in held]
        if lacking:
            raise ValueError(
                f"{self.path} says '{lacking[0]}' is in {file}, which does not hold it: the index and its shards "
                "come from different checkpoints. Download or copy the whole checkpoint again."
            )

    def _open(self, file):
        from safetensors import SafetensorError, safe_open

        if file not in self._handles:
            try:
                self._handles[file] = safe_open(str(file), framework="numpy")
            except (SafetensorError, OSError) as error:
                raise ValueError(_damaged(file, error)) from None
        return self._handles[file]

    def __getitem__(self, name):
        from safetensors import SafetensorError

        file = self.files[name]
        try:
            return self._open(file).get_tensor(name)
        except (SafetensorError, OSError) as error:
            raise ValueError(_damaged(file, f"reading '{name}' failed: {error}")) from None

    def shape(self, name):
        return tuple(self._open(self.files[name]).get_slice(name).get_shape())

    @property
    def names(self):
        return self.files

    def release(self):
        """Close the files opened so far (they are mapped into memory, and the
        pages read stay resident while they are open); they reopen when read."""
        self._handles.clear()

    def dtype(self, name):
        """The tensor's dtype as safetensors names it (`"F32"`, `"BF16"`)."""
        return self._open(self.files[name]).get_slice(name).get_dtype()


def _read_index(path):
    """`{tensor: shard file name}` from a `model.safetensors.index.json`, checked."""
    problem = f"{path} is not a safetensors index kwiden can read"
    index = _read_json(path, problem, "download or copy the checkpoint again")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(file, str) and pathlib.Path(file).name == file and file.endswith(".safetensors")
        for file in weight_map.values()
    ):
        raise ValueError(f"{problem}: it needs a `weight_map` from each tensor to a .safetensors file beside it.")
    return weight_map


def _damaged(path, error):
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"The checkpoint {path} is damaged or not a checkpoint ({detail}); write or download it again."


def _read_google(path):
    import tensorflow as tf  # only Google-format files need TensorFlow

    try:
        return _LazyTensors(tf.train.load_checkpoint(str(path)), path)
    except (tf.errors.OpError, IndexError, RuntimeError) as error:
        raise ValueError(_damaged(path, error)) from None


class _LazyTensors(_Named):
    """A Google checkpoint's tensors, read when asked for; a tensor that
    cannot be read (a truncated or damaged data file) raises a ValueError."""

    def __init__(self, reader, path):
        self.reader = reader
        self.path = path
        self.shapes = reader.get_variable_to_shape_map()
        self.names = self.shapes

    def shape(self, name):
        return tuple(self.shapes[name])

    def __getitem__(self, name):
        if name not in self.shapes:
            raise KeyError(name)
        import tensorflow as tf  # imported already: the reader is TensorFlow's

        try:
            return self.reader.get_tensor(name)
        except (tf.errors.OpError, IndexError, RuntimeError) as error:
            raise ValueError(_damaged(self.path, f"reading '{name}' failed: {error}")) from None


def _family(model, family):
    """`family` (a name or a Family), or the one the model's name says."""
    return family_of(model) if family is None else get_family(family)


def _num_blocks(model):
    return naming.count_blocks(layer.name for layer in model.layers)


def _check_format(family, format):
    """Raise unless the family has checkpoint names in `format`."""
    if family.checkpoint_names is None:
        raise ValueError(_no_place(family))
    if format not in family.formats:
        kept = " and ".join(FORMAT_TITLES[f] for f in family.formats)
        raise ValueError(f"{family.title} weights are kept in {kept} checkpoints only, not {FORMAT_TITLES[format]}.")


def _names(family, num_blocks, format, prefix=""):
    """The family's name map for `format`."""
    _check_format(family, format)
    return family.checkpoint_names(num_blocks, format, prefix)


def _no_place(family):
    kept = ", ".join(other.title for other in FAMILIES.values() if other.to_hf_config is not None)
    return (
        f"A {family.title} model has no place in a checkpoint: kwiden reads and writes checkpoints "
        f"of {kept}; save it as a .keras model instead."
    )


def load_weights(model, checkpoint_path, keep_tokens=None, family=None, allow_nonfinite=False):
    """Fill every weight of `model` (a BERT or RoFormer) from a checkpoint.

    `checkpoint_path`: a folder, a safetensors file, a Google prefix, or an
    `open_checkpoint` `Checkpoint`. `keep_tokens`: the vocabulary ids to
    keep, in their new order (the model was built with
    `vocab_size=len(keep_tokens)`). `family`: the model's (a name or a
    `Family`); by default the one named like the model. Raises, naming the
    variable or the file, before assigning anything if a tensor is missing,
    has the wrong shape or holds NaN or infinite values (unless
    `allow_nonfinite=True`), if a file is damaged or differs from the
    folder's `kwiden-manifest.json`, or if the folder holds two checkpoints.
    """
    family = _family(model, family)
    checkpoint = open_checkpoint(checkpoint_path)
    format, path = checkpoint.format, checkpoint.path
    _check_format(family, format)
    tensors = read_tensors(format, path)
    blocks = _num_blocks(model)
    prefix = read_prefix(family, tensors, blocks) if format == "hf" else ""
    check_blocks(family, tensors, blocks, format, prefix, path)
    names = _names(family, blocks, format, prefix)
    placed = list(_placed(model, family, names))
    values = [
        (variable, _value(tensors, layer, variable, name, kind, format, keep_tokens, path, allow_nonfinite))
        for layer, variable, name, kind in placed
    ]
    one_dtype(((name, np.dtype(value.dtype).name) for (_, _, name, _), (_, value) in zip(placed, values)), path)
    check_nothing_dropped(family, names, {name for *_, name, _ in placed}, tensors, path)
    cast = [
        (variable, _cast(value, variable.dtype, name, allow_nonfinite, path))
        for (_, _, name, _), (variable, value) in zip(placed, values)
    ]
    for variable, value in cast:  # only once every weight has its value
        variable.assign(value)
    return model


def _cast(value, dtype, name, allow_nonfinite, checkpoint_path):
    """`value` in the model's `dtype`; refused where finite values would
    overflow it (a float32 norm of 70000 in a float16 model)."""
    cast = value.astype(dtype)
    bad = 0 if allow_nonfinite or cast.dtype == value.dtype else nonfinite(cast) - nonfinite(value)
    if bad:
        raise ValueError(
            overflow_message(f"The checkpoint {checkpoint_path}'s '{name}'", cast.dtype, bad, value)
            + " Build the model in float32 or bfloat16 (keras.config.set_dtype_policy), or load it anyway with "
            "allow_nonfinite=True."
        )
    return cast


def overflow_message(what, dtype, bad, source):
    """Why `what`, finite in `source`, cannot be held in `dtype`: `bad` of its
    entries would be infinite."""
    import ml_dtypes  # numpy's finfo knows no bfloat16; installed with TensorFlow

    largest = float(np.max(np.abs(np.asarray(source, np.float64))))
    return (
        f"{what} does not fit in {np.dtype(dtype).name}: {bad} of its entries would be infinite there, its "
        f"largest magnitude being {largest:g} where {np.dtype(dtype).name} holds at most "
        f"{float(ml_dtypes.finfo(dtype).max):g}."
    )


def _value(tensors, layer, variable, name, kind, format, keep_tokens, checkpoint_path, allow_nonfinite):
    """The checkpoint's value for `variable`, checked and in kwiden's layout."""
    found = find_tensor(name, tensors)
    if found is None:
        head = " (build without that head, or use a checkpoint that has it)" if layer.name in HEADS else ""
        raise ValueError(f"The checkpoint {checkpoint_path} has no tensor '{name}' for '{variable.path}'{head}.")
    value = tensors[found]
    if keep_tokens is not None and layer.name in VOCABULARY_ROWS:
        value = value[_check_keep_tokens(keep_tokens, value.shape[0])]
    layout = Layout.of(kind, format)
    expected = checkpoint_shape(variable.shape, layout)
    if tuple(value.shape) != expected:
        raise ValueError(
            f"'{variable.path}' (shape {tuple(variable.shape)}) needs '{name}' of shape {expected}; "
            f"the checkpoint's has {tuple(value.shape)}: the config does not match the checkpoint."
        )
    bad = 0 if allow_nonfinite else nonfinite(value)
    if bad:
        raise ValueError(
            f"The checkpoint {checkpoint_path}'s tensor '{found}' (for '{variable.path}') holds {bad} NaN or "
            "infinite values, which would make the model's outputs NaN; pass allow_nonfinite=True to load it anyway."
        )
    return to_kwiden(value, tuple(variable.shape), layout)


def check_nothing_dropped(family, names, used, tensors, checkpoint_path):
    """Refuse a checkpoint holding block tensors the model reads no weight
    from (biases its config leaves out, a Qwen2 read as a LLaMA, a Qwen3's
    q_norm), but for the buffers the family declares (`Family.buffers`),
    and an output head other than the token table where the config ties the
    two: loading would compute another function than the checkpoint's.
    `names` is the model's name map, `used` the names of the tensors read.
    Tensors outside the blocks the model has no weight for (a head it was
    built without) are left out."""
    for (layer, weight), (name, _) in names.items():
        found = None if name in used else find_tensor(name, tensors)
        if found is None:
            continue
        if layer == naming.OUTPUT_LOGITS:
            token = names[naming.EMBEDDING_TOKEN, "embeddings"][0]
            if np.array_equal(tensors[found], tensors[find_tensor(token, tensors)]):
                continue  # the tied head, written out as well
            raise ValueError(
                f"The checkpoint {checkpoint_path} holds an output head '{found}' that differs from its token table "
                f"'{token}', but the config ties the two (tie_word_embeddings): loading would drop the head. Pass "
                "tie_word_embeddings=False, or fix the config."
            )
        if naming.block_index(layer) is not None:
            raise ValueError(_dropped(checkpoint_path, found, family, f" ('{layer}/{weight}')"))
    read = {find_tensor(name, tensors) for name in used}
    pattern = block_pattern(names)
    for name in tensors:
        match = pattern.match(name) if pattern is not None and name not in read else None
        if match and not _buffer(name, match.end(), family, read):
            raise ValueError(_dropped(checkpoint_path, name, family))


def _buffer(name, block_end, family, read):
    """Whether a block tensor no weight reads holds no weight of its own: a
    buffer the family declares, or a TensorFlow optimizer's slot of a tensor
    that is read (`…/kernel/adam_m`, `…/kernel/Adam_1`, `…/ExponentialMovingAverage`)."""
    if any(re.fullmatch(buffer, name[block_end:]) for buffer in family.buffers):
        return True
    parts = name.split("/")
    return any("/".join(parts[:n]) in read for n in range(1, len(parts)))


def _dropped(checkpoint_path, tensor, family, weight=""):
    return (
        f"The checkpoint {checkpoint_path} holds '{tensor}', for which this {family.title} has no weight{weight}: "
        "its config leaves it out (attention_bias, mlp_bias, …), or the checkpoint is another family's (a "
        "Qwen3's q_norm and k_norm, say). Loading would drop it and compute another function; fix the config, or "
        "leave `model` out to read the family from config.json."
    )


def block_pattern(names):
    """A regular expression matching the start of the tensor names in a
    block (`model.layers.7.`), the block's index its group 1, from a name map
    (`Family.checkpoint_names`'s); None where the map has no block.

    >>> from kwiden.models import llama
    >>> block_pattern(llama.checkpoint_names(1)).match("model.layers.12.mlp.up_proj.weight").group(0, 1)
    ('model.layers.12.', '12')
    """
    first = [name for (layer, _), (name, _) in names.items() if naming.block_index(layer) == 0]
    if not first:
        return None
    common = os.path.commonprefix(first)
    cut = common[: max(common.rfind("."), common.rfind("/")) + 1]  # up to its last separator
    numbers = list(re.finditer(r"\d+", cut)) or list(re.finditer(r"\d+", common))  # names such as `block0_q`
    if not numbers:
        return None  # no index in the block's names: nothing says which tensors are a block's
    common = cut if re.search(r"\d", cut) else common
    index = numbers[-1]  # the block's index: the last number in the block's prefix
    return re.compile(re.escape(common[: index.start()]) + r"(\d+)" + re.escape(common[index.end() :]))


# The dtypes of the weights kwiden loads, as numpy and safetensors name them.
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16", "F64", "F32", "F16", "BF16")


def one_dtype(named_dtypes, checkpoint_path, files=None):
    """`(dtype, a tensor of it)` for `(tensor name, dtype)` pairs of one float
    dtype (numpy's or safetensors' names); a checkpoint holding integers (a
    quantized one's) is refused, naming the tensor, and one mixing dtypes
    (put together from different sources), naming two tensors, with their
    shard files where `files` maps tensors to files."""
    first = {}
    for name, dtype in named_dtypes:
        if dtype not in FLOAT_DTYPES:
            where = f" ({files[name].name})" if files else ""
            raise ValueError(
                f"The checkpoint {checkpoint_path}'s tensor '{name}'{where} is {dtype}, and kwiden loads float "
                "weights (float32, bfloat16, float16, float64): integer weights are a quantized checkpoint's, and "
                "mean nothing without their scales (tensors such as *.weight_scale). Dequantize the checkpoint to "
                "a float dtype first."
            )
        first.setdefault(dtype, name)
    if len(first) > 1:
        (a, name_a), (b, name_b) = list(first.items())[:2]
        where = {name: f" ({files[name].name})" if files else "" for name in (name_a, name_b)}
        raise ValueError(
            f"The checkpoint {checkpoint_path} mixes dtypes: '{name_a}'{where[name_a]} is {a} and "
            f"'{name_b}'{where[name_b]} is {b}. A checkpoint holds its weights in one dtype; convert the odd "
            "tensors, or save the checkpoint again from one model."
        )
    return next(iter(first.items()), (None, None))


def nonfinite(value):
    """How many of `value`'s entries are NaN or infinite (0 for integers).

    >>> nonfinite(np.array([1.0, np.nan, -np.inf])), nonfinite(np.arange(3))
    (2, 0)
    """
    value = np.asarray(value)
    if value.dtype.kind not in "fc" and "float" not in value.dtype.name:  # bfloat16's kind is "V"
        return 0
    return int(value.size - np.count_nonzero(np.isfinite(value)))


def check_config(family, config, checkpoint_path, keep_tokens=None):
    """Refuse a complete config (`Family.config`'s) that the checkpoint's
    tensors contradict, from the files' headers and before any model is
    built from it (a config saying 2,000 blocks, or a hidden size of 100,000,
    would take minutes or all the memory first): the number of blocks (the
    highest block index + 1) and the token table's vocabulary × hidden size.
    The other shapes are compared as the weights are loaded."""
    checkpoint = open_checkpoint(checkpoint_path)
    format, path = checkpoint.format, checkpoint.path
    _check_format(family, format)
    tensors = read_tensors(format, path)
    blocks = config["num_hidden_layers"]
    prefix = read_prefix(family, tensors, 1) if format == "hf" else ""  # the token table's name: one block will do
    names = family.checkpoint_names(1, format, prefix)
    _check_block_count(names, tensors, blocks, path)  # first: the checks below make a name map of every block
    check_blocks(family, tensors, blocks, format, prefix, path)
    vocab = config["vocab_size"] if keep_tokens is None else None  # `keep_tokens` selects the rows
    name, kind = names[naming.EMBEDDING_TOKEN, "embeddings"]
    found = find_tensor(name, tensors)
    if found is not None:
        expected = checkpoint_shape((vocab, config["hidden_size"]), Layout.of(kind, format))
        _check_sizes(found, tensors.shape(found), expected, ("vocab_size", "hidden_size"), path)


def _check_block_count(names, tensors, blocks, checkpoint_path):
    """Refuse a config of more blocks than the checkpoint holds."""
    pattern = block_pattern(names)
    matches = [match for match in map(pattern.match, tensors) if match] if pattern is not None else []
    last = max(matches, key=lambda match: int(match.group(1)), default=None)
    held = 0 if last is None else int(last.group(1)) + 1
    if held < blocks:
        what = "no block" if last is None else f"{held} (the last in '{last.string}')"
        raise ValueError(
            f"The config's num_hidden_layers={blocks}, but the checkpoint {checkpoint_path} holds {what}: the "
            f"config does not match the checkpoint. Build with num_hidden_layers={held}, or fix the config."
        )


def _check_sizes(tensor, shape, expected, keys, checkpoint_path):
    """Refuse a tensor whose shape differs from the config's `expected`
    (None: any), naming the config key of the axis that differs."""
    for axis, (size, wanted) in enumerate(zip(shape, expected)):
        if wanted is not None and size != wanted:
            raise ValueError(
                f"The config's {keys[axis]}={wanted}, but the checkpoint {checkpoint_path}'s '{tensor}' has shape "
                f"{tuple(shape)}, so {keys[axis]}={size}: the config does not match the checkpoint. Fix the config, "
                "or give the checkpoint it describes."
            )


def check_blocks(family, tensors, blocks, format, prefix, checkpoint_path):
    """Raise if the checkpoint has blocks the model lacks: loading would drop them."""
    extra = _extra_blocks(family, tensors, blocks, format, prefix)
    if extra:
        raise ValueError(
            f"The checkpoint {checkpoint_path} has Transformer blocks {extra} beyond the model's {blocks}: "
            "loading would drop them. Build the model with the checkpoint's num_hidden_layers."
        )


def read_prefix(family, tensors, blocks):
    """What a Hugging Face file puts before the base model's names: `bert.`
    in a task model's (`BertForMaskedLM`), nothing in a base model's. Read off
    the token table's name."""
    token = family.checkpoint_names(blocks, "hf", "").get((naming.EMBEDDING_TOKEN, "embeddings"))
    if token is None or token[0] in tensors:
        return ""
    for name in tensors:
        if name.endswith("." + token[0]):
            return name[: -len(token[0])]
    return ""


def _extra_blocks(family, tensors, blocks, format, prefix):
    """The blocks from `blocks` on that the checkpoint holds tensors of."""
    extra = []
    while True:
        index = blocks + len(extra)
        names = family.checkpoint_names(index + 1, format, prefix)
        if not any(
            find_tensor(name, tensors) for (layer, _), (name, _) in names.items() if naming.block_index(layer) == index
        ):
            return extra
        extra.append(index)


def _placed(model, family, names):
    """Each weight of `model` with its checkpoint tensor's name and kind."""
    for layer in model.layers:
        for variable in layer.weights:
            if (layer.name, variable.name) not in names:
                raise ValueError(
                    f"'{variable.path}' has no place in a {family.title} checkpoint: checkpoints hold kwiden's "
                    f"Post-LN {family.title} (fold an Admin model first)."
                )
            yield (layer, variable, *names[layer.name, variable.name])


def _check_keep_tokens(keep_tokens, vocab):
    keep = np.asarray(keep_tokens)
    if (
        keep.ndim != 1
        or not np.issubdtype(keep.dtype, np.integer)
        or keep.size == 0
        or keep.min() < 0
        or keep.max() >= vocab
    ):
        raise ValueError(
            f"`keep_tokens` must be a non-empty list of vocabulary ids in [0, {vocab}); got {list(keep_tokens)[:8]}…"
        )
    return keep


def save_checkpoint(model, directory, format="hf", family=None, allow_nonfinite=False, base_config=None):
    """Write a kwiden model (built, loaded, fine-tuned or grown) as a
    checkpoint other tools load: `format="hf"` writes `config.json` and
    `model.safetensors` (BERT, RoFormer, GPT-2, LLaMA, Mistral, Qwen2: what
    `transformers.AutoModel*.from_pretrained` loads), `"google"` writes
    `bert_config.json` and `bert_model.ckpt.*` (BERT, RoFormer); both write
    `kwiden-manifest.json`, each file's size and sha256, which loading
    checks. Returns the directory.

    `base_config`: a `config.json` (a dict, its path, or its folder: the one
    the model was loaded from) whose keys kwiden does not write are kept:
    token ids (`bos_token_id`, `eos_token_id`), a rotary model's
    `max_position_embeddings`, the tokenizer's class and the like.

    `family`: the model's (a name or a `kwiden.models.Family`); by default the
    registered family named like the model (kwiden's builders name models
    after their family, and growth keeps the name). The family writes the
    config (`to_hf_config`) and names the tensors (`checkpoint_names`).

    Nothing is lost and nothing half-written is visible: the files are
    written into a temporary sibling folder (`.<name>.kwiden-tmp-*`), which is
    removed if anything fails, leaving `directory` as it was. A new
    `directory` is that folder renamed, in one step. In an existing one,
    files of other names (a `vocab.txt`) stay; the manifest is moved in first,
    then each of kwiden's files replaces its old copy (one rename each), and
    an old Google checkpoint's files of the same prefix that the new one
    lacks are removed; were the process killed between those renames, loading
    would refuse the folder, naming the file that does not match the manifest.
    A folder that holds the other format's weights, or another Google
    checkpoint, is refused (saving would leave two checkpoints that loading
    could not choose between): save into another folder or delete them first.
    Weights with NaN or infinite values are refused, naming the variable,
    unless `allow_nonfinite=True`.

    BERT's config has one LayerNorm epsilon; a grown model's stream norms use
    ε/k and its MLM norm ε, so the most common value is written and a warning
    names the norms that differ. Google's own BERT code ignores the config's
    ε (1e-12 there) and uses tanh-GeLU where kwiden's "gelu" is exact; Hugging
    Face reads both from the config. Models with an MLM head are written as
    Hugging Face's `BertForMaskedLM` (encoder under `bert.`) or
    `RoFormerForMaskedLM`; decoders as their `*ForCausalLM` (GPT-2's
    `GPT2LMHeadModel`). Where a config cannot say what a model computes (a
    rotary model grown with `heads="size"`, decoder norms of different ε,
    biases the family does not have) the save is refused, naming what would.

    Example:

    >>> import kwiden, tempfile
    >>> bert = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2))
    >>> folder = kwiden.save_checkpoint(bert, tempfile.mkdtemp())
    >>> sorted(p.name for p in folder.iterdir())
    ['config.json', 'kwiden-manifest.json', 'model.safetensors']
    >>> kwiden.save_checkpoint(bert, folder, format="google")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ... holds Hugging Face's model.safetensors; saving Google's (bert_model.ckpt.*) weights beside ...
    """
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}, got format={format!r}.")
    family = _family(model, family)
    if family.to_hf_config is None:
        raise ValueError(_no_place(family))
    directory = pathlib.Path(directory)
    _check_target(directory, format)
    config = family.to_hf_config(model, format)
    if base_config is not None:
        config = {**_base_config(base_config), **config}
    names = _names(family, _num_blocks(model), format, written_prefix(config, family))
    tensors, parts = {}, {}
    for _, variable, name, kind in _placed(model, family, names):
        value = np.asarray(variable.numpy())
        bad = 0 if allow_nonfinite else nonfinite(value)
        if bad:
            raise ValueError(
                f"'{variable.path}' holds {bad} NaN or infinite values, and loading would refuse the checkpoint; "
                "pass allow_nonfinite=True to write it anyway."
            )
        layout = Layout.of(kind, format)
        if layout.part is None:
            tensors[name] = np.ascontiguousarray(to_checkpoint(value, layout))
        else:
            parts.setdefault(name, [None] * layout.part[1])[layout.part[0]] = to_checkpoint(value, layout)
            if all(part is not None for part in parts[name]):
                tensors[name] = np.ascontiguousarray(join_parts(parts[name], layout))
    _write_atomically(directory, format, config, tensors)
    return directory


def _base_config(base_config):
    """The dict `save_checkpoint`'s `base_config` gives (a dict, a config file or its folder)."""
    if isinstance(base_config, dict):
        return dict(base_config)
    path = pathlib.Path(base_config)
    return read_config_file(path / CONFIG_FILES["hf"] if path.is_dir() else path)


def _check_target(directory, format):
    """Raise if `directory` is a file, or holds weights that are not the ones
    this save replaces: the other format's, or another Google checkpoint."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} is a file; save_checkpoint writes a folder.")
    if not directory.is_dir():
        return
    own = SAFETENSORS if format == "hf" else f"{GOOGLE_PREFIX}.index"
    others = [name for name in _weight_files(directory) if name != own]
    if others:
        files = "; ".join(_describe(directory, name) for name in others)
        raise ValueError(
            f"{directory} holds {files}; saving {FORMAT_TITLES[format]} weights beside them would leave two "
            "checkpoints that loading cannot choose between. Save into another folder, or delete those files first."
        )


def _write_atomically(directory, format, config, tensors):
    """Write the checkpoint into a temporary sibling folder, then move it into
    `directory` (`save_checkpoint` says how)."""
    with written_atomically(directory, format) as temporary:
        (temporary / CONFIG_FILES[format]).write_text(json_text(config, CONFIG_FILES[format]), encoding="utf-8")
        if format == "hf":
            _write_safetensors(tensors, temporary / SAFETENSORS)
        else:
            _write_google(tensors, temporary / GOOGLE_PREFIX)


@contextlib.contextmanager
def written_atomically(directory, format="hf"):
    """Yield a new temporary folder beside `directory` to write a checkpoint's
    files into; once the block ends without error, `kwiden-manifest.json`
    records every file in it and they are moved into `directory`: a new
    `directory` is the temporary folder renamed, in one step
    (`save_checkpoint` says how an existing one is updated). The temporary
    folder is gone after, whatever happened; one left by a killed process is
    removed by the next save beside it (`kwiden.files`)."""
    target = pathlib.Path(directory).resolve()  # a link's target: the sibling is then on its file system
    # Made as any folder is (the umask's permissions, where `tempfile.mkdtemp` gives 0o700):
    # a new checkpoint folder is this one renamed.
    with temporary_beside(target, folder=True) as temporary:
        yield temporary
        files = sorted(p.name for p in temporary.iterdir() if p.is_file())
        for name in files:  # some writers (safetensors) make theirs readable by their owner alone
            give_mode(temporary / name, target / name)
        _write_manifest(temporary, format, files)
        for name in (*files, MANIFEST):
            _sync(temporary / name)
        _move_into_place(temporary, target, files, format)


def _write_manifest(folder, format, files):
    records = {name: {"bytes": (folder / name).stat().st_size, "sha256": _sha256(folder / name)} for name in files}
    manifest = {"kwiden_manifest": MANIFEST_VERSION, "format": format, "files": records}
    (folder / MANIFEST).write_text(json_text(manifest, MANIFEST), encoding="utf-8")


def _move_into_place(temporary, target, files, format):
    if not target.exists():
        try:
            os.rename(temporary, target)  # one step: the whole checkpoint or nothing
            _sync(target.parent)
            return
        except OSError:
            if not target.is_dir():  # not a folder made meanwhile by someone else
                raise
    stale = [name for name in _google_files(target, GOOGLE_PREFIX) if name not in files] if format == "google" else []
    # The manifest first: from here until the last rename, loading refuses the folder.
    os.replace(temporary / MANIFEST, target / MANIFEST)
    for name in files:
        os.replace(temporary / name, target / name)
    for name in stale:
        (target / name).unlink()
    _sync(target)


def _sync(path):
    """Flush a file, or a folder's entries, to the disk (where the system allows it)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:  # Windows opens no folders
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def written_prefix(config, family):
    """Hugging Face task models (`BertForMaskedLM`) hold the base model under
    a prefix (the family's `hf_prefix`, else its `model_type`: `bert.`)
    beside their heads; base models (`BertModel`) at the top."""
    if family.hf_prefix is not None:
        return family.hf_prefix
    architecture = (config.get("architectures") or ["Model"])[0]
    return "" if architecture.endswith("Model") else f"{config['model_type']}."


def _write_safetensors(tensors, path):
    from safetensors.numpy import save_file

    # "pt": the metadata Hugging Face's loaders look for.
    save_file(tensors, str(path), metadata={"format": "pt"})


# numpy's dtype names as safetensors spells them.
SAFETENSORS_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                      "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}  # fmt: skip


class SafetensorsWriter:
    """One safetensors file written tensor by tensor, so that no more than one
    is held: the header first, from every tensor's name, dtype and shape
    (`specs`, in the order they will come), then each tensor's bytes as
    `write` is given it. `close` raises unless every tensor came, in order,
    with the dtype and shape announced.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.safetensors"
    >>> with SafetensorsWriter(path, [("b", "float32", (2,)), ("a", "float32", (1, 2))]) as writer:
    ...     writer.write("b", np.ones(2, "float32"))
    ...     writer.write("a", np.zeros((1, 2), "float32"))
    >>> SafetensorsTensors(path)["a"]
    array([[0., 0.]], dtype=float32)
    """

    def __init__(self, path, specs, metadata=None):
        self.path = pathlib.Path(path)
        self.specs = [(name, np.dtype(dtype), tuple(int(n) for n in shape)) for name, dtype, shape in specs]
        header, offset = {"__metadata__": dict(metadata or {"format": "pt"})}, 0
        for name, dtype, shape in self.specs:
            if dtype.name not in SAFETENSORS_DTYPES:
                raise ValueError(f"'{name}' is {dtype.name}, which safetensors files do not hold.")
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            header[name] = {"dtype": SAFETENSORS_DTYPES[dtype.name], "shape": list(shape),
                            "data_offsets": [offset, offset + size]}  # fmt: skip
            offset += size
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors' own writer has it
        self.file = open(self.path, "wb")
        self.file.write(len(text).to_bytes(8, "little") + text)
        self.written = 0

    def write(self, name, value):
        if self.written == len(self.specs):
            raise ValueError(f"{self.path}: '{name}' was not announced; the file holds {len(self.specs)} tensors.")
        expected, dtype, shape = self.specs[self.written]
        value = np.asarray(value)
        if (name, value.dtype, tuple(value.shape)) != (expected, dtype, shape):
            raise ValueError(
                f"{self.path}: tensor {self.written} is '{expected}' ({dtype.name}, {shape}), given '{name}' "
                f"({value.dtype.name}, {tuple(value.shape)})."
            )
        self.file.write(np.ascontiguousarray(value).reshape(-1).view(np.uint8).data)
        self.written += 1

    def close(self):
        self.file.close()
        if self.written != len(self.specs):
            raise ValueError(f"{self.path}: {self.written} of its {len(self.specs)} tensors were written.")

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is None:
            self.close()
        else:
            self.file.close()


def _write_google(tensors, prefix):
    import tensorflow as tf  # only Google-format files need TensorFlow

    tf.raw_ops.SaveV2(
        prefix=str(prefix),
        tensor_names=list(tensors),
        shape_and_slices=[""] * len(tensors),
        tensors=[tf.constant(v) for v in tensors.values()],
    )
