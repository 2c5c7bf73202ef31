"""Checkpoint formats: Hugging Face folders (`config.json` + `model.safetensors`,
read with numpy only) and Google's TensorFlow checkpoints (`bert_config.json` +
`bert_model.ckpt.*`, read and written with TensorFlow's checkpoint ops,
TensorFlow imported only then).

This module knows the files; the model's family (`kwiden.models.Family`) knows
the rest: which tensor holds each weight (`checkpoint_names`) and the
`config.json` (`to_hf_config`). Each kwiden variable is named by its layer
and weight (`kwiden.naming`). Loading is all or nothing: a missing tensor or a
wrong shape raises before any weight is assigned.
"""

import collections.abc
import json
import pathlib

import numpy as np

from kwiden import naming
from kwiden.models.family import FAMILIES, family_of, get_family

FORMATS = ("hf", "google")
SAFETENSORS = "model.safetensors"
GOOGLE_PREFIX = "bert_model.ckpt"
CONFIG_FILES = {"hf": "config.json", "google": "bert_config.json"}
FORMAT_TITLES = {"hf": "Hugging Face's (model.safetensors)", "google": "Google's (bert_model.ckpt.*)"}

# How a kwiden weight relates to its checkpoint tensor. Kernels are (in, out)
# in kwiden and Google checkpoints, (out, in) in Hugging Face's; attention
# splits its kernels by heads, checkpoints keep them flat.
KERNEL_KINDS = ("linear", "heads_out", "heads_in")

# The layers whose rows are the vocabulary (`keep_tokens` selects them), and
# the optional heads a checkpoint may lack.
VOCABULARY_ROWS = (naming.EMBEDDING_TOKEN, naming.MLM_BIAS)
HEADS = (naming.POOLER_DENSE, naming.MLM_DENSE, naming.MLM_NORM, naming.MLM_BIAS)


def _flat_shape(shape, kind):
    if kind == "heads_out":  # (in, heads, size)
        return (shape[0], shape[1] * shape[2])
    if kind == "heads_in":  # (heads, size, out)
        return (shape[0] * shape[1], shape[2])
    if kind == "heads_bias":  # (heads, size)
        return (shape[0] * shape[1],)
    return tuple(shape)


def checkpoint_shape(shape, kind, format):
    flat = _flat_shape(tuple(shape), kind)
    return flat[::-1] if format == "hf" and kind in KERNEL_KINDS else flat


def to_kwiden(value, shape, kind, format):
    if format == "hf" and kind in KERNEL_KINDS:
        value = value.T
    return value.reshape(shape)


def to_checkpoint(value, kind, format):
    value = value.reshape(_flat_shape(value.shape, kind))
    return value.T if format == "hf" and kind in KERNEL_KINDS else value


# Other names the same tensor has in Hugging Face files: older checkpoints
# (bert-base-uncased among them) keep LayerNorm's `gamma`/`beta`, and some MLM
# files hold the output bias only as the decoder's.
HF_ALTERNATIVES = {".LayerNorm.weight": ".LayerNorm.gamma", ".LayerNorm.bias": ".LayerNorm.beta",
                   "cls.predictions.bias": "cls.predictions.decoder.bias"}  # fmt: skip


def _find(name, tensors):
    """`name`, or the alternative name under which `tensors` holds it."""
    if name in tensors:
        return name
    for new, old in HF_ALTERNATIVES.items():
        if name.endswith(new) and name[: -len(new)] + old in tensors:
            return name[: -len(new)] + old
    return None


def config_beside(checkpoint_path):
    """The `config.json` or `bert_config.json` in a checkpoint's folder."""
    folder = pathlib.Path(checkpoint_path)
    folder = folder if folder.is_dir() else folder.parent
    for name in CONFIG_FILES.values():
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"No config.json or bert_config.json beside {checkpoint_path}; pass `config_path`.")


def detect_format(checkpoint_path):
    """`(format, path)`: a Hugging Face safetensors file, or a Google checkpoint prefix."""
    path = pathlib.Path(checkpoint_path)
    if path.is_dir():
        if (path / SAFETENSORS).exists():
            return "hf", path / SAFETENSORS
        indexes = sorted(path.glob("*.ckpt*.index"))
        if indexes:
            return "google", indexes[0].with_suffix("")
        raise FileNotFoundError(
            f"No {SAFETENSORS} and no *.ckpt.index in {path}: a Hugging Face BERT folder holds "
            "the first, a Google one the second."
        )
    if path.suffix == ".safetensors" and path.exists():
        return "hf", path
    if path.with_name(path.name + ".index").exists():
        return "google", path
    raise FileNotFoundError(f"Checkpoint {path} not found (a folder, a .safetensors file or a ckpt prefix).")


def read_tensors(format, path):
    """`{tensor name: array}`; a Google checkpoint's are read when asked for."""
    if format == "hf":
        from safetensors.numpy import load_file

        return load_file(str(path))
    return _read_google(path)


def _read_google(path):
    import tensorflow as tf  # only Google-format files need TensorFlow

    return _LazyTensors(tf.train.load_checkpoint(str(path)))


class _LazyTensors(collections.abc.Mapping):
    """A Google checkpoint's tensors, read when asked for."""

    def __init__(self, reader):
        self.reader = reader
        self.shapes = reader.get_variable_to_shape_map()

    def __getitem__(self, name):
        if name not in self.shapes:
            raise KeyError(name)
        return self.reader.get_tensor(name)

    def __contains__(self, name):
        return name in self.shapes

    def __iter__(self):
        return iter(self.shapes)

    def __len__(self):
        return len(self.shapes)


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
        f"A {family.title} model has no place in a BERT checkpoint: kwiden reads and writes checkpoints "
        f"of {kept}; save it as a .keras model instead."
    )


