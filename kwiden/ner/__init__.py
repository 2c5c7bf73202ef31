"""Named entities: the span heads' losses (`losses`), entity-level metrics
(`metrics`) and the refusal of targets a loss cannot read (`targets`). The heads
themselves are Keras layers in `kwiden.layers`.
"""

from kwiden.exports import lazy as _lazy

__getattr__, __dir__ = _lazy(__name__, {})  # its modules, as attributes once asked for
