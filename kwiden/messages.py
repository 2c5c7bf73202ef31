"""The refusals that recur, worded once, and `warn`, which points a warning
at the user's line."""

import numpy as np


def nonfinite_tensor(file, tensor, variable, bad, remedy):
    """A checkpoint's tensor holds NaN or infinite values."""
    return (
        f"The checkpoint {file}'s tensor '{tensor}' (for '{variable.path}') holds {bad} NaN or infinite values, "
        f"which would make the model's outputs NaN; {remedy}"
    )


def shape_mismatch(file, tensor, shape, variable, name, expected):
    """A checkpoint's tensor has another shape than the config makes the weight."""
    return (
        f"'{variable.path}' (shape {tuple(variable.shape)}) needs '{name}' of shape {expected}; the checkpoint's "
        f"has {tuple(shape)} ({file}: '{tensor}'): the config does not match the checkpoint."
    )


def overflow(what, dtype, bad, source):
    """Why `what`, finite in `source`, cannot be held in `dtype`: `bad` of its
    entries would be infinite."""
    import ml_dtypes  # numpy's finfo knows no bfloat16; installed with TensorFlow

    largest = float(np.max(np.abs(np.asarray(source, np.float64))))
    return (
        f"{what} does not fit in {np.dtype(dtype).name}: {bad} of its entries would be infinite there, its "
        f"largest magnitude being {largest:g} where {np.dtype(dtype).name} holds at most "
        f"{float(ml_dtypes.finfo(dtype).max):g}."
    )
