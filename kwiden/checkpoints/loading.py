"""`load_weights`: every weight of a model from a checkpoint, all or nothing."""

from kwiden import messages
from kwiden.checkpoints.reading import nonfinite, read_plan


def load_weights(model, checkpoint_path, keep_tokens=None, family=None, allow_nonfinite=False, fresh_heads=False):
    """Fill every weight of `model` from a checkpoint.

    `checkpoint_path`: a folder, a safetensors file, a Google prefix, or an
    `open_checkpoint` `Checkpoint`. `keep_tokens`: the vocabulary ids to
    keep, in their new order (the model was built with
    `vocab_size=len(keep_tokens)`). `family`: the model's (a name or a
    `Family`); by default the one recorded on the model. Raises, naming the
    variable or the file, before assigning anything if a tensor is missing,
    has the wrong shape or holds NaN or infinite values (unless
    `allow_nonfinite=True`), if a file is damaged or differs from the
    folder's `kwiden-manifest.json`, or if the folder holds two checkpoints.
    `fresh_heads=True`: an optional head (the family's `heads`) the
    checkpoint lacks keeps its initial values instead, its variables' paths
    in `model.fresh_weights`.
    """
    plan = read_plan(model, checkpoint_path, family, keep_tokens, allow_nonfinite, fresh_heads=fresh_heads)
    values = [
        (entry.variable, _cast(plan.value(entry), entry.variable.dtype, entry.name, allow_nonfinite, plan))
        for entry in plan.entries
    ]
    for variable, value in values:  # only once every weight has its value
        variable.assign(value)
    model.fresh_weights = tuple(plan.fresh)
    return model


def _cast(value, dtype, name, allow_nonfinite, plan):
    """`value` in the model's `dtype`; refused where finite values would
    overflow it (a float32 norm of 70000 in a float16 model)."""
    cast = value.astype(dtype)
    bad = 0 if allow_nonfinite or cast.dtype == value.dtype else nonfinite(cast) - nonfinite(value)
    if bad:
        raise ValueError(
            messages.overflow(f"The checkpoint {plan.checkpoint.path}'s '{name}'", cast.dtype, bad, value)
            + " Build the model in float32 or bfloat16 (keras.config.set_dtype_policy), or load it anyway with "
            "allow_nonfinite=True."
        )
    return cast
