"""The model walker: rebuild a functional model `k` times wider, same function.

The walker knows no architecture. It follows the small model's graph node by
node, tracks the `Space` of every tensor (docs/widening.md: which copies, at which
scale), asks each kwiden layer for its grown config, output space and weights,
applies a few rules for Keras' own glue layers (Dropout, Add, Activation, …),
and copies verbatim whatever only sees tensors the growth leaves alone (token
ids, masks, logits).
"""

import dataclasses
import fractions
import warnings

import keras
import numpy as np
from keras import tree

from kwiden.expansion import (
    IN,
    ISOMETRY,
    UNCHANGED,
    Growth,
    GrowthError,
    Space,
    check_elementwise,
    growth_scale,
    is_positively_homogeneous,
)
from kwiden import hub
from kwiden.depth import block_of, copies_per_block, find_blocks, new_indices, renamed, zero_output_weights
from kwiden.layers.expandable import Expandable, expand_weights
from kwiden.layers.feed_forward import FeedForward


@dataclasses.dataclass
class Plan:
    """How one call of one layer grows: its outputs' spaces, the grown layer's
    config, and for each of the layer's weights its axes as `expand` takes them."""

    outputs: list
    config: dict
    weights: list  # the small layer's variables
    axes: list

    def grown_weights(self, spread=0.0, rng=None):
        return expand_weights(self.weights, self.axes, spread, rng)


