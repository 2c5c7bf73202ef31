"""Deprecated: streaming growth is `kwiden.growth.streaming` now; this name goes in the next release."""

import warnings

from kwiden.growth import streaming as _streaming


def __getattr__(name):
    warnings.warn(
        f"kwiden.growth.checkpoint is now kwiden.growth.streaming; import {name} from there.",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_streaming, name)
