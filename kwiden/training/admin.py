"""Admin (Liu et al., 2020, "Understanding the Difficulty of Training
Transformers"): set the residual weights ω of a Post-LN model so that deep
stacks train, and fold them away afterwards (docs/admin.md).

A Post-LN layer computes `LN(x + f(x))`; when the branch f outweighs the
stream x, a small change of the weights changes the output a lot, more so the
deeper the stack. Admin computes `LN(ω ⊙ x + f(x))` (`AdminResidual`) with ω
large enough that each layer leans on its stream as much as on its branch.
"""

import math

import keras
import numpy as np
from keras import tree

from kwiden.growth.graph import Graph, Rebuild, nodes_in_order, probe
from kwiden.growth.verify import sample_inputs, verify
from kwiden.layers import (
    AdminResidual,
    ExpandableDense,
    ExpandableLayerNormalization,
    ExpandableMultiHeadAttention,
    FeedForward,
)
from kwiden.messages import warn
from kwiden.models import naming

METHODS = ("profile", "closed_form")


def initialize(model, batch=None, method="profile"):
    """Set ω of every `AdminResidual` in `model`, in graph order; return them.

    `method="profile"` is the paper's two stages: one forward pass on `batch`
    in training mode with every ω = 1, measuring the variance of each
    residual branch's output `Var[f_i]` (over all its elements), then
    `ω_i = √(Σ_{j<i} Var[f_j])`, where the first term is the variance of the
    stream entering the first residual (the embedding output).
    `method="closed_form"` sets `ω = √((N+1)/ln(N+1) − 1)` for N residual
    layers, without data.

    Args:
        model: a model built with `residual="admin"` (or any functional model
            with `AdminResidual` layers).
        batch: model inputs for profiling, as `model(batch)` takes them.
        method: `"profile"` or `"closed_form"`.

    Returns:
        `{layer name: ω}`, the value each layer's ω vector was filled with.

    Example:

    >>> import kwiden, numpy as np
    >>> model = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=3, num_attention_heads=2),
    ...     model="gpt", residual="admin")
    >>> omegas = kwiden.training.admin.initialize(model, np.array([[5, 6, 7, 8]]))
    >>> values = list(omegas.values())
    >>> len(values), values == sorted(values)
    (6, True)
    """
    nodes = admin_nodes(model)
    if method == "closed_form":
        n = len(nodes)
        omegas = [math.sqrt((n + 1) / math.log(n + 1) - 1)] * n
    elif method == "profile":
        omegas = _profile(model, nodes, batch)
    else:
        raise ValueError(f"`method` must be one of {METHODS}, got method={method!r}.")
    for node, omega in zip(nodes, omegas):
        layer = node.operation
        layer.omega.assign(np.full(layer.omega.shape, omega, layer.omega.dtype))
    return {node.operation.name: float(omega) for node, omega in zip(nodes, omegas)}


def admin_nodes(model):
    """The calls of `AdminResidual` layers in `model`, in graph order."""
    nodes = [node for node in nodes_in_order(model) if isinstance(node.operation, AdminResidual)]
    if not nodes:
        raise ValueError(
            f"Model '{model.name}' has no AdminResidual layers; build it with "
            "kwiden.build_transformer_model(..., residual='admin')."
        )
    names = [node.operation.name for node in nodes]
    if len(set(names)) != len(names):
        raise ValueError(f"An AdminResidual layer of '{model.name}' is called more than once; each needs its own ω.")
    return nodes


def _profile(model, nodes, batch):
    if batch is None or any(np.size(x) == 0 for x in tree.flatten(batch)):
        raise ValueError(
            "`batch` is empty: profiling needs model inputs with at least one example (or use method='closed_form')."
        )
    for node in nodes:
        node.operation.omega.assign(np.ones(node.operation.omega.shape, node.operation.omega.dtype))
    stream, _ = nodes[0].input_tensors
    values = probe(model, [stream] + [node.input_tensors[1] for node in nodes], batch, training=True)
    variances = [float(np.var(v)) for v in values]
    return list(np.sqrt(np.cumsum(variances[:-1])))


