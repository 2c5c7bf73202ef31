"""`kwiden.grow_checkpoint`: a Hugging Face checkpoint grown tensor by tensor,
never holding the model (docs/grow-checkpoint.md).

The rule for each tensor is the one `kwiden.grow` follows, not a copy of it:
the model is built from the folder's `config.json` as a *skeleton*, its
variables shaped but never allocated (`keras.StatelessScope`), and the growth
pipeline's first stages run on it as on any model: `options.resolve`,
`plan.plan_growth` (the axes of every weight, the blocks to copy) and
`rebuild.rebuild` (the grown skeleton, which says the grown shapes and writes
the grown `config.json` through the family's `to_hf_config`). The family's
name map (`checkpoint_names`) and `Layout`s say which tensor holds which
weight; each tensor is then read, put in kwiden's layout, grown by
`transfer.grown_value` (the function `grow` itself uses, with the same
per-weight random generator), put back in the file's layout and written
straight into its shard. So the result is, bit for bit, what loading the
folder, `kwiden.grow` and `kwiden.save_checkpoint` would write.
"""

import dataclasses
import pathlib

import keras
import numpy as np

from kwiden import checkpoints, messages
from kwiden.checkpoints.safetensors import MAX_SHARD_SIZE, shard_bytes, shards, write_shards
from kwiden.files import json_text
from kwiden.growth.expansion import GrowthError
from kwiden.growth.options import resolve
from kwiden.growth.plan import plan_growth
from kwiden.growth.rebuild import rebuild
from kwiden.growth.transfer import grown_value
from kwiden.memory import available_memory
from kwiden.messages import warn
from kwiden.models import family_of_config, get_family, naming
from kwiden.models.builder import build_transformer_model
from kwiden.models.config import read_config_file
from kwiden.models.layout import Layout, checkpoint_shape, join_parts, to_checkpoint

# The dtypes a grown checkpoint may be written in.
DTYPES = ("float32", "bfloat16", "float16", "float64")


@dataclasses.dataclass(frozen=True)
class GrownCheckpoint:
    """What `grow_checkpoint` wrote: the folder, the parameters before and
    after, and the weight files (shards) in it."""

    path: pathlib.Path
    source_parameters: int
    parameters: int
    files: tuple
    copied: tuple = ()


@dataclasses.dataclass
class _Tensor:
    """One tensor of the grown checkpoint and the weights it is grown from."""

    name: str
    layout: Layout
    shape: tuple
    # [(placed entry, weight index, its read plan entry, the part's layout in this tensor)]
    parts: list = dataclasses.field(default_factory=list)


