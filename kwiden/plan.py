"""Deprecated: the graph walker is `kwiden.walk` now; this name goes in the next release."""

from kwiden import walk as _walk
from kwiden.messages import warn


def __getattr__(name):
    warn(f"kwiden.plan is now kwiden.walk; import {name} from there.", DeprecationWarning)
    return getattr(_walk, name)
