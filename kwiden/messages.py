"""What kwiden says to its user: warnings that point at the user's own line,
and the refusals that recur, worded once.

`warn` is the one way kwiden warns (docs/architecture.md): Python's
`stacklevel` counts frames, and a warning raised three calls deep in kwiden
would otherwise name a kwiden file, or a wrong line once the calls between
change. Here the level is found, not counted: the first frame that is not
kwiden's. The refusals (a NaN tensor, a shape the config does not give, a
value beyond a dtype's range) are built by one function each, whichever
path meets them: loading, streaming growth or saving.
"""

import os
import sys
import warnings

import numpy as np

PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message, category=UserWarning):
    """`warnings.warn(message, category)` at the user's line: the first
    caller that is not kwiden's (`kwidens`). Where every frame is kwiden's
    (`python kwiden/cli.py`), the outermost."""
    frame, level = sys._getframe(1), 2  # warn's caller: warnings.warn's stacklevel 2
    while frame.f_back is not None and kwidens(frame):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def kwidens(frame):
    """Whether `frame` is kwiden's: it runs code of a module of the package,
    or it is `contextlib` running one of kwiden's context managers (`with
    replaced_atomically(...)` enters kwiden through it). A doctest of a
    kwiden docstring is the user's: its code is no file of the package."""
    if frame.f_globals.get("__name__") == "contextlib":
        return True
    return os.path.abspath(frame.f_code.co_filename).startswith(PACKAGE)


def nonfinite_tensor(file, tensor, variable, bad, remedy):
    """A checkpoint's tensor holds NaN or infinite values."""
    return (
        f"The checkpoint {file}'s tensor '{tensor}' (for '{variable.path}') holds {bad} NaN or infinite values, "
        f"which would make the model's outputs NaN; {remedy}"
    )


def nonfinite_weight(variable, bad):
    """A model's weight, about to be written, holds NaN or infinite values."""
    return (
        f"'{variable.path}' holds {bad} NaN or infinite values, and loading would refuse the checkpoint; "
        "pass allow_nonfinite=True to write it anyway."
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
