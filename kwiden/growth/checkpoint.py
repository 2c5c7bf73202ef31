"""Deprecated: streaming growth is `kwiden.growth.streaming` now; this name goes in the next release."""

from kwiden.growth import streaming as _streaming
from kwiden.messages import warn


def __getattr__(name):
    warn(f"kwiden.growth.checkpoint is now kwiden.growth.streaming; import {name} from there.", DeprecationWarning)
    return getattr(_streaming, name)