def grow(
    model,
    k=None,
    check=None,
    rtol=None,
    ffn_factor=None,
    heads="size",
    rope="exact",
    spread=0.0,
    seed=None,
    optimizer=None,
    scale_learning_rates=True,
    depth=None,
    num_layers=None,
    allow_approximate=False,
    hidden_size=None,
    intermediate_size=None,
):
    """Return a new functional model `k` times wider computing the same function.

    Hidden size, FFN size, head size (or, with `heads="count"`, the number of
    heads) and embedding widths are multiplied by `k`; the number of layers,
    the vocabulary and the model inputs stay. The source model is not modified; `k=1` returns an equal copy.

    Args:
        model: a functional `keras.Model` built from kwiden layers and Keras
            glue (Input, Dropout, Add, Activation, Multiply, Concatenate, and a
            plain `Dense` head whose output width stays); or a KerasHub
            `BertBackbone`, `RobertaBackbone`, `GPT2Backbone`, `GPT2CausalLM`
            or `BertMaskedLM`, returned as the same class (`kwiden.hub`).
        k: the width factor: an integer, or a `fractions.Fraction` (4/3
            grows hidden 384 to 512; docs/non-integer.md). Under unequal copy counts
            RMSNorm models stay exact; LayerNorm models need
            `allow_approximate=True`, and attention must grow its number of
            heads (`heads="count"`).
        check: optional model inputs; if given, the grown model is compared
            with `model` on them (`kwiden.verify`) and a `GrowthError` carrying
            the report is raised if it departs by more than `rtol`.
        rtol: the relative error `check` accepts; by default float32
            rounding, 1e-5, or 1e-2 / 5e-2 for models computing in float16 /
            bfloat16 (the small and the big model round differently).
        ffn_factor: the feed-forward width's own factor (default `k`).
        heads: `"size"` grows each attention head's size by `k` (docs/widening.md#attention-wider-heads);
            `"count"` grows the number of heads instead (docs/widening.md#attention-more-heads).
        rope: rotary attention with `heads="size"`: `"exact"` keeps the small
            model's frequencies, copied pair-wise (exact); `"standard"` gives
            the grown heads the standard schedule of their size, as the seed
            article does (approximate: needs `allow_approximate=True`).
        spread: exact symmetry breaking (docs/symmetry.md): every linear map spreads
            each input over its copies with unequal weights `(1 + spread·u)/k`,
            so the copies of a neuron train apart from the first step while the
            grown model still computes the same function. 0 gives plain copies;
            values of order 1 are where to start.
        seed: seed of the random splits (`spread > 0`).
        optimizer: the small model's optimizer. If given, `grow` returns
            `(big, big_optimizer)`: an optimizer of the same class whose slots
            (momenta, second moments) were grown with the weights (docs/optimizer-state.md#growing-the-moments) and, for kwiden's optimizers, whose parameter-wise learning
            rates carry each tensor's growth scale (docs/optimizer-state.md#learning-rate-multipliers), so that training
            goes on where the small model left off.
        scale_learning_rates: with `optimizer`, set those parameter-wise
            learning rates (kwiden optimizers only). False keeps one rate.
        depth, num_layers: depth growth (docs/depth.md): `depth=2` doubles the
            number of Transformer blocks, `num_layers=N` makes it N. Each new
            block is a copy of the block before it whose residual branches end
            in zeros: exact for Pre-LN blocks (GPT); for Post-LN blocks (BERT)
            only approximate, allowed with `allow_approximate=True` (`check`
            then measures by how much). Blocks are found by their names,
            `Transformer-{i}-…`, and renumbered.
        allow_approximate: accept a growth that is not exact (Post-LN depth,
            `rope="standard"`, LayerNorm under a non-integer factor). When
            such a growth happens, the grown model is compared with `model`
            (on `check`, or on random inputs) and the `VerifyReport` is kept
            as `big.growth_report`, with a warning if it departs beyond `rtol`.
        hidden_size, intermediate_size: target sizes instead of `k` and
            `ffn_factor`: the factor is the target over the model's size.

    Returns:
        The grown `keras.Model` (same layer names, dtype policies and trainable
        flags), or `(model, optimizer)` when `optimizer` is given. When it was
        compared with `model`, `big.growth_report` holds the `VerifyReport`.

    Example:

    >>> import kwiden, numpy as np
    >>> small = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1,
    ...          num_attention_heads=2), model="gpt")
    >>> big = kwiden.grow(small, 2, check=np.array([[5, 6, 7]]))
    >>> big.get_layer("Embedding-Token").output_dim
    16
    """
    k, ffn_factor = _factors(model, k, ffn_factor, hidden_size, intermediate_size)
    growth = Growth(k, ffn_factor, heads, rope, allow_approximate)
    if spread < 0:
        raise ValueError(f"`spread` must be >= 0 (0: plain copies), got spread={spread!r}.")
    if hub.is_keras_hub(model):
        hub.check_options(optimizer=optimizer, depth=depth, num_layers=num_layers)
        big = hub.grow_keras_hub(model, growth, spread, np.random.default_rng(seed))
        if check is not None or growth.approximations:
            _compare(model, big, growth, check, default_rtol(model) if rtol is None else rtol)
        return big
    _require_functional(model)
    steps, _ = walk(model, growth)
    deepening = depth is not None or num_layers is not None
    if deepening:
        blocks = find_blocks(model, steps)
        indices = new_indices(copies_per_block(len(blocks), depth, num_layers))
        approximate = [b.index for b in blocks if not b.exact]
        if approximate and not allow_approximate:
            raise GrowthError(
                f"Transformer blocks {approximate} are not Pre-LN: a LayerNorm sits on their "
                "residual stream, so no new block can be an exact identity (docs/depth.md). Pass "
                "allow_approximate=True to stack copies anyway, and `check=` inputs to measure "
                "the deviation."
            )
        last_step = {id(b.steps[-1][0]): b for b in blocks}
    tensors = fresh_inputs(model)
    layers = {}  # id(small layer) -> grown layer
    weighted = []  # (grown layer, plan, whether its residual output starts at zero)
    sources = {}  # grown layer name -> (small layer name, zeroed), where depth growth renames
    for node, plan in steps:
        op = node.operation
        if id(op) not in layers:
            config = plan.config
            if deepening and block_of(op.name) is not None:
                config = {**config, "name": renamed(op.name, indices[block_of(op.name)][0])}
                sources[config["name"]] = (op.name, False)
            layers[id(op)] = _new_layer(op, config)
            weighted.append((layers[id(op)], plan, False))
        _call(layers[id(op)], node, tensors)
        if deepening and id(node) in last_step:
            block = last_step[id(node)]
            stream = tensors[id(block.stream_out)]
            for index in indices[block.index][1:]:
                local, copies = {**tensors, id(block.stream_in): stream}, {}
                for block_node, block_plan in block.steps:
                    source = block_node.operation
                    if id(source) not in copies:
                        config = {**block_plan.config, "name": renamed(source.name, index)}
                        copies[id(source)] = _new_layer(source, config)
                        weighted.append((copies[id(source)], block_plan, id(source) in block.zeroed))
                        sources[config["name"]] = (source.name, id(source) in block.zeroed)
                    _call(copies[id(source)], block_node, local)
                stream = local[id(block.stream_out)]
            tensors[id(block.stream_out)] = stream
    big = model_like(model, tensors)
    rng = np.random.default_rng(seed)
    for layer, plan, zeroed in weighted:
        _restore_initializers(layer, plan.config)
        if plan.weights:
            weights = plan.grown_weights(spread, rng)
            layer.set_weights(zero_output_weights(layer, weights) if zeroed else weights)
    if check is not None or growth.approximations or (deepening and approximate):
        _compare(model, big, growth, check, default_rtol(model) if rtol is None else rtol)
    if optimizer is None:
        return big
    from kwiden.optimizer_growth import grow_optimizer

    axes = weight_axes(model, growth)
    return big, grow_optimizer(optimizer, model, big, axes, scale_learning_rates, _variable_sources(big, sources))


