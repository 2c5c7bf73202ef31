"""Depth growth (docs/depth.md): more Transformer blocks, each new one a copy of
its neighbour whose residual branches end in zeros.

Blocks are found by structure. A residual merge is an `Add` (or Admin's
`AdminResidual`) of the stream `x` and a branch `f(x)` computed from it; the
merges along the stream, in order, fall into blocks by the smallest period
with which their branches repeat (attention, feed-forward, attention, …).
Names only serve to renumber copied layers (`kwiden.naming`). In a Pre-LN
block the stream only passes through plain `Add`s, so with the branches'
output projections at zero the new block is an exact identity. Where a
LayerNorm sits on the stream (Post-LN, Admin) no weights make it the
identity: depth growth there is approximate.
"""

import dataclasses

import keras

from kwiden import naming
from kwiden.expansion import GrowthError
from kwiden.graph import Graph
from kwiden.layers.admin_residual import AdminResidual

# Where a residual branch joins the stream.
RESIDUAL_MERGES = (keras.layers.Add, AdminResidual)


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


def renamed(name, source_index, index):
    """A block layer's name in block `index`: renumbered where the name says
    its block (`kwiden.naming.block`), else suffixed for copies."""
    if naming.block_index(name) == source_index:
        return naming.renumbered(name, index)
    return name if index == source_index else f"{name}-{index}"


@dataclasses.dataclass
class Block:
    index: int
    nodes: list  # the small model's nodes of the block, in graph order
    stream_in: object  # the small model's tensor that enters the block
    stream_out: object  # the tensor the block hands on
    zeroed: set  # ids of the layers whose output weights end a residual branch
    exact: bool  # Pre-LN: with those zeroed, the block is the identity


@dataclasses.dataclass
class _Merge:
    node: object
    stream: object  # the stream input x
    branch: object  # the branch input f(x)


def find_blocks(model):
    """The Transformer blocks of `model`, in order (`GrowthError` if none)."""
    graph = Graph(model)
    merges = _residual_merges(graph)
    if not merges:
        raise GrowthError(
            f"Depth growth needs residual blocks (an Add of a stream and a branch computed from it); "
            f"model '{model.name}' has none."
        )
    period = _period([_branch_kind(m, graph) for m in merges])
    streams = [m.stream for m in merges] + [_after_last(merges, period, graph)]
    blocks = []
    for index in range(len(merges) // period):
        own = merges[index * period : (index + 1) * period]
        stream_in, stream_out = streams[index * period], streams[(index + 1) * period]
        nodes = _between(graph, stream_in, stream_out)
        exact = (
            all(type(m.node.operation) is keras.layers.Add for m in own)
            and all(id(a.node.outputs[0]) == id(b.stream) for a, b in zip(own, own[1:]))
            and id(own[-1].node.outputs[0]) == id(stream_out)
        )
        zeroed = {id(_branch_end(m.branch, graph, index)) for m in own}
        blocks.append(Block(index, nodes, stream_in, stream_out, zeroed, exact))
    return blocks


def _residual_merges(graph):
    """The residual merges of the stream, in graph order: an Add or
    AdminResidual of two tensors, one computed from the other."""
    merges = []
    for node in graph.nodes:
        if isinstance(node.operation, RESIDUAL_MERGES) and len(node.input_tensors) == 2:
            a, b = node.input_tensors
            if _depends_on(graph, b, a):
                merges.append(_Merge(node, a, b))
            elif _depends_on(graph, a, b) and not isinstance(node.operation, AdminResidual):
                merges.append(_Merge(node, b, a))
    return merges


def _depends_on(graph, tensor, source):
    """Whether `tensor` is computed from `source`."""
    seen, todo = set(), [tensor]
    while todo:
        x = todo.pop()
        if id(x) == id(source):
            return True
        node = graph.producer.get(id(x))
        if node is not None and id(node) not in seen:
            seen.add(id(node))
            todo.extend(node.input_tensors)
    return False


def _branch_kind(merge, graph):
    """What a branch computes, as far as blocks repeat: its end layer's class."""
    _, node = graph.upstream(merge.branch)
    return type(node.operation) if node is not None else None


def _period(kinds):
    """The smallest p dividing len(kinds) with kinds[i] == kinds[i + p]."""
    for p in range(1, len(kinds) + 1):
        if len(kinds) % p == 0 and all(kinds[i] == kinds[i + p] for i in range(len(kinds) - p)):
            return p


def _after_last(merges, period, graph):
    """The stream the last block hands on: its last merge's output carried as
    far as an earlier merge's output was carried to the next merge's stream
    (through a Post-LN norm, say)."""
    last = merges[-1].node.outputs[0]
    if len(merges) < 2:
        return last
    previous, following = merges[-2], merges[-1]
    chain, _ = _path(graph, previous.node.outputs[0], following.stream)
    x = last
    for kind in chain:
        readers = [n for n in graph.readers.get(id(x), []) if type(n.operation) is kind and len(n.input_tensors) == 1]
        if len(readers) != 1:
            break
        x = readers[0].outputs[0]
    return x


def _path(graph, start, end):
    """The classes of the single-input layers leading from `start` to `end`."""
    kinds, x = [], end
    while id(x) != id(start):
        node = graph.producer.get(id(x))
        if node is None or len(node.input_tensors) != 1:
            return [], None
        kinds.append(type(node.operation))
        x = node.input_tensors[0]
    return kinds[::-1], x


def _between(graph, stream_in, stream_out):
    """The nodes computed from `stream_in` that `stream_out` is computed from."""
    downstream, ids = set(), {id(stream_in)}
    for node in graph.nodes:
        if any(id(x) in ids for x in node.input_tensors):
            downstream.add(id(node))
            ids.update(id(x) for x in node.outputs)
    upstream, todo = set(), [stream_out]
    while todo:
        node = graph.producer.get(id(todo.pop()))
        if node is not None and id(node) in downstream and id(node) not in upstream:
            upstream.add(id(node))
            todo.extend(node.input_tensors)
    return [node for node in graph.nodes if id(node) in upstream]


def _branch_end(branch, graph, index):
    """The layer with `residual_output_weights` that makes `branch` (through
    Dropouts, which pass zeros on: `Graph.upstream`, as `admin.fold` reads it)."""
    _, node = graph.upstream(branch)
    if node is None or not getattr(node.operation, "residual_output_weights", ()):
        raise GrowthError(
            f"A residual branch of Transformer block {index} does not end in a layer with "
            "`residual_output_weights` (as ExpandableMultiHeadAttention and FeedForward "
            "have), so kwiden cannot make a new block start as an identity."
        )
    return node.operation


def zero_output_weights(layer, weights):
    """The grown weights of a copied branch-ending layer, its output projection at zero."""
    names = set(layer.residual_output_weights)
    return [w * 0 if v.name in names else w for v, w in zip(layer.weights, weights)]
