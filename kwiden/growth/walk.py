"""Plan the growth of a functional model, call by call.

`walk` follows the small model's graph, tracks the `Space` of every tensor
(docs/widening.md: which copies, at which scale), asks each kwiden layer for its
grown config, output space and weight axes, and applies a few rules for
Keras' own glue layers (Dropout, Add, Activation, …). Layers the growth does
not reach are kept as they are. Nothing is built here: the plan is data.
"""

import dataclasses

import keras
import numpy as np
from keras import tree

from kwiden.growth.expansion import (
    IN,
    ISOMETRY,
    UNCHANGED,
    Growth,
    GrowthError,
    Space,
    check_elementwise,
    is_positively_homogeneous,
)
from kwiden.growth.graph import nodes_in_order
from kwiden.layers.expandable import Expandable, axes_in_order, expand_weights


@dataclasses.dataclass
class LayerPlan:
    """How one call of one layer grows: its outputs' spaces, the grown layer's
    config, and for each of the layer's weights its axes as `expand` takes them."""

    outputs: list
    config: dict
    weights: list  # the small layer's variables
    axes: list  # one entry per weight, in the order of `weights`

    def grown_weights(self, spread=0.0, rng=None):
        return expand_weights(self.weights, self.axes, spread, rng)


@dataclasses.dataclass
class Walk:
    """The plan of every call of a model: `steps` is `[(node, LayerPlan)]` in
    graph order, `spaces` maps `id(tensor)` of every tensor to its grown `Space`."""

    steps: list
    spaces: dict

    def weight_axes(self):
        """`{variable path: axes}` of every weight of the model."""
        return {w.path: axes for _, plan in self.steps for w, axes in zip(plan.weights, plan.axes)}


def walk(model, growth):
    """Plan the growth of every call in `model` by `growth` (a `Growth` or a factor)."""
    growth = Growth.of(growth)
    spaces = {id(x): UNCHANGED for x in model.inputs}
    first_axes = {}  # id(layer) -> the weight axes of its first call
    steps = []
    for node in nodes_in_order(model):
        op = node.operation
        plan = plan_node(op, growth, node, [spaces[id(x)] for x in node.input_tensors])
        if first_axes.setdefault(id(op), plan.axes) != plan.axes:
            raise GrowthError(
                f"Layer '{op.name}' is shared by calls whose inputs grow differently, and "
                "one set of grown weights cannot serve them all. Use separate layers."
            )
        for x, space in zip(node.outputs, plan.outputs):
            spaces[id(x)] = space
        steps.append((node, plan))
    return Walk(steps, spaces)


def plan_node(op, growth, node, in_spaces):
    if isinstance(op, keras.Model):
        raise GrowthError(
            f"Layer '{op.name}' is a nested model ({type(op).__name__}); kwiden grows "
            "flat functional models. Build the model without nesting, or grow the "
            "inner model on its own."
        )
    if isinstance(op, keras.layers.Lambda):
        raise GrowthError(
            f"Layer '{op.name}' is a Lambda layer: its function cannot be inspected, so "
            "kwiden cannot know how it acts on grown tensors. Replace it with a layer "
            "class (kwiden.layers has SelectToken and BiasAdd) or write a layer that "
            "subclasses kwiden.layers.Expandable (docs/extending.md)."
        )
    outputs = len(node.outputs)
    if isinstance(op, Expandable):
        space = _common_space(op, in_spaces)
        static = {
            key: value
            for key, value in node.arguments.kwargs.items()
            if not any(isinstance(x, keras.KerasTensor) for x in tree.flatten(value))
        }
        out = op.get_expanded_output_space(growth, space, **static)
        config = op.get_expanded_config(growth, space)
        axes = axes_in_order(op, op.get_expanded_weight_axes(growth, space))
        return LayerPlan([out] * outputs, config, op.weights, axes)
    if not any(space.expanded for space in in_spaces):
        weights = getattr(op, "weights", [])
        return LayerPlan([UNCHANGED] * outputs, op.get_config(), weights, [[None] * len(w.shape) for w in weights])
    for layer_class, rule in GLUE_RULES:
        if isinstance(op, layer_class):
            return rule(op, node, in_spaces)
    if not isinstance(op, keras.layers.Layer):
        raise GrowthError(
            f"'{op.name}' is a raw `keras.ops` call ({type(op).__name__}) on grown tensors "
            f"({', '.join(map(str, in_spaces))}); kwiden grows layers, whose configs it can read. Use the "
            "layer that does the same (keras.layers.Add for `x + y`, keras.layers.Multiply, Activation, …)."
        )
    raise GrowthError(
        f"kwiden cannot grow layer '{op.name}' ({type(op).__name__}): it receives "
        f"grown tensors ({', '.join(map(str, in_spaces))}) and kwiden does not know "
        "how its weights and outputs change. Use the kwiden.layers equivalent, or "
        "subclass kwiden.layers.Expandable and implement `get_expanded_weight_axes` "
        "(and `get_expanded_config`, `get_expanded_output_space`; docs/extending.md)."
    )


