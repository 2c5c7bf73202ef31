"""Deprecated: the graph walker is `kwiden.walk` now; this name goes in the next release."""

import warnings

from kwiden import walk as _walk


def __getattr__(name):
    warnings.warn(f"kwiden.plan is now kwiden.walk; import {name} from there.", DeprecationWarning, stacklevel=2)
    return getattr(_walk, name)
