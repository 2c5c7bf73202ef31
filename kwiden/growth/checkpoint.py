"""Deprecated: streaming growth is `kwiden.growth.streaming` now; this name goes in the next release."""

from kwiden.growth import streaming as _streaming
from kwiden.messages import warn


def __getattr__(name):
    if name.startswith("__"):  # the import machinery's questions (`__path__`): no warning
        raise AttributeError(name)
    warn(f"kwiden.growth.checkpoint is now kwiden.growth.streaming; import {name} from there.", DeprecationWarning)
    return getattr(_streaming, name)
