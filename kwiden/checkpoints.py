"""Pretrained BERT weights in and out of kwiden's models, in the two formats
BERT ships in: Hugging Face folders (`config.json` + `model.safetensors`, read
with numpy only) and Google's TensorFlow checkpoints (`bert_config.json` +
`bert_model.ckpt.*`, read and written with TensorFlow's checkpoint ops).

Each kwiden variable is named by its layer and weight
(`Transformer-0-MultiHeadSelfAttention/query_kernel`); `tensor_names` says
which checkpoint tensor holds it in each format. Loading is all or nothing: a
missing tensor or a wrong shape raises before any weight is assigned.
"""

import collections
import collections.abc
import json
import pathlib
import re
import warnings

import numpy as np

from kwiden.layers import ExpandableLayerNormalization
from kwiden.naming import count_blocks

FORMATS = ("hf", "google")
SAFETENSORS = "model.safetensors"
GOOGLE_PREFIX = "bert_model.ckpt"
CONFIG_FILES = {"hf": "config.json", "google": "bert_config.json"}

# How a kwiden weight relates to its checkpoint tensor. Kernels are (in, out)
# in kwiden and Google checkpoints, (out, in) in Hugging Face's; attention
# splits its kernels by heads, checkpoints keep them flat.
KERNEL_KINDS = ("linear", "heads_out", "heads_in")


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


def _skeleton(num_layers):
    """`{(layer, weight): (module path, role, kind)}`, format-neutral; "L{i}"
    stands for block i."""

    def norm(layer, path):
        return {(layer, "gamma"): (path, "gamma", None), (layer, "beta"): (path, "beta", None)}

    def dense(layer, path, kernel="kernel", bias="bias", kind="linear", bias_kind=None):
        return {(layer, kernel): (path, "kernel", kind), (layer, bias): (path, "bias", bias_kind)}

    entries = {
        ("Embedding-Token", "embeddings"): ("bert embeddings word_embeddings", "table", None),
        ("Embedding-Segment", "embeddings"): ("bert embeddings token_type_embeddings", "table", None),
        ("Embedding-Position", "embeddings"): ("bert embeddings position_embeddings", "table", None),
        **norm("Embedding-Norm", "bert embeddings LayerNorm"),
        **dense("Pooler-Dense", "bert pooler dense"),
        **dense("MLM-Dense", "cls predictions transform dense"),
        **norm("MLM-Norm", "cls predictions transform LayerNorm"),
        ("MLM-Bias", "bias"): ("cls predictions", "output_bias", None),
    }
    for i in range(num_layers):
        block, attention, ffn = f"bert encoder L{i}", f"Transformer-{i}-MultiHeadSelfAttention", f"Transformer-{i}-FeedForward"
        for projection in ("query", "key", "value"):
            entries.update(
                dense(attention, f"{block} attention self {projection}", f"{projection}_kernel", f"{projection}_bias", "heads_out", "heads_bias")
            )
        entries.update(dense(attention, f"{block} attention output dense", "output_kernel", "output_bias", "heads_in"))
        entries.update(norm(f"{attention}-Norm", f"{block} attention output LayerNorm"))
        entries.update(dense(ffn, f"{block} intermediate dense", "inner_kernel", "inner_bias"))
        entries.update(dense(ffn, f"{block} output dense", "output_kernel", "output_bias"))
        entries.update(norm(f"{ffn}-Norm", f"{block} output LayerNorm"))
    return entries


HF_ROLES = {"kernel": "weight", "gamma": "weight", "table": "weight", "bias": "bias", "beta": "bias", "output_bias": "bias"}
# Other names the same tensor has in Hugging Face files: older BERT checkpoints
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