def grow_checkpoint(
    src,
    dst,
    k=None,
    ffn_factor=None,
    heads="count",
    rope="exact",
    spread=2.0,
    seed=None,
    depth=None,
    num_layers=None,
    allow_approximate=False,
    hidden_size=None,
    intermediate_size=None,
    dtype=None,
    max_shard_size=MAX_SHARD_SIZE,
    model=None,
    allow_nonfinite=False,
    progress=False,
):
    """Grow the Hugging Face checkpoint in folder `src` into a new folder
    `dst`, one tensor at a time (docs/grow-checkpoint.md).

    The growth options are `kwiden.grow`'s (`k`, `ffn_factor`, `heads`
    (here `"count"` by default: it keeps head_dim and the RoPE schedule, which
    LLaMA's, Mistral's and Qwen2's configs need),
    `rope`, `spread`, `seed`, `depth`, `num_layers`, `allow_approximate`,
    `hidden_size`, `intermediate_size`; `kwiden.growth.arguments.GrowthArguments`
    declares them and the ones below); with the same options and `seed`, the
    grown tensors are bit for bit those `kwiden.save_checkpoint` writes after
    loading `src` and `kwiden.grow` (float32 checkpoints; see `dtype`). Peak
    memory is about one grown tensor and the float64 work of expanding it;
    the model is never held.

    Args:
        src: a folder with `config.json` and `model.safetensors` or the shards
            a `model.safetensors.index.json` names, of a family kwiden reads
            (LLaMA, Mistral, Qwen2, GPT-2, BERT), found by its `model_type`
            (or `model=`).
        dst: a new folder (or an empty one), not `src` nor inside it. Written
            as a temporary sibling folder renamed at the end: `dst` appears
            whole or not at all.
        dtype: the grown tensors' dtype: by default the source's (a bfloat16
            checkpoint stays bfloat16, each grown value rounded once from
            float64); `"float32"` writes what loading into a float32 model,
            growing and saving gives, bit for bit.
        max_shard_size: the largest weight file, in bytes or as `"5GB"`,
            `"500MB"`; more tensors make more shards and an index (a tensor
            larger than it gets a shard of its own).
        allow_nonfinite: grow tensors with NaN or infinite values all the same.
        progress: show a progress bar (bytes written).

    The tokenizer's, generation's and sentence-transformers' files beside the
    weights (`vocab.txt`, `tokenizer.json`, `generation_config.json`,
    `modules.json`, `1_Pooling/`, …: `kwiden.checkpoints.companion_files`)
    are copied into `dst`, the pooling's width made the grown one; no other
    file is. A sentence-transformers module with weights of its own (a
    `Dense` after the pooling) is refused: growth widens what it reads.

    Returns a `GrownCheckpoint` (the folder, parameter counts, its weight
    files, the files copied). Refused, naming the file and the tensor, before
    anything is written: a folder that is no Hugging Face checkpoint, an
    unknown `model_type`, a config the tensors contradict, a shard the index
    names but the folder lacks, a tensor missing or of a shape the config
    does not give, integer or mixed dtypes, a block tensor the model would
    not read; during the writing (nothing is left): a damaged file, NaN or
    infinite values, a value beyond `dtype`'s range (float16's 65504).
    """
    src, dst = _paths(src, dst)
    limit = shard_bytes(max_shard_size)
    checkpoint = checkpoints.open_checkpoint(src)
    if checkpoint.format != "hf":
        raise ValueError(
            f"{src} holds a Google checkpoint; grow_checkpoint grows Hugging Face folders (model.safetensors). "
            "Load it with kwiden.build_transformer_model, grow it with kwiden.grow and save it."
        )
    config_path = checkpoints.config_beside(checkpoint)
    source_config = read_config_file(config_path)
    family = _family(source_config, model, config_path)
    tensors = checkpoints.tensors_of(checkpoint)
    checkpoints.check_config(family, family.config(config_path=config_path), checkpoint)  # before building, as loading
    with keras.StatelessScope(initialize_variables=False):  # shapes only: no weight is allocated
        small = _skeleton(family, config_path, checkpoint)
        options = resolve(
            small, k=k, ffn_factor=ffn_factor, heads=heads, rope=rope, spread=spread, seed=seed, depth=depth,
            num_layers=num_layers, allow_approximate=allow_approximate, hidden_size=hidden_size,
            intermediate_size=intermediate_size,
        )  # fmt: skip
        plan = plan_growth(small, options, check_memory=False)
        big, placed = rebuild(plan)
        grown_config = {**source_config, **family.to_hf_config(big, "hf")}
        parameters = (small.count_params(), big.count_params())
    if plan.approximations:
        warn(
            f"grow_checkpoint: {', '.join(plan.approximations)} accepted as approximate (allow_approximate=True); "
            "nothing was measured. Load both folders and compare them with kwiden.verify."
        )
    remedy = "pass allow_nonfinite=True to grow it anyway. Nothing was written."
    read = checkpoints.read_plan(small, checkpoint, family, allow_nonfinite=allow_nonfinite, remedy=remedy)
    grown_names = family.checkpoint_names(
        naming.count_blocks(layer.name for layer in big.layers), "hf", checkpoints.written_prefix(grown_config, family)
    )
    width = _grown_width(src, big)  # before anything is written
    outputs = _outputs(placed, read, grown_names)
    out_dtype = _numpy_dtype(read.dtype) if dtype is None else _dtype(dtype)
    grown_config["torch_dtype"] = out_dtype.name
    if "dtype" in source_config:  # transformers 5's name for it
        grown_config["dtype"] = out_dtype.name
    _warn_unused(tensors, outputs, src)
    files = shards([(output.name, out_dtype, output.shape) for output in outputs], limit)
    _check_memory(outputs)
    with checkpoints.written_atomically(dst, "hf") as temporary:
        (temporary / checkpoints.CONFIG_FILES["hf"]).write_text(
            json_text(grown_config, "The grown config.json"), encoding="utf-8"
        )
        _write(temporary, files, outputs, read, out_dtype, options, progress)
        copied = checkpoints.copy_companions(src, temporary, width)
    return GrownCheckpoint(dst, *parameters, tuple(file for file, _ in files), copied)


