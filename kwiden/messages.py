"""What kwiden says to its user: warnings that point at the user's own line.

`warn` is the one way kwiden warns (docs/architecture.md): Python's
`stacklevel` counts frames, and a warning raised three calls deep in kwiden
would otherwise name a kwiden file, or a wrong line once the calls between
change. Here the level is found, not counted: the first frame that is not
kwiden's. (Messages for refusals that recur belong here too.)
"""

import os
import sys
import warnings

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
