"""Stage 2 of `grow`: the plan, computed once and kept on the grown model.

`GrowthPlan` records how the model was grown: the `Growth` (factor, FFN
factor, head mode, RoPE mode), the plan of every call and the space of every
tensor (`kwiden.growth.walk.walk`), the blocks and their new indices for depth
growth, and what was accepted as approximate. The later stages read it. The
grown model keeps its `GrowthRecord` as `big.growth_record`, which
`kwiden.verify` reads instead of guessing (`keep_record`).
"""

import dataclasses
import weakref

import numpy as np

from kwiden.growth import depth as depth_growth
from kwiden.growth import hub
from kwiden.growth.expansion import GrowthError, Space
from kwiden.growth.graph import is_keras_hub
from kwiden.growth.walk import walk
from kwiden.layers.feed_forward import FeedForward
from kwiden.memory import available_memory


@dataclasses.dataclass
class GrowthPlan:
    source: object  # the small model
    growth: object  # the Growth
    walk: object  # kwiden.growth.walk.Walk of the small model
    blocks: list = dataclasses.field(default_factory=list)  # depth.Block, when deepening
    indices: list = dataclasses.field(default_factory=list)  # new block indices per source block
    renames: dict = dataclasses.field(default_factory=dict)  # small block layer name -> its grown name

    @property
    def spaces(self):
        return self.walk.spaces

    @property
    def approximations(self):
        return list(self.growth.approximations) + [f"Post-LN block {b.index} copied" for b in self.copied_inexactly]

    @property
    def copied_inexactly(self):
        return [b for b, new in zip(self.blocks, self.indices) if len(new) > 1 and not b.exact]

    def renamed(self, name):
        """A small-model layer's name in the grown model."""
        return self.renames.get(name, name)

    def record(self):
        """What the grown model keeps of this plan (no graph, no strong hold on the source)."""
        blocks = {b.index: tuple(new) for b, new in zip(self.blocks, self.indices)}
        return GrowthRecord(
            self.growth, self.spaces, self.renames, tuple(self.approximations), blocks, weakref.ref(self.source)
        )


@dataclasses.dataclass(frozen=True)
class GrowthRecord:
    """How a model was grown, kept on it as `big.growth_record`: the `Growth`
    (factor, FFN factor, head mode, RoPE mode), the grown space of every
    tensor of the source model (by `id`), the new names of renamed block
    layers, the blocks copied (`{source block: new indices}`) and what was
    accepted as approximate. It holds the source model weakly: a chain of
    growths does not keep every earlier model alive."""

    growth: object
    spaces: dict
    renames: dict
    approximations: tuple
    blocks: dict
    _source: object = dataclasses.field(repr=False)

    @property
    def source(self):
        """The model this one was grown from, while it is alive (else None)."""
        return self._source()

    def renamed(self, name):
        """A source layer's name in the grown model."""
        return self.renames.get(name, name)


def keep_record(model, record):
    """Keep `record` on the grown `model` as `model.growth_record`."""
    model.growth_record = record


def plan_growth(model, options, check_memory=True):
    """The `GrowthPlan` of a kwiden functional model under `options`;
    `check_memory=False` for a model whose weights will not be held
    (`grow_checkpoint`'s skeleton)."""
    plan = GrowthPlan(model, options.growth, walk(model, options.growth))
    if options.deepening:
        plan.blocks = depth_growth.find_blocks(model)
        counts = depth_growth.copies_per_block(len(plan.blocks), options.depth, options.num_layers)
        plan.indices = depth_growth.new_indices(counts)
        plan.renames = {
            node.operation.name: depth_growth.renamed(node.operation.name, block.index, plan.indices[block.index][0])
            for block in plan.blocks
            for node in block.nodes
        }
        inexact = [b.index for b in plan.copied_inexactly]
        if inexact and not options.growth.allow_approximate:
            raise GrowthError(
                f"Transformer blocks {inexact} are not Pre-LN: something other than a plain Add "
                "sits on their residual stream (a Post-LN or Admin LayerNorm), so no new block can "
                "be an exact identity (docs/depth.md). Pass "
                "allow_approximate=True to stack copies anyway, and `check=` inputs to measure "
                "the deviation."
            )
    _check_something_grows(plan, options)
    if check_memory:
        _check_memory(plan)
    return plan


def _check_something_grows(plan, options):
    """A growth that asks for more width or depth and finds nothing to grow
    is a mistake (a model of plain Keras layers), not an equal copy."""
    asked = plan.growth.k != 1 or plan.growth.ffn_factor != 1
    grows = any(spec is not None and spec[0].expanded for axes in plan.walk.weight_axes().values() for spec in axes)
    if asked and not grows and not options.deepening:
        raise GrowthError(
            f"Nothing in model '{plan.source.name}' grows by k={plan.growth.k}: no kwiden layer (kwiden.layers) "
            "sits on a tensor the growth widens, so the model would come back unchanged. Build it with "
            "kwiden's layers (kwiden.build_transformer_model does)."
        )


def grown_bytes(plan):
    """`(bytes of the grown model's weights, bytes of its largest tensor)`."""
    copies = {id(node.operation): len(new) for block, new in zip(plan.blocks, plan.indices) for node in block.nodes}
    total, largest, seen = 0, 0, set()
    for node, layer_plan in plan.walk.steps:
        if id(node.operation) in seen:
            continue  # a shared layer's weights, once
        seen.add(id(node.operation))
        for weight, axes in zip(layer_plan.weights, layer_plan.axes):
            size = 1
            for n, spec in zip(weight.shape, axes):
                size *= n if spec is None else spec[0].grown_size(n)
            itemsize = np.dtype(weight.dtype).itemsize
            largest = max(largest, size * itemsize)
            total += size * itemsize * copies.get(id(node.operation), 1)
    return total, largest


def _check_memory(plan):
    """Refuse, before allocating anything, a growth whose peak would not fit:
    the grown model, once more while its weights are set, and the float64
    work of expanding its largest tensor."""
    available = available_memory()
    total, largest = grown_bytes(plan)
    peak = 2 * total + 3 * 2 * largest
    if available is not None and peak > available:
        raise GrowthError(
            f"Growing '{plan.source.name}' by k={plan.growth.k} makes a model of {total / 2**30:.2f} GiB of weights "
            f"and needs about {peak / 2**30:.2f} GiB at its peak; {available / 2**30:.2f} GiB of memory is "
            "available. Grow by a smaller factor, or on a machine with more memory."
        )


def hidden_size_of(model):
    """The width of `model`'s residual stream: of the first tensor the
    growth puts on the stream."""
    if is_keras_hub(model):
        return hub.config_of(model)["hidden_dim"]
    model_walk = walk(model, 2)
    for node, _ in model_walk.steps:
        for x in node.outputs:
            if model_walk.spaces[id(x)] == Space.stream(2):
                return x.shape[-1]
    raise GrowthError(f"Model '{model.name}' has no residual stream that kwiden grows; pass `k` instead.")


def intermediate_size_of(model):
    """The feed-forward width all of `model`'s FeedForward layers share."""
    if is_keras_hub(model):
        return hub.config_of(model)["intermediate_dim"]
    sizes = {layer.intermediate_size for layer in model.layers if isinstance(layer, FeedForward)}
    if len(sizes) != 1:
        raise ValueError(
            f"`intermediate_size` needs FeedForward layers of one width; model '{model.name}' has "
            f"{sorted(sizes) or 'none'}. Pass `ffn_factor` instead."
        )
    return sizes.pop()
