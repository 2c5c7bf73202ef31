"""Depth growth (docs/depth.md): more Transformer blocks, each new one a copy of
its neighbour whose residual branches end in zeros.

Blocks are found by structure. A residual merge is an `Add` (or Admin's
`AdminResidual`) of the stream and a branch that ends in a layer declaring
`residual_output_weights` (attention, feed-forward), reached through
Dropouts and activations that keep zeros. The merges, in graph order, fall
into blocks by the longest run of one repeated pattern of branch kinds
(attention, feed-forward, attention, …); merges outside the run (an adapter,
a residual head) are not blocks. Names only serve to renumber copied layers
(`kwiden.models.naming`). In a Pre-LN block the stream only passes through plain
`Add`s, so with the branches' output projections at zero the new block is
an exact identity. Where a LayerNorm sits on the stream (Post-LN, Admin) no
weights make it the identity: depth growth there is approximate.
"""

import dataclasses

import keras

from kwiden.arguments import is_count
from kwiden.growth.expansion import POSITIVELY_HOMOGENEOUS, GrowthError
from kwiden.growth.graph import Graph
from kwiden.layers.admin_residual import AdminResidual
from kwiden.layers.expandable_layer_normalization import ExpandableLayerNormalization
from kwiden.models import naming

# Where a residual branch joins the stream.
RESIDUAL_MERGES = (keras.layers.Add, AdminResidual)


