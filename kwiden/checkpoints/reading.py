"""The read plan: which tensor of a checkpoint holds each weight of a model,
checked once for loading (`load_weights`) and streaming growth
(`kwiden.grow_checkpoint`) alike.

The model's family (`kwiden.models.Family`) names the tensors
(`checkpoint_names`) and says what else a checkpoint may hold (other names,
buffers, optional heads, a tied output head); this module holds the refusals:
a tensor missing or of the wrong shape, integer or mixed dtypes, blocks or
tensors the model would drop, NaN or infinite values.
"""

import dataclasses
import os
import re

import numpy as np

from kwiden import messages
from kwiden.checkpoints.formats import FORMAT_TITLES, SAFETENSORS_INDEX, open_checkpoint
from kwiden.checkpoints.google import read_google
from kwiden.checkpoints.safetensors import SAFETENSORS_DTYPES, SafetensorsTensors
from kwiden.models import naming
from kwiden.models.family import FAMILIES, family_of, get_family
from kwiden.models.layout import Layout, checkpoint_shape, to_kwiden

# The dtypes of the weights kwiden loads.
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")
# numpy's names of safetensors' dtypes (`"F32"`: float32).
SAFETENSORS_NAMES = {code: name for name, code in SAFETENSORS_DTYPES.items()}


def read_tensors(format, path):
    """`{tensor name: array}`, each tensor read when asked for: from one
    safetensors file, from the shards a `model.safetensors.index.json` names,
    or from a Google checkpoint. A file that cannot be read raises a
    ValueError saying it is damaged; a shard the index names but the folder
    lacks, a FileNotFoundError naming it."""
    if format == "hf":
        return SafetensorsTensors(path)
    return read_google(path)


def tensors_of(checkpoint):
    """The tensors of an `open_checkpoint` `Checkpoint`, opened once."""
    if "tensors" not in checkpoint.opened:
        checkpoint.opened["tensors"] = read_tensors(checkpoint.format, checkpoint.path)
    return checkpoint.opened["tensors"]


@dataclasses.dataclass(frozen=True)
class Entry:
    """One weight of the model and the checkpoint tensor that holds it."""

    layer: object
    variable: object
    name: str  # the family's name for the tensor
    tensor: str  # the name the checkpoint holds it under (`name`, or its alternative)
    layout: Layout


class ReadPlan:
    """Every weight of a model with its checkpoint tensor (`entries`, in the
    model's order), checked against the checkpoint's headers; `value(entry)`
    reads one, checked for NaN and infinite values, in kwiden's layout.
    `dtype` is the checkpoint's one dtype (numpy's name); `remedy` ends the
    refusal of a NaN tensor (what the caller's `allow_nonfinite` does)."""

    def __init__(self, checkpoint, tensors, family, entries, dtype, keep_tokens, allow_nonfinite, remedy):
        self.checkpoint, self.tensors, self.family = checkpoint, tensors, family
        self.entries, self.dtype = list(entries), dtype
        self.keep_tokens, self.allow_nonfinite, self.remedy = keep_tokens, allow_nonfinite, remedy
        self._by_key = {(entry.layer.name, entry.variable.name): entry for entry in self.entries}
        self._last = (None, None)

    def __getitem__(self, key):
        """The entry of `(layer name, weight name)`."""
        return self._by_key[key]

    def raw(self, entry):
        """The checkpoint's tensor for `entry`, as the file holds it (the
        rows `keep_tokens` keeps, for the vocabulary's layers), checked for
        NaN and infinite values; the last one read is kept (GPT-2's fused
        `c_attn` holds three weights) and the file's pages read so far leave
        the process's memory."""
        rows = self.keep_tokens is not None and entry.layer.name in self.family.vocabulary_rows
        key = (entry.tensor, rows)
        if self._last[0] != key:
            self._last = (None, None)  # the previous one freed first
            value = self.tensors[entry.tensor]
            if hasattr(self.tensors, "release"):
                self.tensors.release()
            value = value[self.keep_tokens] if rows else value  # the rows dropped are not checked
            bad = 0 if self.allow_nonfinite else nonfinite(value)
            if bad:
                where = file_of(self.tensors, entry.tensor, self.checkpoint.path)
                raise ValueError(messages.nonfinite_tensor(where, entry.tensor, entry.variable, bad, self.remedy))
            self._last = (key, value)
        return self._last[1]

    def value(self, entry):
        """`entry`'s weight in kwiden's layout (`keep_tokens`' rows for the
        vocabulary's layers)."""
        return to_kwiden(self.raw(entry), tuple(entry.variable.shape), entry.layout)


def file_of(tensors, tensor, checkpoint_path):
    """The file holding `tensor` (a shard's, or the checkpoint's)."""
    files = getattr(tensors, "files", None)
    return files[tensor] if files else checkpoint_path


