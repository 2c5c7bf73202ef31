"""Growth: a model made wider and deeper while it computes the same function.

`expansion` is the calculus on one tensor (numpy only); `graph` walks and rebuilds
functional graphs; `walk` and `depth` plan a growth call by call; `plan`, `rebuild`,
`transfer`, `check` and `optimizer` are the stages `pipeline.grow` runs in order;
`streaming` grows a checkpoint folder tensor by tensor; `verify` compares a grown
model with its source; `options` declares every growth option once; `hub` grows
KerasHub models. The package imports nothing, so that layers may use the calculus.
"""

from kwiden.exports import lazy as _lazy

__getattr__, __dir__ = _lazy(__name__, {})  # its modules, as attributes once asked for