def load_weights(model, checkpoint_path, keep_tokens=None, family=None):
    """Fill every weight of `model` (a BERT or RoFormer) from a checkpoint.

    `keep_tokens`: the vocabulary ids to keep, in their new order (the model
    was built with `vocab_size=len(keep_tokens)`). `family`: the model's (a
    name or a `Family`); by default the one named like the model. Raises,
    naming the variable, before assigning anything if a tensor is missing or
    has the wrong shape.
    """
    family = _family(model, family)
    format, path = detect_format(checkpoint_path)
    _check_format(family, format)
    tensors = read_tensors(format, path)
    blocks = _num_blocks(model)
    prefix = _hf_prefix(family, tensors, blocks) if format == "hf" else ""
    _check_blocks(family, tensors, blocks, format, prefix, checkpoint_path)
    values = [
        (variable, _value(tensors, layer, variable, name, kind, format, keep_tokens, checkpoint_path))
        for layer, variable, name, kind in _placed(model, family, _names(family, blocks, format, prefix))
    ]
    for variable, value in values:  # only once every weight has its value
        variable.assign(value.astype(variable.dtype))
    return model


def _value(tensors, layer, variable, name, kind, format, keep_tokens, checkpoint_path):
    """The checkpoint's value for `variable`, checked and in kwiden's layout."""
    found = _find(name, tensors)
    if found is None:
        head = " (build without that head, or use a checkpoint that has it)" if layer.name in HEADS else ""
        raise ValueError(f"The checkpoint {checkpoint_path} has no tensor '{name}' for '{variable.path}'{head}.")
    value = tensors[found]
    if keep_tokens is not None and layer.name in VOCABULARY_ROWS:
        value = value[_check_keep_tokens(keep_tokens, value.shape[0])]
    expected = checkpoint_shape(variable.shape, kind, format)
    if tuple(value.shape) != expected:
        raise ValueError(
            f"'{variable.path}' (shape {tuple(variable.shape)}) needs '{name}' of shape {expected}; "
            f"the checkpoint's has {tuple(value.shape)}: the config does not match the checkpoint."
        )
    return to_kwiden(value, tuple(variable.shape), kind, format)


def _check_blocks(family, tensors, blocks, format, prefix, checkpoint_path):
    """Raise if the checkpoint has blocks the model lacks: loading would drop them."""
    extra = _extra_blocks(family, tensors, blocks, format, prefix)
    if extra:
        raise ValueError(
            f"The checkpoint {checkpoint_path} has Transformer blocks {extra} beyond the model's {blocks}: "
            "loading would drop them. Build the model with the checkpoint's num_hidden_layers."
        )


def _hf_prefix(family, tensors, blocks):
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
            _find(name, tensors) for (layer, _), (name, _) in names.items() if naming.block_index(layer) == index
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


def save_checkpoint(model, directory, format="hf", family=None):
    """Write a kwiden BERT or RoFormer (built, loaded, fine-tuned or grown) as
    a checkpoint other tools load: `format="hf"` writes `config.json` and
    `model.safetensors`, `"google"` writes `bert_config.json` and
    `bert_model.ckpt.*`. Returns the directory.

    `family`: the model's (a name or a `kwiden.models.Family`); by default the
    registered family named like the model (kwiden's builders name models
    after their family, and growth keeps the name). The family writes the
    config (`to_hf_config`) and names the tensors (`checkpoint_names`).

    BERT's config has one LayerNorm epsilon; a grown model's stream norms use
    ε/k and its MLM norm ε, so the most common value is written and a warning
    names the norms that differ. Google's own BERT code ignores the config's
    ε (1e-12 there) and uses tanh-GeLU where kwiden's "gelu" is exact; Hugging
    Face reads both from the config. RoFormers are written in Google's format
    only; models with an MLM head are written as Hugging Face's
    `BertForMaskedLM` (encoder under `bert.`).

    Example:

    >>> import kwiden, tempfile
    >>> bert = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2))
    >>> folder = kwiden.save_checkpoint(bert, tempfile.mkdtemp())
    >>> sorted(p.name for p in folder.iterdir())
    ['config.json', 'model.safetensors']
    """
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}, got format={format!r}.")
    family = _family(model, family)
    if family.to_hf_config is None:
        raise ValueError(_no_place(family))
    config = family.to_hf_config(model, format)
    names = _names(family, _num_blocks(model), format, _written_prefix(config))
    tensors = {
        name: np.ascontiguousarray(to_checkpoint(np.asarray(variable.numpy()), kind, format))
        for _, variable, name, kind in _placed(model, family, names)
    }
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILES[format]).write_text(json.dumps(config, indent=2) + "\n")
    if format == "hf":
        _write_safetensors(tensors, directory / SAFETENSORS)
    else:
        _write_google(tensors, directory / GOOGLE_PREFIX)
    return directory


def _written_prefix(config):
    """Hugging Face task models (`BertForMaskedLM`) hold the base model under
    its `model_type` (`bert.`) beside their heads; base models (`BertModel`) at the top."""
    architecture = (config.get("architectures") or ["Model"])[0]
    return "" if architecture.endswith("Model") else f"{config['model_type']}."


def _write_safetensors(tensors, path):
    from safetensors.numpy import save_file

    # "pt": the metadata Hugging Face's loaders look for.
    save_file(tensors, str(path), metadata={"format": "pt"})


def _write_google(tensors, prefix):
    import tensorflow as tf  # only Google-format files need TensorFlow

    tf.raw_ops.SaveV2(
        prefix=str(prefix),
        tensor_names=list(tensors),
        shape_and_slices=[""] * len(tensors),
        tensors=[tf.constant(v) for v in tensors.values()],
    )