def tensor_names(num_layers, format, hf_prefix=""):
    """`{(layer, weight): (checkpoint tensor name, kind)}` for a BERT of `num_layers` blocks."""
    block = "layer.{}" if format == "hf" else "layer_{}"
    names = {}
    for key, (path, role, kind) in _skeleton(num_layers).items():
        parts = [block.format(p[1:]) if p.startswith("L") and p[1:].isdigit() else p for p in path.split()]
        if format == "hf":
            parts = [hf_prefix.rstrip(".")] * bool(hf_prefix) + parts[1:] if parts[0] == "bert" else parts
            name = ".".join(parts + [HF_ROLES[role]])
        else:
            name = "/".join(parts + ([] if role == "table" else [role]))
        names[key] = (name, kind)
    return names


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
    if format == "hf":
        from safetensors.numpy import load_file

        return load_file(str(path))
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(path))
    return _LazyTensors(reader)


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


def load_bert_weights(model, checkpoint_path, keep_tokens=None):
    """Fill every weight of the kwiden BERT (or RoFormer) `model` from a checkpoint.

    `keep_tokens`: the vocabulary ids to keep, in their new order (the model
    was built with `vocab_size=len(keep_tokens)`). Raises, naming the
    variable, before assigning anything if a tensor is missing or has the
    wrong shape.
    """
    format, path = detect_format(checkpoint_path)
    if format == "hf" and model.get_layer("Transformer-0-MultiHeadSelfAttention").rotary is not None:
        raise ValueError("RoFormer weights load from Google-format checkpoints (bert_model.ckpt.*); Hugging Face's roformer layout is not supported.")
    tensors = read_tensors(format, path)
    hf_prefix = "bert." if format == "hf" and "bert.embeddings.word_embeddings.weight" in tensors else ""
    blocks = _num_blocks(model)
    extra = _blocks_in(tensors, format) - set(range(blocks))
    if extra:
        raise ValueError(
            f"The checkpoint {checkpoint_path} has Transformer blocks {sorted(extra)} beyond the model's {blocks}: "
            "loading would drop them. Build the model with the checkpoint's num_hidden_layers."
        )
    names = tensor_names(blocks, format, hf_prefix)
    values = []
    for layer, variable, name, kind in _placed(model, names):
        found = _find(name, tensors)
        if found is None:
            head = " (build without that head, or use a checkpoint that has it)" if layer.name.startswith(("MLM", "Pooler")) else ""
            raise ValueError(f"The checkpoint {checkpoint_path} has no tensor '{name}' for '{variable.path}'{head}.")
        value = tensors[found]
        if keep_tokens is not None and layer.name in ("Embedding-Token", "MLM-Bias"):
            value = value[_check_keep_tokens(keep_tokens, value.shape[0])]
        expected = checkpoint_shape(variable.shape, kind, format)
        if tuple(value.shape) != expected:
            raise ValueError(
                f"'{variable.path}' (shape {tuple(variable.shape)}) needs '{name}' of shape {expected}; "
                f"the checkpoint's has {tuple(value.shape)}: the config does not match the checkpoint."
            )
        values.append((variable, to_kwiden(value, tuple(variable.shape), kind, format)))
    for variable, value in values:
        variable.assign(value.astype(variable.dtype))
    return model


def _placed(model, names):
    """Each weight of `model` with its checkpoint tensor's name and kind."""
    for layer in model.layers:
        for variable in layer.weights:
            if (layer.name, variable.name) not in names:
                raise ValueError(
                    f"'{variable.path}' has no place in a BERT checkpoint: checkpoints hold kwiden's "
                    "Post-LN BERT and RoFormer (fold an Admin model first)."
                )
            yield (layer, variable, *names[layer.name, variable.name])


def _blocks_in(tensors, format):
    pattern = re.compile(r"encoder\.layer\.(\d+)\." if format == "hf" else r"encoder/layer_(\d+)/")
    return {int(m.group(1)) for name in tensors for m in [pattern.search(name)] if m}


def _check_keep_tokens(keep_tokens, vocab):
    keep = np.asarray(keep_tokens)
    if keep.ndim != 1 or not np.issubdtype(keep.dtype, np.integer) or keep.size == 0 or keep.min() < 0 or keep.max() >= vocab:
        raise ValueError(f"`keep_tokens` must be a non-empty list of vocabulary ids in [0, {vocab}); got {list(keep_tokens)[:8]}…")
    return keep


