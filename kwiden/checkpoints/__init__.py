"""Checkpoints: Hugging Face folders (`config.json` + `model.safetensors`, or
its shards, read with numpy only) and Google's TensorFlow checkpoints
(`bert_config.json` + `bert_model.ckpt.*`, read and written with
TensorFlow's checkpoint ops, TensorFlow imported only then).

One concern a module: `formats` finds the checkpoint a path holds,
`safetensors` and `google` read and write their files, `manifest` vouches for
what kwiden wrote, `reading` makes the read plan (which tensor holds each
weight, every refusal checked once) that `loading` assigns and streaming
growth (`kwiden.grow_checkpoint`) iterates over, and `saving` writes a model.
The model's family (`kwiden.models.Family`) knows the rest: which tensor holds
each weight (`checkpoint_names`), the other names, buffers and heads a
checkpoint may hold, and the `config.json` (`to_hf_config`). Loading is all
or nothing: a missing tensor, a wrong shape, a NaN or a damaged file raises
before any weight is assigned.
"""

from kwiden.checkpoints.companions import (
    GROWN_REMEDY,
    TOKENIZER_FILES,
    WEIGHTLESS_MODULES,
    companion_files,
    copy_companions,
    pooling_config,
    refuse_stale_sentence_files,
    refuse_weighted_modules,
    sentence_modules,
)
from kwiden.checkpoints.formats import (
    CONFIG_FILES,
    FORMATS,
    GOOGLE_PREFIX,
    SAFETENSORS,
    SAFETENSORS_INDEX,
    Checkpoint,
    config_beside,
    detect_format,
    open_checkpoint,
)
from kwiden.checkpoints.loading import load_weights
from kwiden.checkpoints.manifest import MANIFEST, verify_manifest
from kwiden.checkpoints.reading import (
    Entry,
    ReadPlan,
    block_pattern,
    check_config,
    find_tensor,
    holds_layer,
    nonfinite,
    one_dtype,
    read_plan,
    read_prefix,
    read_tensors,
    tensors_of,
)
from kwiden.checkpoints.safetensors import MAX_SHARD_SIZE, SafetensorsTensors, SafetensorsWriter
from kwiden.checkpoints.saving import save_checkpoint, written_atomically, written_prefix

__all__ = [
    "GROWN_REMEDY",
    "TOKENIZER_FILES",
    "WEIGHTLESS_MODULES",
    "companion_files",
    "copy_companions",
    "pooling_config",
    "refuse_stale_sentence_files",
    "refuse_weighted_modules",
    "sentence_modules",
    "CONFIG_FILES",
    "FORMATS",
    "GOOGLE_PREFIX",
    "MANIFEST",
    "MAX_SHARD_SIZE",
    "SAFETENSORS",
    "SAFETENSORS_INDEX",
    "Checkpoint",
    "Entry",
    "ReadPlan",
    "SafetensorsTensors",
    "SafetensorsWriter",
    "block_pattern",
    "check_config",
    "config_beside",
    "detect_format",
    "find_tensor",
    "holds_layer",
    "load_weights",
    "nonfinite",
    "one_dtype",
    "open_checkpoint",
    "read_plan",
    "read_prefix",
    "read_tensors",
    "tensors_of",
    "save_checkpoint",
    "verify_manifest",
    "written_atomically",
    "written_prefix",
]
