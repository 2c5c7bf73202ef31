"""Megatron-style tensor parallelism for kwiden's models under `keras.distribution`.

`layout_map(mesh)` names, for each weight of a kwiden Transformer, how it is
split over the mesh's model axis, so that

    devices = keras.distribution.list_devices()               # e.g. 8 devices
    mesh = keras.distribution.DeviceMesh((2, 4), ["batch", "model"], devices)
    keras.distribution.set_distribution(keras.distribution.ModelParallel(
        layout_map=kwiden.layout_map(mesh), batch_dim_name="batch"))
    model = kwiden.build_transformer_model(config, model="gpt")   # built sharded

trains with each attention and feed-forward block split over the 4 devices of
a "model" row and the batch split over the 2 rows. Query, key and value
kernels `(hidden, heads, head_size)` are split by heads (their output
columns), the attention output kernel `(heads, head_size, hidden)` by its
input rows; the FFN inner kernel `(hidden, inner)` (a GLU's gate and up
kernels) by columns, its output kernel `(inner, hidden)` by rows; biases of
column-split kernels go with their columns. Row-split kernels' biases, norms,
position embeddings and the rest are replicated. Token embeddings (and the
output logits kernel, MLM bias tied to them) are split by hidden or by
vocabulary. Optimizer slots take the layout of their variable.

Every split length (heads and key/value heads, FFN inner size, and hidden
size or vocabulary for the embeddings) must be divisible by the size of the
model axis; JAX refuses to place an uneven split. Pass `model=` (the model to
shard, built or loaded on one device, or any model of the same sizes) and
`layout_map` says which weight would not split, before anything is placed.
"""

import keras

from kwiden.models import naming

EMBEDDINGS = ("hidden", "vocabulary")


def layout_map(device_mesh, model_dim_name="model", embeddings="hidden", model=None):
    """A `keras.distribution.LayoutMap` splitting kwiden's layers over `model_dim_name`.

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` that has an axis named
            `model_dim_name` (its other axes, e.g. "batch", go to
            `ModelParallel(batch_dim_name=...)`).
        model_dim_name: the mesh axis the weights are split over.
        embeddings: `"hidden"` splits the token embeddings `(vocab, hidden)`
            by hidden columns (and the output logits kernel by its hidden
            rows); `"vocabulary"` splits them by vocabulary (the logits
            kernel by its vocabulary columns, the MLM bias alike).
        model: a model whose weights are checked against the layouts
            (`check_divisible`); None checks nothing.

    Returns:
        A `LayoutMap` whose keys are regular expressions matched in full
        against variable paths (`Transformer-0-MultiHeadSelfAttention/query_kernel`);
        a path matching none is replicated.

    Example (one device here; the same call on a mesh of many):

    >>> import keras
    >>> mesh = keras.distribution.DeviceMesh((1, 1), ["batch", "model"], keras.distribution.list_devices()[:1])
    >>> layouts = layout_map(mesh)
    >>> layouts["Transformer-0-FeedForward/inner_kernel"].axes
    (None, 'model')
    >>> layouts["Transformer-0-FeedForward-Norm/gamma"] is None  # replicated
    True
    """
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        raise TypeError(f"`device_mesh` must be a keras.distribution.DeviceMesh, not {type(device_mesh).__name__}.")
    if model_dim_name not in device_mesh.axis_names:
        raise ValueError(
            f"The mesh has no axis {model_dim_name!r} (its axes: {list(device_mesh.axis_names)}); "
            "pass `model_dim_name` the axis to split the weights over."
        )
    if embeddings not in EMBEDDINGS:
        raise ValueError(f"`embeddings` must be one of {EMBEDDINGS}, not {embeddings!r}.")
    model_to_check, model = model, model_dim_name
    attention = f".*{naming.ATTENTION}/"
    feed_forward = f".*{naming.FEED_FORWARD}/"
    layouts = keras.distribution.LayoutMap(device_mesh)
    # Column-parallel: split by output columns (heads), biases with them.
    layouts[attention + "(query|key|value)_kernel"] = (None, model, None)
    layouts[attention + "(query|key|value)_bias"] = (model, None)
    layouts[feed_forward + "(inner|gate|up)_kernel"] = (None, model)
    layouts[feed_forward + "(inner|gate|up)_bias"] = (model,)
    # Row-parallel: split by input rows; their biases are added after the sum.
    layouts[attention + "output_kernel"] = (model, None, None)
    layouts[feed_forward + "output_kernel"] = (model, None)
    # T5's relative position bias `(buckets, heads)` goes with the heads.
    layouts[f".*{naming.EMBEDDING_RELATIVE_POSITION}/embeddings"] = (None, model)
    if embeddings == "hidden":
        layouts[f".*{naming.EMBEDDING_TOKEN}/embeddings"] = (None, model)
        layouts[f".*{naming.OUTPUT_LOGITS}/kernel"] = (model, None)
    else:
        layouts[f".*{naming.EMBEDDING_TOKEN}/embeddings"] = (model, None)
        layouts[f".*{naming.OUTPUT_LOGITS}/kernel"] = (None, model)
        layouts[f".*{naming.MLM_BIAS}/bias"] = (model,)
    return layouts if model_to_check is None else check_divisible(model_to_check, layouts)


def check_divisible(model, layouts):
    """Raise, naming the weight, its shape and the mesh axis, if a weight of
    `model` is split by `layouts` along an axis its size does not divide;
    returns `layouts`.

    >>> import kwiden
    >>> mesh = keras.distribution.DeviceMesh((1, 3), ["batch", "model"], ["cpu:0", "cpu:1", "cpu:2"])  # names only
    >>> bert = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2))
    >>> check_divisible(bert, layout_map(mesh))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: 'Embedding-Token/embeddings' (shape (50, 8)) would be split ... axis 1 (size 8) is not a multiple of 3...
    """
    sizes = dict(zip(layouts.device_mesh.axis_names, layouts.device_mesh.shape))
    for weight in model.weights:
        layout = layouts[weight.path]
        for axis, name in enumerate(() if layout is None else layout.axes):
            if name is not None and weight.shape[axis] % sizes[name]:
                raise ValueError(
                    f"{weight.path!r} (shape {tuple(weight.shape)}) would be split over the mesh axis {name!r} of "
                    f"{sizes[name]} devices, but its axis {axis} (size {weight.shape[axis]}) is not a multiple of "
                    f"{sizes[name]}. Use a {name!r} axis whose size divides the heads, key/value heads, FFN width "
                    "and embedding axis (e.g. `embeddings='vocabulary'` where the vocabulary divides and the hidden "
                    "size does not), or sizes that divide it."
                )
    return layouts


__all__ = ["check_divisible", "layout_map"]