def _compare(small, big, growth, inputs, rtol):
    """Measure `big` against `small` and keep the report as `big.growth_report`:
    raise if an exact growth is not, warn if an approximate one departs. A
    KerasHub model's report is `{output: relative error}` (`hub.compare`)."""
    from kwiden.verify import sample_inputs, verify

    if hub.is_keras_hub(small):
        if inputs is None:
            raise GrowthError(
                f"This growth of a KerasHub {type(small).__name__} is approximate "
                f"({', '.join(dict.fromkeys(growth.approximations))}); pass `check=` inputs to measure it."
            )
        report = hub.compare(small, big, inputs, growth)
        ok = max(report.values()) <= rtol
    else:
        report = verify(small, big, sample_inputs(small) if inputs is None else inputs, rtol=rtol, k=growth.k)
        ok = report.ok
    big.growth_report = report
    if ok:
        return
    if not growth.allow_approximate:
        raise GrowthError(f"The grown model is not exact:\n{report}")
    warnings.warn(f"kwiden.grow (allow_approximate=True): the grown model is approximate.\n{report}", stacklevel=3)


def _factors(model, k, ffn_factor, hidden_size, intermediate_size):
    """`(k, ffn_factor)` from factors or from target sizes."""
    if hidden_size is not None:
        if k is not None:
            raise ValueError("Pass `k` (a factor) or `hidden_size` (a target size), not both.")
        k = _target_ratio(hidden_size, hidden_size_of(model), "hidden_size")
    if k is None and intermediate_size is not None:
        k = 1  # the feed-forward width alone
    if k is None:
        raise ValueError("kwiden.grow needs `k` (2 doubles the width) or a target `hidden_size`.")
    if intermediate_size is not None:
        if ffn_factor is not None:
            raise ValueError("Pass `ffn_factor` or `intermediate_size` (a target size), not both.")
        ffn_factor = _target_ratio(intermediate_size, intermediate_size_of(model), "intermediate_size")
    return k, ffn_factor


def _target_ratio(target, size, name):
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or target < size:
        raise ValueError(f"`{name}` must be an integer >= the model's {size}, got {name}={target!r}.")
    return fractions.Fraction(int(target), size)