def _common_space(op, in_spaces):
    """The one feature space the grown inputs of `op` share (ids, masks and
    attention biases aside)."""
    expanded = {space for space in in_spaces if space.expanded and space.axis == -1}
    if len(expanded) > 1:
        raise GrowthError(
            f"Layer '{op.name}' ({type(op).__name__}) receives tensors in different "
            f"spaces ({', '.join(map(str, expanded))}); kwiden grows a layer exactly "
            "only when all its grown inputs share one scale."
        )
    return expanded.pop() if expanded else UNCHANGED


# Rules for Keras' own layers that see grown tensors.


def _same_space(op, node, in_spaces):
    if len(set(in_spaces)) > 1:
        raise GrowthError(
            f"Layer '{op.name}' ({type(op).__name__}) combines tensors in different "
            f"spaces ({', '.join(map(str, in_spaces))}); the result would not be a copy "
            "of the small model's. Combine tensors that come out of the same kind of "
            "layer (e.g. two residual-stream tensors)."
        )
    return LayerPlan([in_spaces[0]] * len(node.outputs), op.get_config(), [], [])


def _dropout(op, node, in_spaces):
    """Dropout on grown features: a `noise_shape` that names the feature
    width grows with it (one mask entry per feature, copied or not, is still
    a valid dropout)."""
    plan = _same_space(op, node, in_spaces)
    shape = getattr(op, "noise_shape", None)
    if shape is not None and shape[-1] is not None and shape[-1] != 1:
        grown = in_spaces[0].grown_size(shape[-1], f"Dropout '{op.name}' noise_shape")
        plan.config = {**plan.config, "noise_shape": (*shape[:-1], grown)}
    return plan


def _activation(op, node, in_spaces):
    (space,) = in_spaces
    name = keras.activations.serialize(op.activation)
    check_elementwise(name, f"Activation layer '{op.name}'")
    if space.scale != 1.0 and not is_positively_homogeneous(name):
        raise GrowthError(
            f"Activation layer '{op.name}' applies '{name}' to a tensor in the space "
            f"{space}; only ReLU-like activations commute with its scale. "
            "Give the activation to the preceding ExpandableDense (activation=...) so "
            "that growth can keep its output a pure copy."
        )
    return LayerPlan([space] * len(node.outputs), op.get_config(), [], [])


def _multiply(op, node, in_spaces):
    expanded = [space for space in in_spaces if space.expanded]
    scales = [space.scale for space in expanded]
    isometries = scales.count(ISOMETRY)
    if (
        len({space.factor for space in expanded}) > 1
        or len(expanded) < len(in_spaces)
        or (isometries and (isometries > 1 or any(s not in (1.0, ISOMETRY) for s in scales)))
    ):
        raise GrowthError(
            f"Multiply layer '{op.name}' multiplies tensors grown differently "
            f"({', '.join(map(str, in_spaces))}); kwiden can only multiply tensors "
            "copied the same way."
        )
    scale = ISOMETRY if isometries else float(np.prod(scales))
    return LayerPlan([Space(expanded[0].factor, scale)] * len(node.outputs), op.get_config(), [], [])


def _concatenate(op, node, in_spaces):
    if op.axis in (-1, len(node.input_tensors[0].shape) - 1):
        raise GrowthError(
            f"Concatenate layer '{op.name}' joins grown tensors along their feature axis; "
            "the joined features would not be interleaved copies. Concatenate along "
            "another axis, or keep the concatenated features out of the growth."
        )
    return _same_space(op, node, in_spaces)


def _dense_head(op, node, in_spaces):
    (space,) = in_spaces
    axes = [[(space, IN), None]] + [[None]] * op.use_bias
    return LayerPlan([UNCHANGED] * len(node.outputs), op.get_config(), op.weights, axes)


GLUE_RULES = [
    (keras.layers.Dropout, _dropout),
    (keras.layers.SpatialDropout1D, _same_space),
    (keras.layers.GaussianDropout, _same_space),
    (keras.layers.Add, _same_space),
    (keras.layers.Average, _same_space),
    (keras.layers.Maximum, _same_space),
    (keras.layers.Minimum, _same_space),
    (keras.layers.Subtract, _same_space),
    (keras.layers.Activation, _activation),
    (keras.layers.Multiply, _multiply),
    (keras.layers.Concatenate, _concatenate),
    # A plain Dense on grown features is a head: its output width stays.
    (keras.layers.Dense, _dense_head),
]
