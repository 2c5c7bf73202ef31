"""Deprecated: the graph walker is `kwiden.walk` now; this name goes in the next release."""

from kwiden import walk as _walk
from kwiden.messages import warn


def __getattr__(name):
    if name.startswith("__"):  # the import machinery's questions (`__path__`): no warning
        raise AttributeError(name)
    warn(f"kwiden.plan is now kwiden.walk; import {name} from there.", DeprecationWarning)
    return getattr(_walk, name)