def copies_per_block(blocks, depth=None, num_layers=None):
    """How many blocks each source block becomes, spread evenly."""
    if depth is not None and num_layers is not None:
        raise ValueError("Give `depth` (a factor) or `num_layers` (a total), not both.")
    if depth is not None:  # a whole number of at least 1: `options.resolve` checked it
        num_layers = int(depth) * blocks
    if not is_count(num_layers, blocks):
        raise ValueError(
            f"`num_layers` must be an integer >= the model's {blocks} blocks, got num_layers={num_layers!r}."
        )
    return [(i + 1) * num_layers // blocks - i * num_layers // blocks for i in range(blocks)]


def new_indices(counts):
    """For each source block, the indices of the blocks it becomes (itself first)."""
    starts = [sum(counts[:i]) for i in range(len(counts))]
    return [list(range(start, start + count)) for start, count in zip(starts, counts)]


def renamed(name, source_index, index, copy=False):
    """A block layer's name in block `index`: renumbered where the name says
    its block (`kwiden.models.naming.block`); otherwise kept by the source block and
    suffixed with the new index in its copies."""
    if naming.block_index(name) == source_index:
        return naming.renumbered(name, index)
    return f"{name}-{index}" if copy else name


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
    ends: list  # the layers that end the branch (with `residual_output_weights`)


# Elementwise functions with f(0) = 0: a zero branch stays zero through them.
ZERO_PRESERVING = POSITIVELY_HOMOGENEOUS + (
    "elu", "gelu", "hard_silu", "hard_swish", "hard_tanh", "mish", "relu6", "selu", "silu",
    "soft_shrink", "softsign", "swish", "tanh", "tanh_shrink",
)  # fmt: skip


def passes_zero(layer):
    """Whether a zero input gives a zero output: Dropout, and activations with f(0) = 0."""
    if isinstance(layer, keras.layers.Dropout):
        return True
    return (
        isinstance(layer, keras.layers.Activation) and keras.activations.serialize(layer.activation) in ZERO_PRESERVING
    )


def find_blocks(model):
    """The Transformer blocks of `model`, in order (`GrowthError` if none)."""
    graph = Graph(model)
    merges = _residual_merges(graph)
    if not merges:
        raise GrowthError(
            f"Depth growth needs residual blocks: an Add of a stream and a branch ending in a layer with "
            f"`residual_output_weights` (ExpandableMultiHeadAttention, FeedForward); model '{model.name}' has none."
        )
    runs = _periodic_runs([tuple(type(end) for end in m.ends) for m in merges])
    start, period, repeats = _best_run(runs, merges)
    run = merges[start : start + period * repeats]
    _check_one_stream(run, graph)
    after = merges[start + period * repeats] if start + period * repeats < len(merges) else None
    streams = [m.stream for m in run] + [after.stream if after is not None else _after_last(run, graph)]
    blocks = []
    for index in range(repeats):
        own = run[index * period : (index + 1) * period]
        stream_in, stream_out = streams[index * period], streams[(index + 1) * period]
        exact = (
            all(type(m.node.operation) is keras.layers.Add for m in own)
            and all(id(a.node.outputs[0]) == id(b.stream) for a, b in zip(own, own[1:]))
            and id(own[-1].node.outputs[0]) == id(stream_out)
        )
        nodes = _between(graph, stream_in, stream_out)
        blocks.append(Block(index, nodes, stream_in, stream_out, {id(end) for m in own for end in m.ends}, exact))
    return blocks


def _residual_merges(graph):
    """The residual merges, in graph order: an Add (or AdminResidual, whose
    first input is the stream) of the stream and a branch that ends in a
    layer with `residual_output_weights` (through Dropouts and activations
    that keep zeros, or a sum of such branches). Embeddings added together, or
    two streams, are no merge."""
    merges = []
    for node in graph.nodes:
        if not isinstance(node.operation, RESIDUAL_MERGES) or len(node.input_tensors) != 2:
            continue
        ends = [_branch_ends(x, graph) for x in node.input_tensors]
        if isinstance(node.operation, AdminResidual):
            ends[0] = None
        if (ends[0] is None) != (ends[1] is None):
            b = 0 if ends[0] is not None else 1
            merges.append(_Merge(node, node.input_tensors[1 - b], node.input_tensors[b], ends[b]))
    return merges


def _branch_ends(branch, graph):
    """The layers with `residual_output_weights` whose outputs make up
    `branch` (one, or several added together), or None if something else
    does: with those zeroed, `branch` is zero."""
    _, node = graph.upstream(branch, through=passes_zero)
    if node is None:
        return None
    if getattr(node.operation, "residual_output_weights", ()):
        return [node.operation]
    if type(node.operation) is keras.layers.Add:
        parts = [_branch_ends(x, graph) for x in node.input_tensors]
        return None if None in parts else [end for part in parts for end in part]
    return None


def _periodic_runs(kinds):
    """Every `(start, period, repeats)`: a run of `kinds` made of one pattern
    repeated as often as it goes on."""
    runs = []
    for start in range(len(kinds)):
        for period in range(1, len(kinds) - start + 1):
            repeats = 1
            while kinds[start + repeats * period : start + (repeats + 1) * period] == kinds[start : start + period]:
                repeats += 1
            runs.append((start, period, repeats))
    return runs


def _best_run(runs, merges):
    """The blocks: the run repeated most often, then the one whose layer names
    agree with it (`kwiden.models.naming`, where the model has such names), then the
    longest, the shortest pattern, the earliest. Merges outside it (an adapter,
    a residual head) are not blocks."""
    named = any(naming.block_index(end.name) is not None for m in merges for end in m.ends)

    def agreement(run):
        start, period, repeats = run
        said = [naming.block_index(m.ends[0].name) for m in merges[start : start + period * repeats]]
        return sum(1 if index == i // period else -1 for i, index in enumerate(said)) if named else 0

    return max(runs, key=lambda run: (run[2], agreement(run), run[1] * run[2], -run[1], -run[0]))


def _check_one_stream(run, graph):
    """The blocks must follow one another on one stream."""
    for a, b in zip(run, run[1:]):
        if not _depends_on(graph, b.stream, a.node.outputs[0]):
            raise GrowthError(
                f"Depth growth needs its blocks on one residual stream; the merges '{a.node.operation.name}' "
                f"and '{b.node.operation.name}' are on different streams (separate towers?). Grow each "
                "tower as a model of its own."
            )


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


def _after_last(run, graph):
    """The stream the last block hands on: its last merge's output carried as
    far as an earlier merge's output was carried to the next merge's stream
    (through a Post-LN norm, say). With one merge only: through the norm that
    alone reads it, unless the branch normalises its own input (Pre-LN)."""
    last = run[-1].node.outputs[0]
    if len(run) >= 2:
        kinds = _path(graph, run[-2].node.outputs[0], run[-1].stream)
    else:
        pre_ln = any(
            isinstance(reader.operation, ExpandableLayerNormalization)
            for reader in graph.readers.get(id(run[0].stream), [])
        )
        kinds = [] if pre_ln else [ExpandableLayerNormalization]
    x = last
    for kind in kinds:
        readers = graph.readers.get(id(x), [])
        if len(readers) != 1 or not isinstance(readers[0].operation, kind) or len(readers[0].input_tensors) != 1:
            break
        x = readers[0].outputs[0]
    return x


def _path(graph, start, end):
    """The classes of the single-input layers leading from `start` to `end`
    (none if no such chain leads there)."""
    kinds, x = [], end
    while id(x) != id(start):
        node = graph.producer.get(id(x))
        if node is None or len(node.input_tensors) != 1:
            return []
        kinds.append(type(node.operation))
        x = node.input_tensors[0]
    return kinds[::-1]


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