def hidden_size_of(model):
    """The width of `model`'s residual stream: of the first tensor the
    growth puts on the stream."""
    if hub.is_keras_hub(model):
        return hub.config_of(model)["hidden_dim"]
    steps, spaces = walk(model, 2)
    for node, _ in steps:
        for x in node.outputs:
            if spaces[id(x)] == Space.stream(2):
                return x.shape[-1]
    raise GrowthError(f"Model '{model.name}' has no residual stream that kwiden grows; pass `k` instead.")


def intermediate_size_of(model):
    """The feed-forward width all of `model`'s FeedForward layers share."""
    if hub.is_keras_hub(model):
        return hub.config_of(model)["intermediate_dim"]
    sizes = {layer.intermediate_size for layer in model.layers if isinstance(layer, FeedForward)}
    if len(sizes) != 1:
        raise ValueError(
            f"`intermediate_size` needs FeedForward layers of one width; model '{model.name}' has "
            f"{sorted(sizes) or 'none'}. Pass `ffn_factor` instead."
        )
    return sizes.pop()


def _variable_sources(big, sources):
    """`{big variable path: (small variable path, fresh)}` for renamed or
    copied layers; the zeroed output weights of new blocks start fresh."""
    result = {}
    for layer in big.layers:
        if layer.name in sources:
            small_name, zeroed = sources[layer.name]
            fresh = set(getattr(layer, "residual_output_weights", ())) if zeroed else set()
            for variable in layer.trainable_weights:
                small_path = small_name + variable.path[len(layer.name) :]
                result[variable.path] = (small_path, variable.name in fresh)
    return result


def fresh_inputs(model):
    """`{id(input of model): a new keras.Input like it}`: where a rebuilt graph starts."""
    return {id(x): keras.Input(batch_shape=x.shape, dtype=x.dtype, name=x.name) for x in model.inputs}


def model_like(model, tensors):
    """The functional model from the tensors `tensors` maps `model`'s inputs and outputs to."""
    return keras.Model(
        tree.map_structure(lambda x: tensors[id(x)], model.input),
        tree.map_structure(lambda x: tensors[id(x)], model.output),
        name=model.name,
    )


def _call(layer, node, tensors):
    """Call `layer` as `node` called its layer, on the tensors `tensors` maps to."""
    args, kwargs = node.arguments.fill_in(tensors)
    for x, y in zip(node.outputs, tree.flatten(layer(*args, **kwargs))):
        tensors[id(x)] = y


# Layers whose `*_initializer` config keys are the attributes they build from.
QUICK_BUILD = (Expandable, keras.layers.Dense, keras.layers.Embedding)


ROUNDING = {"float16": 1e-2, "bfloat16": 5e-2}


def default_rtol(model):
    """1e-5 for float32 models; what their rounding allows for half precision."""
    dtypes = {getattr(layer, "compute_dtype", "float32") for layer in model.layers}
    return max([ROUNDING.get(d, 1e-5) for d in dtypes], default=1e-5)


def _new_layer(op, config):
    """The grown layer of `config`. For kwiden's layers and Keras' Dense and
    Embedding, built with zeros for initializers: growth overwrites every
    weight, and random initialisers would take most of its time
    (`_restore_initializers` puts them back once the layer is built)."""
    if not isinstance(op, QUICK_BUILD):
        return op.__class__.from_config(config)
    return op.__class__.from_config(
        {key: "zeros" if key.endswith("_initializer") and value else value for key, value in config.items()}
    )


def _restore_initializers(layer, config):
    """Put back the initializers of `config`, so the grown layer's config keeps them."""
    if not isinstance(layer, QUICK_BUILD):
        return
    for key, value in config.items():
        if key.endswith("_initializer") and value:
            setattr(layer, key, keras.initializers.get(value))


def weight_axes(model, k):
    """`{variable path: axes}`: how each weight of `model` grows by `k` (an
    integer or a `Growth`)."""
    axes = {}
    for _, plan in walk(model, k)[0]:
        for weight, weight_axes in zip(plan.weights, plan.axes):
            axes[weight.path] = weight_axes
    return axes


