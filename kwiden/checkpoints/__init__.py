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

from kwiden.exports import lazy as _lazy

_NAMES = {
    **dict.fromkeys(
        (
            "GROWN_REMEDY",
            "TOKENIZER_FILES",
            "WEIGHTLESS_MODULES",
            "companion_files",
            "copy_companions",
            "pooling_config",
            "refuse_stale_sentence_files",
            "refuse_weighted_modules",
            "sentence_modules",
        ),
        "kwiden.checkpoints.companions",
    ),
    **dict.fromkeys(
        (
            "CONFIG_FILES",
            "FORMATS",
            "GOOGLE_PREFIX",
            "SAFETENSORS",
            "SAFETENSORS_INDEX",
            "Checkpoint",
            "config_beside",
            "folder_config",
            "detect_format",
            "open_checkpoint",
        ),
        "kwiden.checkpoints.formats",
    ),
    "load_weights": "kwiden.checkpoints.loading",
    **dict.fromkeys(("MANIFEST", "verify_manifest"), "kwiden.checkpoints.manifest"),
    **dict.fromkeys(
        (
            "Entry",
            "ReadPlan",
            "block_pattern",
            "check_config",
            "find_tensor",
            "holds_layer",
            "nonfinite",
            "one_dtype",
            "read_plan",
            "read_prefix",
            "read_tensors",
            "tensors_of",
        ),
        "kwiden.checkpoints.reading",
    ),
    **dict.fromkeys(("MAX_SHARD_SIZE", "SafetensorsTensors", "SafetensorsWriter"), "kwiden.checkpoints.safetensors"),
    **dict.fromkeys(("save_checkpoint", "written_atomically", "written_prefix"), "kwiden.checkpoints.saving"),
}
__getattr__, __dir__ = _lazy(__name__, _NAMES)
__all__ = sorted(_NAMES, key=str.lower)
