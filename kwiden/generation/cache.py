"""A functional Transformer run a few positions at a time, with a key/value
cache: what `kwiden.generate` decodes with.

`CachedModel(model)` follows the model's graph (`kwiden.growth.graph`) from its
token (and segment) input to its token logits and runs it on the new
positions only. Each attention layer attends, through `call_cached`, to the
keys and values kept for every earlier position; a learned position table
reads the rows of the new positions. Every other layer on the way works
position by position (embeddings, norms, feed-forwards, residual adds), so
it runs exactly as in the model. The graph's own masks are not computed:
the caller says which cache slots each new position sees, which is how one
cache serves a causal decoder and UniLM alike.
"""

import collections

import keras
from keras import ops

from kwiden import keras_internals, layers
from kwiden.growth.graph import is_keras_hub, nodes_in_order
from kwiden.models import naming

# Layers that treat each position alone, whatever the sequence around it.
POSITIONWISE = (
    layers.ExpandableEmbedding,
    layers.ExpandableDense,
    layers.ExpandableLayerNormalization,
    layers.FeedForward,
    layers.AdminResidual,
    layers.BiasAdd,
    keras.layers.Dense,
    keras.layers.Add,
    keras.layers.Multiply,
    keras.layers.Dropout,
    keras.layers.Activation,
    keras.layers.LayerNormalization,
    keras.layers.Identity,
)


# The compiled shapes kept a decoder on TensorFlow (a generate call uses two: its prompt's and its steps').
TRACES = 8


class CachedModel:
    """`model` decoding with a key/value cache.

    `cached(token_ids, segment_ids, positions, mask, cache, index)` runs the
    new positions `(batch, new)` (segment ids read only by a model with
    them), `positions` their places in their rows, `mask` `(batch, new,
    length)` the cache slots each sees, after writing their keys and values
    at slot `index` of `cache` (from `empty_cache`). It returns the logits
    of the last new position `(batch, 1, vocabulary)` and the updated cache:
    after the last attention layer every layer works position by position,
    so the rest runs on that position alone.
    """

    def __init__(self, model):
        if is_keras_hub(model) or not keras_internals.is_functional(model):
            raise ValueError(f"Decoding walks a kwiden functional model's graph; {model.name!r} is not one.")
        inputs = {keras_internals.producer(x).name: x for x in model.inputs}
        if naming.INPUT_TOKEN not in inputs:
            raise ValueError(f"Model {model.name!r} has no input named {naming.INPUT_TOKEN!r}: build it with kwiden.")
        self.model = model
        self.token_input, self.segment_input = inputs[naming.INPUT_TOKEN], inputs.get(naming.INPUT_SEGMENT)
        self.logits = _token_logits(model)
        self.vocab_size = self.logits.shape[-1]
        self.nodes = _nodes_to(model, self.logits)
        self.attentions = [node.operation for node in self.nodes if _is_attention(node)]
        if not self.attentions:
            raise ValueError(f"Model {model.name!r} has no attention layer before its logits: nothing to cache.")
        self.causal = _causal(self.nodes)
        masks = [node.arguments.kwargs.get("attention_mask") for node in self.nodes if _is_attention(node)]
        # UniLM's mask is (batch, queries, keys), computed from the segments; a padding mask is (batch, keys).
        self.unilm = any(mask is not None and len(mask.shape) == 3 for mask in masks)
        self.masks_padding = any(mask is not None for mask in masks)  # id 0 is padding (blocks.padding_mask)
        self.last_attention = max(i for i, node in enumerate(self.nodes) if _is_attention(node))

    def empty_cache(self, batch, length):
        """Zero keys and values for `length` positions of `batch` rows, one pair an attention layer."""
        dtype = self.model.compute_dtype
        return [
            tuple(ops.zeros((batch, length, layer.heads_of("key"), layer.head_size), dtype) for _ in range(2))
            for layer in self.attentions
        ]

    def __call__(self, token_ids, segment_ids, positions, mask, cache, index):
        tensors = {id(self.token_input): token_ids}
        if self.segment_input is not None:
            tensors[id(self.segment_input)] = segment_ids
        updated = []
        for place, node in enumerate(self.nodes):
            if place == self.last_attention + 1:
                tensors = {key: value[:, -1:] for key, value in tensors.items()}
            layer, output = node.operation, id(node.outputs[0])
            if _is_attention(node):
                query = tensors[id(node.arguments.args[0])]
                tensors[output], kept = layer.call_cached(query, cache[len(updated)], index, positions, mask)
                updated.append(kept)
            elif isinstance(layer, layers.ExpandableEmbedding) and layer.mode == "position":
                tensors[output] = layer(positions, positions=positions)
            else:
                args, kwargs = node.arguments.fill_in(tensors)
                tensors[output] = layer(*args, **kwargs)
        return tensors[id(self.logits)], updated


