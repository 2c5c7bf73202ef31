"""Depth growth (docs/depth.md): more Transformer blocks, each new one a copy of
its neighbour whose residual branches end in zeros.

Blocks are recognised by their layer names, `Transformer-{i}-…`, as kwiden's
builders name them. In a Pre-LN block the stream only passes through residual
`Add`s, so with the branches' output projections at zero the new block is an
exact identity. In a Post-LN block a LayerNorm sits on the stream and no
weights make it the identity: depth growth there is approximate.
"""

import collections
import dataclasses
import re

import keras

from kwiden.expansion import GrowthError
from kwiden.layers.admin_residual import AdminResidual

BLOCK_NAME = re.compile(r"^Transformer-(\d+)-")


def block_of(name):
    match = BLOCK_NAME.match(name)
    return int(match.group(1)) if match else None


def renamed(name, index):
    return BLOCK_NAME.sub(f"Transformer-{index}-", name, count=1)


def copies_per_block(blocks, depth=None, num_layers=None):
    """How many blocks each source block becomes, spread evenly."""
    if depth is not None and num_layers is not None:
        raise ValueError("Give `depth` (a factor) or `num_layers` (a total), not both.")
    if depth is not None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"`depth` must be a positive integer, got depth={depth!r}.")
        num_layers = depth * blocks
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < blocks:
        raise ValueError(
            f"`num_layers` must be an integer >= the model's {blocks} blocks, got num_layers={num_layers!r}."
        )
    return [(i + 1) * num_layers // blocks - i * num_layers // blocks for i in range(blocks)]


def new_indices(counts):
    """For each source block, the indices of the blocks it becomes (itself first)."""
    starts = [sum(counts[:i]) for i in range(len(counts))]
    return [list(range(start, start + count)) for start, count in zip(starts, counts)]


@dataclasses.dataclass
class Block:
    index: int
    steps: list  # (node, plan) in graph order
    stream_in: object  # the small model's tensor that enters the block
    stream_out: object  # the tensor the block hands on
    zeroed: set  # ids of the layers whose output weights end a residual branch
    exact: bool  # Pre-LN: with those zeroed, the block is the identity


# Where a residual branch joins the stream. Only a plain Add keeps a zero
# branch an identity; Admin's LN(ω ⊙ x + f) does not (docs/depth.md).
RESIDUAL_MERGES = (keras.layers.Add, AdminResidual)


def find_blocks(model, steps):
    grouped = collections.defaultdict(list)
    for node, plan in steps:
        index = block_of(node.operation.name)
        if index is not None:
            grouped[index].append((node, plan))
    if not grouped:
        raise GrowthError(
            "Depth growth needs Transformer blocks named 'Transformer-{i}-…' (as kwiden's "
            "builders name them); this model has none."
        )
    if sorted(grouped) != list(range(len(grouped))):
        raise GrowthError(f"Transformer blocks are not numbered 0..{len(grouped) - 1}: {sorted(grouped)}.")
    return [_block(model, index, grouped[index]) for index in range(len(grouped))]


def _block(model, index, steps):
    produced = {id(x) for node, _ in steps for x in node.outputs}
    inputs = {id(x): x for node, _ in steps for x in node.input_tensors if id(x) not in produced}
    # The stream is what the block's residual Adds read from outside it.
    added = {id(x) for node, _ in steps if isinstance(node.operation, RESIDUAL_MERGES) for x in node.input_tensors}
    streams = [x for x in inputs.values() if id(x) in added]
    consumed_inside = {id(x) for node, _ in steps for x in node.input_tensors}
    model_outputs = {id(x) for x in model.outputs}
    outputs = [
        x for node, _ in steps for x in node.outputs if id(x) in model_outputs or id(x) not in consumed_inside
    ]
    if len(streams) != 1 or len(outputs) != 1:
        raise GrowthError(
            f"Transformer block {index} should take one stream tensor and hand on one; it "
            f"takes {len(streams)} and hands on {len(outputs)}, so kwiden cannot copy it."
        )
    stream_in, stream_out = streams[0], outputs[0]
    producer = {id(x): node for node, _ in steps for x in node.outputs}
    consumers = collections.defaultdict(list)
    for node, _ in steps:
        for x in node.input_tensors:
            consumers[id(x)].append(node)
    zeroed, current, exact = set(), stream_in, True
    while id(current) != id(stream_out):
        adds = [n for n in consumers[id(current)] if isinstance(n.operation, keras.layers.Add)]
        if len(adds) != 1:
            exact = False
            break
        add = adds[0]
        for branch in add.input_tensors:
            if id(branch) != id(current):
                zeroed.add(id(_branch_end(branch, producer, index)))
        current = add.outputs[0]
    if not exact:
        zeroed = {id(_branch_end(add_input, producer, index)) for add_input in _add_branches(steps, producer)}
    return Block(index, steps, stream_in, stream_out, zeroed, exact)


def _add_branches(steps, producer):
    """The branch inputs of every residual merge (Post-LN and Admin blocks)."""
    for node, _ in steps:
        if isinstance(node.operation, RESIDUAL_MERGES):
            yield from (x for x in node.input_tensors if _branch_layer(x, producer) is not None)


def _branch_layer(x, producer):
    """The layer with `residual_output_weights` that produced `x`, through
    Dropout and other weightless layers; None if there is none."""
    node = producer.get(id(x))
    while node is not None and not node.operation.weights:
        node = producer.get(id(node.input_tensors[0]))
    if node is None or not hasattr(node.operation, "residual_output_weights"):
        return None
    return node.operation


def _branch_end(x, producer, index):
    layer = _branch_layer(x, producer)
    if layer is None:
        raise GrowthError(
            f"A residual branch of Transformer block {index} does not end in a layer with "
            "`residual_output_weights` (as ExpandableMultiHeadAttention and FeedForward "
            "have), so kwiden cannot make a new block start as an identity."
        )
    return layer


def zero_output_weights(layer, weights):
    """The grown weights of a copied branch-ending layer, its output projection at zero."""
    names = set(layer.residual_output_weights)
    return [w * 0 if v.name in names else w for v, w in zip(layer.weights, weights)]