def fold(model, allow_approximate=False, check=None):
    """A plain Post-LN model computing the same function as the Admin `model`.

    Each `LN(ω ⊙ x + f)` becomes `LN(x + f)` (an `Add` and an
    `ExpandableLayerNormalization`), exactly, in one of two ways:
    - ω per channel: x comes out of a LayerNorm with γ (through Dropout), and
      besides this residual only kwiden layers read it (attention, FeedForward,
      Dense). That LayerNorm's γ and β are multiplied by ω and the readers'
      input kernels divided by ω row by row. kwiden's Admin builders are
      always of this kind.
    - ω uniform (`c` in every channel, c > 0): LN is scale-invariant,
      `LN(c·x + f) = LN(x + f/c)` with ε/c², so the branch's output
      projection is divided by c and the LayerNorm's ε by c².
    Otherwise no Post-LN model computes the same function: `fold` raises,
    unless `allow_approximate=True`, which folds the mean of ω the uniform
    way and keeps `kwiden.verify`'s report, measured on `check` (or random
    inputs), as `folded.fold_report`, with a warning.

    `model` itself is not modified.

    Example:

    >>> import kwiden, numpy as np
    >>> admin = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
    ...          hidden_dropout_prob=0.0), residual="admin")
    >>> _ = kwiden.training.admin.initialize(admin, [np.array([[5, 6, 7]]), np.zeros((1, 3), "int32")])
    >>> plain = kwiden.training.admin.fold(admin)
    >>> any(isinstance(layer, kwiden.layers.AdminResidual) for layer in plain.layers)
    False
    """
    nodes = admin_nodes(model)
    weights = {
        layer.name: {v.path: keras.ops.convert_to_numpy(v).copy() for v in layer.weights} for layer in model.layers
    }
    graph = Graph(model)
    epsilons, approximate = {}, []
    for node in nodes:
        layer = node.operation
        omega = keras.ops.convert_to_numpy(layer.omega).astype(np.float64)
        if not np.all(np.isfinite(omega)):
            raise ValueError(
                f"AdminResidual '{layer.name}': ω is not finite in channels "
                f"{np.flatnonzero(~np.isfinite(omega)).tolist()[:8]}; folding it would give NaN weights. "
                "Re-initialise ω (kwiden.training.admin.initialize) or train with a lower learning rate."
            )
        stream, branch = node.input_tensors
        if np.all(omega != 0) and _fold_into_norm(node, stream, omega, weights, graph):
            continue
        c = float(np.mean(omega))
        if np.ptp(omega) != 0 or c == 0:
            if not allow_approximate or c == 0:
                raise ValueError(_not_foldable(layer, omega, allow_approximate))
            approximate.append(layer.name)
        end = _branch_end(branch, node, graph, layer.name)
        for name in end.residual_output_weights:
            variable = getattr(end, name)
            if variable is not None:
                weights[end.name][variable.path] /= c
        epsilons[layer.name] = layer.epsilon / c**2
        if c < 0:  # LN(c·z) = −LN(z) for c < 0: γ changes sign
            if not layer.scale:
                raise ValueError(
                    f"AdminResidual '{layer.name}': ω < 0 folds only into a LayerNorm with γ (scale=True)."
                )
            weights[layer.name][layer.gamma.path] = -weights[layer.name][layer.gamma.path]
    folded = _rebuild(model, weights, epsilons)
    if approximate:
        report = verify(model, folded, sample_inputs(model) if check is None else check, k=1)
        folded.fold_report = report
        warn(f"kwiden.training.admin.fold: {approximate} folded approximately.\n{report}")
    return folded


def _not_foldable(layer, omega, allow_approximate):
    where = f"AdminResidual '{layer.name}'"
    zeros = np.flatnonzero(omega == 0)
    if np.mean(omega) == 0:
        return f"{where}: ω averages 0, so even an approximate fold has no scale to divide by."
    if zeros.size:
        return (
            f"{where}: ω is 0 in channels {zeros.tolist()[:8]}, where the layer ignores its stream; "
            "no Post-LN layer does that. Pass allow_approximate=True to fold the mean of ω."
        )
    return (
        f"{where}: ω differs from channel to channel and its stream input does not come "
        "straight from a LayerNorm read only by kwiden layers (each called once), so no "
        "Post-LN model computes the same function. Keep ω uniform (omega_trainable=False), "
        "put a LayerNorm before the first block, or pass allow_approximate=True to fold the mean of ω."
    )