def _is_attention(node):
    return isinstance(node.operation, layers.ExpandableMultiHeadAttention)


def _token_logits(model):
    """The output that scores every token of the vocabulary (the last, if several)."""
    vocabulary = model.get_layer(naming.EMBEDDING_TOKEN).input_dim if _has(model, naming.EMBEDDING_TOKEN) else None
    found = [x for x in model.outputs if len(x.shape) == 3 and x.shape[-1] == vocabulary]
    if not found:
        raise ValueError(
            f"Model {model.name!r} has no output of token logits (batch, length, {vocabulary}) to generate from: "
            "build a BERT or RoFormer with with_mlm=True (a UniLM: unilm=True), or a decoder (gpt, llama, …)."
        )
    return found[-1]


def _has(model, name):
    return any(layer.name == name for layer in model.layers)


def _nodes_to(model, output):
    """The calls `output` depends on, in order; an attention call depends on
    its query alone (its mask is the decoder's), and every call must be one
    decoding can run a few positions at a time."""
    needed, kept = {id(output)}, []
    for node in reversed(list(nodes_in_order(model))):
        if not any(id(x) in needed for x in node.outputs):
            continue
        _check_decodable(node, model)
        kept.append(node)
        needed.update(id(x) for x in ([node.arguments.args[0]] if _is_attention(node) else node.input_tensors))
    return kept[::-1]


def _check_decodable(node, model):
    layer = node.operation
    if _is_attention(node):
        arguments = node.arguments
        extra = [name for name in ("value", "key", "attention_bias") if arguments.kwargs.get(name) is not None]
        if len(arguments.args) > 1 or extra:
            raise ValueError(
                f"Attention layer {layer.name!r} of {model.name!r} takes {extra or 'a second input'}: decoding runs "
                "self-attention without a position bias (T5's relative positions, cross-attention) only."
            )
    elif not isinstance(layer, POSITIONWISE) or len(node.outputs) != 1:
        raise ValueError(
            f"Layer {layer.name!r} ({type(layer).__name__}) of {model.name!r} lies between the tokens and the "
            "logits, and decoding cannot tell whether it mixes positions: it runs kwiden's layers and Keras' "
            "position-wise ones."
        )


def _causal(nodes):
    """Whether the model's attention is causal (a decoder) rather than over the whole input (UniLM, BERT)."""
    causal = {bool(node.arguments.kwargs.get("use_causal_mask")) for node in nodes if _is_attention(node)}
    if len(causal) > 1:
        raise ValueError("Some attention layers are causal and some are not: decoding needs one kind.")
    return causal.pop()


def compiled(function, model, xla=True):
    """`function` traced by the backend once for each shape its arrays take
    (its variables read from `model`'s): `tf.function` on TensorFlow (with
    XLA unless `xla` is False), `jax.jit` on JAX, itself on PyTorch."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _traced_per_shape(function, xla)
    if backend == "jax":
        import jax  # jit over the weights as arguments, as Keras' JAX trainer does

        variables = model.variables

        @jax.jit
        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return function(*args)

        return lambda *args: stateless([variable.value for variable in variables], *args)
    return function


def _traced_per_shape(function, xla):
    """`tf.function`s of `function`, one for each set of shapes its arrays
    come in, each traced once: a graph of fixed shapes runs several times
    faster on CPU than one of any shape, and keeping one function a shape
    spares TensorFlow's retracing warnings. The latest `TRACES` are kept."""
    import tensorflow as tf  # the backend's own tracer: what Keras compiles with

    traced = collections.OrderedDict()

    def call(*args):
        key = tuple((tuple(x.shape), str(x.dtype)) for x in keras.tree.flatten(args))
        if key not in traced:  # a concrete function: called without tf.function's per-call lookup
            traced[key] = tf.function(function, jit_compile=xla).get_concrete_function(*args)
            while len(traced) > TRACES:
                traced.popitem(last=False)
        traced.move_to_end(key)
        return traced[key](*args)

    return call
