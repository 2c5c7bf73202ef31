"""Stage 3 of `grow`: the grown functional model, laid along the small one.

Each call gets a new layer from its planned config; with depth growth each
block's last call is followed by the block's copies, each a fresh set of
layers called on the stream the previous copy handed on.
"""

import dataclasses

import keras

from kwiden.growth.depth import renamed
from kwiden.growth.graph import Rebuild
from kwiden.layers.expandable import Expandable


@dataclasses.dataclass
class Placed:
    """A layer of the grown model and where its weights come from."""

    layer: object
    plan: object  # the kwiden.growth.walk.LayerPlan of its source layer
    source_name: str
    zeroed: bool = False  # a copied block's branch end: output weights start at zero
    copy: bool = False  # a layer of a copied block
    fresh: bool = False  # newly initialised (new_blocks="fresh"): no weights from its source


def rebuild(plan):
    """`(big model, [Placed])` for a `GrowthPlan`."""
    layer_plans = {id(node): layer_plan for node, layer_plan in plan.walk.steps}
    last_nodes = {id(block.nodes[-1]): block for block in plan.blocks}
    graph, placed = Rebuild(plan.source), []

    def place(node, name, tensors=None, key=None, zeroed=False, copy=False):
        op, layer_plan = node.operation, layer_plans[id(node)]
        config = {**layer_plan.config, "name": name}
        make = lambda: _record(placed, Placed(new_layer(op, config), layer_plan, op.name, zeroed, copy))  # noqa: E731
        graph.call(node, make, tensors, key)

    for node, _ in plan.walk.steps:
        place(node, plan.renamed(node.operation.name))
        block = last_nodes.get(id(node))
        if block is not None:
            _copy_block(block, plan.indices[block.index][1:], graph, place)
    big = graph.finish()
    for entry in placed:  # built now: their configs get their initializers back
        restore_initializers(entry.layer, entry.plan.config)
    return big, placed


def _copy_block(block, indices, graph, place):
    """Lay copies `indices` of `block` on the stream after it."""
    stream = graph.tensors[id(block.stream_out)]
    for index in indices:
        local = {**graph.tensors, id(block.stream_in): stream}
        for node in block.nodes:
            op = node.operation
            zeroed = id(op) in block.zeroed
            place(node, renamed(op.name, block.index, index, copy=True), local, (index, id(op)), zeroed, copy=True)
        stream = local[id(block.stream_out)]
    graph.tensors[id(block.stream_out)] = stream


def _record(placed, entry):
    placed.append(entry)
    return entry.layer


# Layers whose `*_initializer` config keys are the attributes they build from.
QUICK_BUILD = (Expandable, keras.layers.Dense, keras.layers.Embedding)


def new_layer(op, config):
    """The grown layer of `config`. For kwiden's layers and Keras' Dense and
    Embedding, built with zeros for initializers: growth overwrites every
    weight, and random initialisers would take most of its time
    (`restore_initializers` puts them back once the layer is built)."""
    if not isinstance(op, QUICK_BUILD):
        return op.__class__.from_config(config)
    return op.__class__.from_config(
        {key: "zeros" if key.endswith("_initializer") and value else value for key, value in config.items()}
    )


def restore_initializers(layer, config):
    """Put back the initializers of `config`, so the grown layer's config keeps them."""
    if not isinstance(layer, QUICK_BUILD):
        return
    for key, value in config.items():
        if key.endswith("_initializer") and value:
            setattr(layer, key, keras.initializers.get(value))