def _grown_width(src, big):
    """The grown model's width; `src`'s sentence-transformers modules with weights that cannot read it refused."""
    width = big.get_layer(naming.EMBEDDING_TOKEN).output_dim
    checkpoints.refuse_weighted_modules(src, width, checkpoints.GROWN_REMEDY)
    return width


def _paths(src, dst):
    src, dst = pathlib.Path(src), pathlib.Path(dst)
    if not src.is_dir():
        what = "does not exist" if not src.exists() else "is a file"
        raise FileNotFoundError(f"{src} {what}; grow_checkpoint reads a Hugging Face checkpoint folder.")
    if dst.resolve() == src.resolve() or src.resolve() in dst.resolve().parents:
        raise ValueError(f"{dst} is {src} or inside it; write the grown checkpoint to a new folder.")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise FileExistsError(
            f"{dst} exists and is {'a file' if not dst.is_dir() else 'not empty'}; grow_checkpoint writes a new "
            "folder (or into an empty one). Choose another name, or delete it first."
        )
    return src, dst


def _dtype(dtype):
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise ValueError(f"`dtype` must be one of {DTYPES} (or None: the source's), got dtype={dtype!r}.")
    return _numpy_dtype(name)


def _numpy_dtype(name):
    import ml_dtypes  # numpy's bfloat16; installed with TensorFlow

    return np.dtype(getattr(ml_dtypes, name)) if name == "bfloat16" else np.dtype(name)


def _family(config, model, config_path):
    if model is not None:
        family = get_family(model)
    else:
        try:
            family = family_of_config(config)
        except ValueError as error:
            raise ValueError(f"{config_path}: {error}") from None
    if family.checkpoint_names is None or "hf" not in family.formats or family.to_hf_config is None:
        raise ValueError(
            f"{config_path}: {family.title} models are not kept in Hugging Face checkpoints kwiden writes; "
            "grow_checkpoint grows LLaMA, Mistral, Qwen2, GPT-2 and BERT folders."
        )
    return family


def _skeleton(family, config_path, checkpoint):
    """The model `config_path` describes, with its task heads where the
    checkpoint has their tensors; built under a `StatelessScope`, so that
    its variables have shapes and no values."""

    def holds(layer):
        return checkpoints.holds_layer(checkpoint, layer, family)

    flags = {"with_mlm": holds(naming.MLM_DENSE), "with_pool": holds(naming.POOLER_DENSE)}
    flags = {flag: value for flag, value in flags.items() if flag in family.flags}
    try:
        return build_transformer_model(config_path=config_path, model=family, **flags)
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{config_path}: {error}") from None