def _fold_into_norm(node, stream, omega, weights, graph):
    """ω ⊙ x folded into the LayerNorm that makes x, and out of x's other
    readers; False (nothing changed) where that is not possible."""
    chain, source = graph.upstream(stream)
    if source is None or not isinstance(source.operation, ExpandableLayerNormalization) or not source.operation.scale:
        return False
    readers = graph.other_readers(chain, node)
    if readers is None or graph.calls[id(source.operation)] != 1:
        return False
    for reader in readers:
        if graph.calls[id(reader.operation)] != 1 or not any(_reads_through_kernels(reader, x) for x in chain):
            return False
    norm = source.operation
    for variable in norm.weights:
        if variable.name in ("gamma", "beta"):
            weights[norm.name][variable.path] = weights[norm.name][variable.path] * omega
    for reader in readers:
        for variable in reader.operation.weights:
            if variable.name in INPUT_KERNELS:
                shape = (-1,) + (1,) * (len(variable.shape) - 1)
                weights[reader.operation.name][variable.path] = weights[reader.operation.name][
                    variable.path
                ] / omega.reshape(shape)
    return True


# Kernels whose first axis reads a layer's input, by layer class.
INPUT_KERNELS = ("query_kernel", "key_kernel", "value_kernel", "gate_kernel", "up_kernel", "inner_kernel", "kernel")


def _reads_through_kernels(node, tensor):
    """Whether `node` reads `tensor` only through input kernels that can absorb
    a per-channel factor: self-attention on it, a FeedForward, a Dense."""
    layer = node.operation
    args, kwargs = node.arguments.args, node.arguments.kwargs
    if isinstance(layer, ExpandableMultiHeadAttention):
        return len(args) == 1 and args[0] is tensor and kwargs.get("value") is None and kwargs.get("key") is None
    return isinstance(layer, (FeedForward, ExpandableDense))


def _branch_end(branch, node, graph, name):
    """The layer whose output projection can absorb 1/ω: it ends the branch
    (through Dropouts), is called once, and only this residual reads it."""
    chain, source = graph.upstream(branch)
    layer = None if source is None else source.operation
    if layer is None or not getattr(layer, "residual_output_weights", ()):
        raise ValueError(
            f"AdminResidual '{name}': its branch does not end in a layer with "
            "`residual_output_weights` (ExpandableMultiHeadAttention, FeedForward), whose "
            "output could absorb ω."
        )
    if graph.other_readers(chain, node) != [] or graph.calls[id(layer)] != 1:
        raise ValueError(
            f"AdminResidual '{name}': the output of '{layer.name}' is also read elsewhere (or the "
            "layer is called more than once), so scaling it by 1/ω would change those readers."
        )
    return layer


def _rebuild(model, weights, epsilons):
    """`model` with each AdminResidual replaced by Add + LayerNorm, and `weights`."""
    graph, norms, sources = Rebuild(model), [], {}  # norms: (new norm, its AdminResidual)
    for node in nodes_in_order(model):
        layer = sources.setdefault(id(node.operation), node.operation)
        if not isinstance(layer, AdminResidual):
            graph.call(node, lambda layer=layer: layer.__class__.from_config(layer.get_config()))
            continue
        config = {key: value for key, value in layer.get_config().items() if not key.startswith("omega_")}
        norm = ExpandableLayerNormalization.from_config({**config, "epsilon": epsilons.get(layer.name, layer.epsilon)})
        stream, branch = (graph.tensors[id(x)] for x in node.input_tensors)
        added = keras.layers.Add(name=naming.with_part(layer.name, naming.ADD))([stream, branch])
        graph.tensors[id(node.outputs[0])] = norm(added)
        norms.append((norm, layer))
    folded = graph.finish()
    pairs = [(new, sources[key]) for key, new in graph.layers.items()] + norms
    for new, old in pairs:
        paths = [v.path for v in getattr(old, "weights", []) if v.name != "omega"]
        if paths:
            new.set_weights([weights[old.name][path] for path in paths])
    return folded