def growth_scales(model, k, ffn_factor=None, heads="size"):
    """`{variable path: c}`: each grown tensor is its source copied and
    multiplied by `c` (equal splits; docs/optimizer-state.md#learning-rate-multipliers)."""
    growth = Growth(k, ffn_factor, heads)
    return {path: growth_scale(axes) for path, axes in weight_axes(model, growth).items()}


def walk(model, k):
    """Plan the growth of every call in `model`, in graph order.

    Returns `(steps, spaces)`: `steps` is a list of `(node, Plan)`, `spaces`
    maps `id(tensor)` of every tensor of `model` to its `Space` once grown.
    """
    spaces = {id(x): UNCHANGED for x in model.inputs}
    first_axes = {}  # id(layer) -> the weight axes of its first call
    steps = []
    for node in nodes_in_order(model):
        op = node.operation
        in_spaces = [spaces[id(x)] for x in node.input_tensors]
        plan = plan_node(op, k, node, in_spaces)
        if first_axes.setdefault(id(op), plan.axes) != plan.axes:
            raise GrowthError(
                f"Layer '{op.name}' is shared by calls whose inputs grow differently, and "
                "one set of grown weights cannot serve them all. Use separate layers."
            )
        for x, space in zip(node.outputs, plan.outputs):
            spaces[id(x)] = space
        steps.append((node, plan))
    return steps, spaces


def nodes_in_order(model):
    for depth in sorted(model._nodes_by_depth, reverse=True):
        for node in model._nodes_by_depth[depth]:
            if node.operation is not None and not node.is_input:
                yield node


def plan_node(op, k, node, in_spaces):
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
            "class (kwiden.layers has SelectToken and BiasAdd) or implement a layer "
            "with `get_expanded_weights` (subclass kwiden.layers.Expandable)."
        )
    outputs = len(node.outputs)
    if isinstance(op, Expandable):
        space = _common_space(op, in_spaces)
        static = {
            key: value
            for key, value in node.arguments.kwargs.items()
            if not any(isinstance(x, keras.KerasTensor) for x in tree.flatten(value))
        }
        out = op.get_expanded_output_space(k, space, **static)
        config = op.get_expanded_config(k, space)
        return Plan([out] * outputs, config, op.weights, op.get_expanded_weight_axes(k, space))
    if not any(space.expanded for space in in_spaces):
        weights = getattr(op, "weights", [])
        return Plan([UNCHANGED] * outputs, op.get_config(), weights, [[None] * len(w.shape) for w in weights])
    for layer_class, rule in GLUE_RULES:
        if isinstance(op, layer_class):
            return rule(op, node, in_spaces)
    raise GrowthError(
        f"kwiden cannot grow layer '{op.name}' ({type(op).__name__}): it receives "
        f"grown tensors ({', '.join(map(str, in_spaces))}) and kwiden does not know "
        "how its weights and outputs change. Use the kwiden.layers equivalent, or "
        "subclass kwiden.layers.Expandable and implement `get_expanded_weights` "
        "(and `get_expanded_config`, `get_expanded_output_space`)."
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
    return Plan([in_spaces[0]] * len(node.outputs), op.get_config(), [], [])


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
    return Plan([space] * len(node.outputs), op.get_config(), [], [])


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
    return Plan([Space(expanded[0].factor, scale)] * len(node.outputs), op.get_config(), [], [])


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
    return Plan([UNCHANGED] * len(node.outputs), op.get_config(), op.weights, axes)


GLUE_RULES = [
    (keras.layers.Dropout, _same_space),
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


def _require_functional(model):
    from keras.src.models.functional import Functional

    if not isinstance(model, Functional):
        raise GrowthError(
            f"kwiden.grow needs a functional model (keras.Model(inputs, outputs)); "
            f"'{getattr(model, 'name', model)}' is a {type(model).__name__}, whose graph "
            "cannot be walked. Rebuild it functionally (kwiden.build_transformer_model "
            "does) and copy its weights over."
        )