def _outputs(placed, read, grown_names):
    """`[_Tensor]` of the grown checkpoint in the order they are written,
    each with the read plan's entries it is grown from."""
    outputs, seen = {}, set()
    for entry in placed:
        if not entry.plan.weights or id(entry.layer) in seen:  # weightless ops; a shared layer's weights once
            continue
        seen.add(id(entry.layer))
        for index, (source, grown) in enumerate(zip(entry.plan.weights, entry.layer.weights)):
            grown_name, grown_kind = grown_names[entry.layer.name, grown.name]
            grown_layout = Layout.of(grown_kind, "hf")
            output = outputs.setdefault(
                grown_name, _Tensor(grown_name, grown_layout, checkpoint_shape(grown.shape, grown_layout))
            )
            output.parts.append((entry, index, read[entry.source_name, source.name], grown_layout))
    return list(outputs.values())


def _warn_unused(tensors, outputs, src):
    used = {found.tensor for output in outputs for *_, found, _ in output.parts}
    unused = [name for name in tensors if name not in used]
    if unused:
        warn(
            f"grow_checkpoint: {len(unused)} tensors of {src} hold no weight of the model and are not carried to "
            f"the grown checkpoint: {', '.join(unused[:5])}{', …' * (len(unused) > 5)}."
        )


def _check_memory(outputs):
    """Refuse, before writing, a tensor whose growth would not fit: its
    float64 value, its random splits and their means (about 3 × 8 bytes an
    element, measured: benchmarks/grow_checkpoint.py)."""
    largest = max(outputs, key=lambda output: int(np.prod(output.shape, dtype=np.int64)))
    need = 3 * 8 * int(np.prod(largest.shape, dtype=np.int64))
    available = available_memory()
    if available is not None and need > available:
        raise GrowthError(
            f"Growing '{largest.name}' to shape {largest.shape} needs about {need / 2**30:.1f} GiB of memory at its "
            f"peak; {available / 2**30:.1f} GiB is available. Grow by a smaller factor, or on a machine with more memory."
        )


def _write(folder, files, outputs, read, dtype, options, progress):
    """Each shard (`files`), tensor by tensor, and the index where there are several."""
    from tqdm.auto import tqdm

    by_name = {output.name: output for output in outputs}
    total = sum(int(np.prod(output.shape, dtype=np.int64)) * dtype.itemsize for output in outputs)

    def grown(name):
        value = _grown_tensor(by_name[name], read, dtype, options)
        if not read.allow_nonfinite:
            _check_fits(by_name[name], value, read, dtype)
        return value

    with tqdm(total=total, unit="B", unit_scale=True, desc="kwiden grow", disable=not progress) as bar:
        write_shards(folder, files, grown, lambda value: bar.update(value.nbytes))


def _check_fits(output, value, read, dtype):
    """Refuse a grown tensor whose finite source values overflowed `dtype`
    (a float32 norm of 70000 is `inf` in float16): what is written is checked,
    not only what was read, which the reader checked for NaN and infinities."""
    bad = checkpoints.nonfinite(value)
    if bad:
        sources = np.concatenate([np.ravel(read.raw(found)).astype(np.float64) for *_, found, _ in output.parts])
        raise ValueError(
            messages.overflow(f"The grown '{output.name}'", dtype, bad, sources)
            + " Write it with dtype='float32' or 'bfloat16' (or leave dtype out: the source's). Nothing was written."
        )


def _grown_tensor(output, read, dtype, options):
    """The grown tensor `output`, from its parts (one, or GPT-2's fused three)."""
    pieces = {}
    for entry, index, found, grown_layout in output.parts:
        source = read.value(found).astype(dtype, copy=False)
        grown = grown_value(entry, index, source, options.spread, options.entropy)
        pieces[grown_layout.part[0] if grown_layout.part else 0] = to_checkpoint(grown, grown_layout)
    if output.layout.part is None:
        return np.ascontiguousarray(pieces[0])
    return np.ascontiguousarray(join_parts([pieces[i] for i in range(output.layout.part[1])], output.layout))


__all__ = ["GrownCheckpoint", "grow_checkpoint"]