def read_plan(
    model,
    checkpoint_path,
    family=None,
    keep_tokens=None,
    allow_nonfinite=False,
    remedy="pass allow_nonfinite=True to load it anyway.",
    fresh_heads=False,
):
    """The `ReadPlan` of `model` from a checkpoint (a path or an
    `open_checkpoint` `Checkpoint`), refused before any value is read where
    the checkpoint is of a format the family is not kept in, holds blocks the
    model lacks, lacks a tensor or holds one of another shape, holds integer
    or mixed dtypes, or holds block tensors the model would not read.
    `remedy` ends the refusal of a NaN tensor, met as values are read.
    `fresh_heads`: a tensor missing for an optional head (the family's
    `heads`) is left out of the plan, its variable's path in `plan.fresh`."""
    family = family_for(model, family)
    checkpoint = open_checkpoint(checkpoint_path)
    format, path = checkpoint.format, checkpoint.path
    check_format(family, format)
    tensors = tensors_of(checkpoint)
    blocks = naming.count_blocks(layer.name for layer in model.layers)
    prefix = read_prefix(family, tensors, blocks) if format == "hf" else ""
    check_blocks(family, tensors, blocks, format, prefix, path)
    names = family.checkpoint_names(blocks, format, prefix)
    rows = None if keep_tokens is None else _check_keep_tokens(keep_tokens, _vocabulary(family, names, tensors))
    entries, fresh = [], []
    for layer, variable, name, kind in placed(model, family, names):
        found = find_tensor(name, tensors, family)
        if found is None and fresh_heads and layer.name in family.heads:
            fresh.append(variable.path)
            continue
        if found is None:
            head = " (build without that head, or use a checkpoint that has it)" if layer.name in family.heads else ""
            raise ValueError(f"The checkpoint {path} has no tensor '{name}' for '{variable.path}'{head}.")
        layout = Layout.of(kind, format)
        shape = tuple(tensors.shape(found))
        if rows is not None and layer.name in family.vocabulary_rows:
            shape = (len(rows), *shape[1:])  # the rows kept
        expected = checkpoint_shape(variable.shape, layout)
        if shape != expected:
            where = file_of(tensors, found, path)
            raise ValueError(messages.shape_mismatch(where, found, shape, variable, name, expected))
        entries.append(Entry(layer, variable, name, found, layout))
    dtype, _ = one_dtype(((entry.tensor, tensors.dtype(entry.tensor)) for entry in entries), path, shard_files(tensors))
    check_nothing_dropped(family, names, {entry.name for entry in entries}, tensors, path)
    plan = ReadPlan(checkpoint, tensors, family, entries, dtype, rows, allow_nonfinite, remedy)
    plan.fresh = fresh
    return plan


def holds_layer(checkpoint_path, layer_name, family):
    """Whether a checkpoint (a path or an `open_checkpoint` `Checkpoint`) holds weights of the layer `layer_name`,
    one outside the blocks (BERT's pooler, its MLM head, its position table), read off the tensors' names without
    reading a value."""
    family = get_family(family)
    checkpoint = open_checkpoint(checkpoint_path)
    tensors = tensors_of(checkpoint)
    prefix = read_prefix(family, tensors, 0) if checkpoint.format == "hf" else ""
    names = family.checkpoint_names(0, checkpoint.format, prefix)
    # Any of its tensors: a layer held in part is then built, and loading refuses it naming what is missing.
    return any(find_tensor(name, tensors, family) is not None for (layer, _), (name, _) in names.items()
               if layer == layer_name)  # fmt: skip


def shard_files(tensors):
    """`{tensor: its file}` of a sharded checkpoint's tensors, None for others."""
    return tensors.files if getattr(tensors, "path", None) and tensors.path.name == SAFETENSORS_INDEX else None


def _vocabulary(family, names, tensors):
    """The number of rows of the checkpoint's token table."""
    token = names.get((naming.EMBEDDING_TOKEN, "embeddings"))
    found = None if token is None else find_tensor(token[0], tensors, family)
    return None if found is None else tensors.shape(found)[0]


def family_for(model, family):
    """`family` (a name or a Family), or the one recorded on the model."""
    return family_of(model) if family is None else get_family(family)


def check_format(family, format):
    """Raise unless the family has checkpoint names in `format`."""
    if family.checkpoint_names is None:
        raise ValueError(no_place(family))
    if format not in family.formats:
        kept = " and ".join(FORMAT_TITLES[f] for f in family.formats)
        raise ValueError(f"{family.title} weights are kept in {kept} checkpoints only, not {FORMAT_TITLES[format]}.")


def no_place(family):
    kept = ", ".join(other.title for other in FAMILIES.values() if other.to_hf_config is not None)
    return (
        f"A {family.title} model has no place in a checkpoint: kwiden reads and writes checkpoints "
        f"of {kept}; save it as a .keras model instead."
    )