def _num_blocks(model):
    return count_blocks(layer.name for layer in model.layers)


def save_checkpoint(model, directory, format="hf"):
    """Write a kwiden BERT (built, loaded, fine-tuned or grown) as a checkpoint
    other tools load: `format="hf"` writes `config.json` and
    `model.safetensors`, `"google"` writes `bert_config.json` and
    `bert_model.ckpt.*`. Returns the directory.

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
    with_mlm = any(layer.name == "MLM-Bias" for layer in model.layers)
    # Hugging Face's BertForMaskedLM expects its encoder under `bert.` beside `cls.`.
    names = tensor_names(_num_blocks(model), format, hf_prefix="bert." if with_mlm else "")
    tensors = {
        name: np.ascontiguousarray(to_checkpoint(np.asarray(variable.numpy()), kind, format))
        for _, variable, name, kind in _placed(model, names)
    }
    config = bert_config_of(model, format)
    if with_mlm and format == "hf":
        config["architectures"] = ["BertForMaskedLM"]
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILES[format]).write_text(json.dumps(config, indent=2) + "\n")
    if format == "hf":
        from safetensors.numpy import save_file

        save_file(tensors, str(directory / SAFETENSORS), metadata={"format": "pt"})
    else:
        import tensorflow as tf

        tf.raw_ops.SaveV2(
            prefix=str(directory / GOOGLE_PREFIX),
            tensor_names=list(tensors),
            shape_and_slices=[""] * len(tensors),
            tensors=[tf.constant(v) for v in tensors.values()],
        )
    return directory


def bert_config_of(model, format="hf"):
    """The `config.json` of a kwiden BERT, with Hugging Face's keys."""
    token = model.get_layer("Embedding-Token")
    attention = model.get_layer("Transformer-0-MultiHeadSelfAttention")
    ffn = model.get_layer("Transformer-0-FeedForward")
    norms = {layer.name: layer.epsilon for layer in model.layers if isinstance(layer, ExpandableLayerNormalization)}
    epsilon = collections.Counter(norms.values()).most_common(1)[0][0]
    different = {name: value for name, value in norms.items() if value != epsilon}
    if different:
        warnings.warn(
            f"BERT's config has one layer_norm_eps; {epsilon:g} is written, and these norms differ: "
            f"{different} (after growth the MLM norm keeps the small model's ε).",
            stacklevel=3,
        )
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": token.input_dim,
        "hidden_size": token.output_dim,
        "num_hidden_layers": _num_blocks(model),
        "num_attention_heads": attention.heads,
        "intermediate_size": ffn.intermediate_size,
        "hidden_act": ffn.get_config()["activation"],
        "hidden_dropout_prob": model.get_layer("Embedding-Dropout").rate,
        "attention_probs_dropout_prob": attention.dropout,
        "type_vocab_size": model.get_layer("Embedding-Segment").input_dim,
        "layer_norm_eps": epsilon,
        "pad_token_id": 0,
    }
    if attention.head_size * attention.heads != token.output_dim:
        raise ValueError(
            f"Heads of size {attention.head_size} × {attention.heads} do not make the hidden size "
            f"{token.output_dim}, which BERT's config assumes; save this model as .keras instead."
        )
    if format == "google" and epsilon != 1e-12:
        warnings.warn(
            f"Google's BERT code fixes LayerNorm's ε at 1e-12 whatever bert_config.json says; this "
            f"model's is {epsilon:g} (kwiden and other readers honour the config).",
            stacklevel=3,
        )
    if attention.rotary_frequencies is not None:
        raise ValueError(
            "This RoFormer's rotary frequencies were set by growth (rope='exact') and a BERT "
            "config can only say `rotary_base`; save it as a .keras model instead."
        )
    if attention.rotary is None:
        config["max_position_embeddings"] = model.get_layer("Embedding-Position").input_dim
    elif format == "hf":
        raise ValueError("A RoFormer saved as a Hugging Face BERT would lose its rotary attention; use format='google'.")
    else:
        config["rotary_base"] = attention.rotary.base
    return config
