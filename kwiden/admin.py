"""Admin (Liu et al., 2020, "Understanding the Difficulty of Training
Transformers"): set the residual weights ω of a Post-LN model so that deep
stacks train, and fold them away afterwards (DESIGN §1.12).

A Post-LN layer computes `LN(x + f(x))`; when the branch f outweighs the
stream x, a small change of the weights changes the output a lot, more so the
deeper the stack. Admin computes `LN(ω ⊙ x + f(x))` (`AdminResidual`) with ω
large enough that each layer leans on its stream as much as on its branch.
"""

import math
import warnings

import keras
import numpy as np
from keras import tree

from kwiden.grow import _call, nodes_in_order
from kwiden.layers import (
    AdminResidual,
    ExpandableDense,
    ExpandableLayerNormalization,
    ExpandableMultiHeadAttention,
    FeedForward,
)

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
    >>> omegas = kwiden.admin.initialize(model, np.array([[5, 6, 7, 8]]))
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
            "`batch` is empty: profiling needs model inputs with at least one example "
            "(or use method='closed_form')."
        )
    for node in nodes:
        node.operation.omega.assign(np.ones(node.operation.omega.shape, node.operation.omega.dtype))
    stream, _ = nodes[0].input_tensors
    probe = keras.Model(model.input, [stream] + [node.input_tensors[1] for node in nodes])
    values = [np.asarray(keras.ops.convert_to_numpy(v), np.float64) for v in probe(batch, training=True)]
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
    >>> _ = kwiden.admin.initialize(admin, [np.array([[5, 6, 7]]), np.zeros((1, 3), "int32")])
    >>> plain = kwiden.admin.fold(admin)
    >>> any(isinstance(layer, kwiden.layers.AdminResidual) for layer in plain.layers)
    False
    """
    nodes = admin_nodes(model)
    weights = {layer.name: {v.path: keras.ops.convert_to_numpy(v).copy() for v in layer.weights} for layer in model.layers}
    epsilons, approximate = {}, []
    consumers = _consumers(model)
    producer = {id(x): node for node in nodes_in_order(model) for x in node.outputs}
    for node in nodes:
        layer = node.operation
        omega = keras.ops.convert_to_numpy(layer.omega).astype(np.float64)
        stream, branch = node.input_tensors
        if _fold_into_norm(node, stream, omega, weights, consumers, producer, model.outputs):
            continue
        if np.ptp(omega) != 0 or omega[0] <= 0:
            if not allow_approximate:
                raise ValueError(
                    f"AdminResidual '{layer.name}': ω differs from channel to channel (or is not "
                    "positive) and its stream input does not come straight from a LayerNorm read "
                    "only by kwiden layers, so no Post-LN model computes the same function. "
                    "Keep ω uniform (omega_trainable=False), put a LayerNorm before the first "
                    "block, or pass allow_approximate=True to fold the mean of ω."
                )
            approximate.append(layer.name)
        c = float(np.mean(omega))
        end = _branch_end(branch, producer, layer.name)
        for name in end.residual_output_weights:
            variable = getattr(end, name)
            if variable is not None:
                weights[end.name][variable.path] /= c
        epsilons[layer.name] = layer.epsilon / c**2
    folded = _rebuild(model, weights, epsilons)
    if approximate:
        from kwiden.verify import sample_inputs, verify

        report = verify(model, folded, sample_inputs(model) if check is None else check, k=1)
        folded.fold_report = report
        warnings.warn(f"kwiden.admin.fold: {approximate} folded approximately.\n{report}", stacklevel=2)
    return folded


def _consumers(model):
    consumers = {}
    for node in nodes_in_order(model):
        for x in node.input_tensors:
            consumers.setdefault(id(x), []).append(node)
    return consumers


def _fold_into_norm(node, stream, omega, weights, consumers, producer, model_outputs):
    """ω ⊙ x folded into the LayerNorm that makes x, and out of x's other
    readers; False (nothing changed) where that is not possible."""
    tensors, source = [stream], producer.get(id(stream))
    while source is not None and isinstance(source.operation, keras.layers.Dropout):
        tensors.append(source.input_tensors[0])
        source = producer.get(id(tensors[-1]))
    if source is None or not isinstance(source.operation, ExpandableLayerNormalization) or not source.operation.scale:
        return False
    outputs = {id(x) for x in model_outputs}
    if np.any(omega == 0) or any(id(t) in outputs for t in tensors):
        return False
    readers = []
    chain = {id(t) for t in tensors}
    for tensor in tensors:
        for reader in consumers.get(id(tensor), []):
            if reader is node or (reader.outputs and id(reader.outputs[0]) in chain):
                continue
            if not _reads_through_kernels(reader, tensor):
                return False
            readers.append(reader.operation)
    norm = source.operation
    for variable in norm.weights:
        if variable.name in ("gamma", "beta"):
            weights[norm.name][variable.path] = weights[norm.name][variable.path] * omega
    for reader in readers:
        for variable in reader.weights:
            if variable.name in INPUT_KERNELS:
                shape = (-1,) + (1,) * (len(variable.shape) - 1)
                weights[reader.name][variable.path] = weights[reader.name][variable.path] / omega.reshape(shape)
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


def _branch_end(branch, producer, name):
    node = producer.get(id(branch))
    while node is not None and isinstance(node.operation, keras.layers.Dropout):
        node = producer.get(id(node.input_tensors[0]))
    if node is None or not hasattr(node.operation, "residual_output_weights"):
        raise ValueError(
            f"AdminResidual '{name}': its branch does not end in a layer with "
            "`residual_output_weights` (ExpandableMultiHeadAttention, FeedForward), whose "
            "output could absorb ω."
        )
    return node.operation


def _rebuild(model, weights, epsilons):
    """`model` with each AdminResidual replaced by Add + LayerNorm, and `weights`."""
    tensors = {id(x): keras.Input(batch_shape=x.shape, dtype=x.dtype, name=x.name) for x in model.inputs}
    built = []  # (new layer, old layer name, weight paths in order)
    layers = {}
    for node in nodes_in_order(model):
        layer = node.operation
        if isinstance(layer, AdminResidual):
            stream, branch = (tensors[id(x)] for x in node.input_tensors)
            base = layer.name[: -len("-Norm")] if layer.name.endswith("-Norm") else layer.name
            config = {key: value for key, value in layer.get_config().items() if not key.startswith("omega_")}
            norm = ExpandableLayerNormalization.from_config({**config, "epsilon": epsilons.get(layer.name, layer.epsilon)})
            tensors[id(node.outputs[0])] = norm(keras.layers.Add(name=f"{base}-Add")([stream, branch]))
            built.append((norm, layer.name, [v.path for v in layer.weights if v.name != "omega"]))
            continue
        if id(layer) not in layers:
            layers[id(layer)] = layer.__class__.from_config(layer.get_config())
            built.append((layers[id(layer)], layer.name, [v.path for v in getattr(layer, "weights", [])]))
        _call(layers[id(layer)], node, tensors)
    folded = keras.Model(
        tree.map_structure(lambda x: tensors[id(x)], model.input),
        tree.map_structure(lambda x: tensors[id(x)], model.output),
        name=model.name,
    )
    for layer, name, paths in built:
        if paths:
            layer.set_weights([weights[name][path] for path in paths])
    return folded