def placed(model, family, names):
    """Each weight of `model` with its checkpoint tensor's name and kind."""
    for layer in model.layers:
        for variable in layer.weights:
            if (layer.name, variable.name) not in names:
                raise ValueError(
                    f"'{variable.path}' has no place in a {family.title} checkpoint: checkpoints hold kwiden's "
                    f"Post-LN {family.title} (fold an Admin model first)."
                )
            yield (layer, variable, *names[layer.name, variable.name])


def find_tensor(name, tensors, family=None):
    """`name`, or the alternative name (`Family.alternative_names`) under which
    `tensors` holds it; None where it holds neither."""
    if name in tensors:
        return name
    for new, old in family.alternative_names.items() if family is not None else ():
        if name.endswith(new) and name[: -len(new)] + old in tensors:
            return name[: -len(new)] + old
    return None


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


def check_blocks(family, tensors, blocks, format, prefix, checkpoint_path):
    """Raise if the checkpoint has blocks the model lacks: loading would drop them."""
    extra = _extra_blocks(family, tensors, blocks, format, prefix)
    if extra:
        raise ValueError(
            f"The checkpoint {checkpoint_path} has Transformer blocks {extra} beyond the model's {blocks}: "
            "loading would drop them. Build the model with the checkpoint's num_hidden_layers."
        )


def _extra_blocks(family, tensors, blocks, format, prefix):
    """The blocks from `blocks` on that the checkpoint holds tensors of."""
    extra = []
    while True:
        index = blocks + len(extra)
        names = family.checkpoint_names(index + 1, format, prefix)
        if not any(
            find_tensor(name, tensors, family)
            for (layer, _), (name, _) in names.items()
            if naming.block_index(layer) == index
        ):
            return extra
        extra.append(index)


def check_nothing_dropped(family, names, used, tensors, checkpoint_path):
    """Refuse a checkpoint holding block tensors the model reads no weight
    from (biases its config leaves out, a Qwen2 read as a LLaMA, a Qwen3's
    q_norm), but for the buffers the family declares (`Family.buffers`),
    and an output head other than the token table where the config ties the
    two (`Family.tied_head`): loading would compute another function than the
    checkpoint's. `names` is the model's name map, `used` the names of the
    tensors read. Tensors outside the blocks the model has no weight for (a
    head it was built without) are left out."""
    for (layer, weight), (name, _) in names.items():
        found = None if name in used else find_tensor(name, tensors, family)
        if found is None:
            continue
        if family.tied_head is not None and layer == family.tied_head[0]:
            token = names[family.tied_head[1], "embeddings"][0]
            if np.array_equal(tensors[found], tensors[find_tensor(token, tensors, family)]):
                continue  # the tied head, written out as well
            raise ValueError(
                f"The checkpoint {checkpoint_path} holds an output head '{found}' that differs from its token table "
                f"'{token}', but the config ties the two (tie_word_embeddings): loading would drop the head. Pass "
                "tie_word_embeddings=False, or fix the config."
            )
        if naming.block_index(layer) is not None:
            raise ValueError(_dropped(checkpoint_path, found, family, f" ('{layer}/{weight}')"))
    read = {find_tensor(name, tensors, family) for name in used}
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


def one_dtype(named_dtypes, checkpoint_path, files=None):
    """`(dtype, a tensor of it)` for `(tensor name, dtype)` pairs of one float
    dtype (numpy's or safetensors' names; numpy's returned); a checkpoint holding integers (a
    quantized one's) is refused, naming the tensor, and one mixing dtypes
    (put together from different sources), naming two tensors, with their
    shard files where `files` maps tensors to files."""
    first = {}
    for name, dtype in named_dtypes:
        dtype = SAFETENSORS_NAMES.get(dtype, dtype)
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
    The other shapes are compared by the read plan."""
    checkpoint = open_checkpoint(checkpoint_path)
    format, path = checkpoint.format, checkpoint.path
    check_format(family, format)
    tensors = tensors_of(checkpoint)
    blocks = config["num_hidden_layers"]
    prefix = read_prefix(family, tensors, 1) if format == "hf" else ""  # the token table's name: one block will do
    names = family.checkpoint_names(1, format, prefix)
    _check_block_count(names, tensors, blocks, path)  # first: the checks below make a name map of every block
    check_blocks(family, tensors, blocks, format, prefix, path)
    vocab = config["vocab_size"] if keep_tokens is None else None  # `keep_tokens` selects the rows
    name, kind = names[naming.EMBEDDING_TOKEN, "embeddings"]
    found = find_tensor(name, tensors, family)
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


def _check_keep_tokens(keep_tokens, vocab):
    keep = np.asarray(keep_tokens)
    if (
        keep.ndim != 1
        or not np.issubdtype(keep.dtype, np.integer)
        or keep.size == 0
        or keep.min() < 0
        or (vocab is not None and keep.max() >= vocab)
    ):
        raise ValueError(
            f"`keep_tokens` must be a non-empty list of vocabulary ids in [0, {vocab}); got {list(keep_tokens)[:8]}…"
        )
    return keep
