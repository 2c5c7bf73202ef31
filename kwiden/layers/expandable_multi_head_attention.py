import keras
import numpy as np
from keras import ops

from kwiden.growth.expansion import IN, OUT, Growth, GrowthError, Space, grown_size, query_head_space
from kwiden.layers.expandable import Expandable, default_space
from kwiden.layers.rotary_embedding import RotaryEmbedding

PROJECTIONS = ("query", "key", "value")


@keras.saving.register_keras_serializable(package="kwiden")
class ExpandableMultiHeadAttention(Expandable, keras.layers.Layer):
    """Multi-head attention whose head size grows with the model.

    `heads` and `head_size` are independent of the input width. Scores are
    divided by `sqrt(head_size)` when `scaled=True` (BERT, GPT) and left alone
    otherwise (T5). The call takes a padding mask `(batch, keys)` or a full
    mask `(batch, queries, keys)` (True where attention is allowed),
    `use_causal_mask=True` for decoders, and an `attention_bias` added to the
    logits (T5's relative position bias, `(1, heads, queries, keys)`).

    Growth (docs/widening.md#attention-wider-heads): head size ×k with heads fixed; inside each head the
    coordinates are interleaved copies. The query and key projections output
    `k^(-1/4)` (scaled) or `k^(-1/2)` (unscaled) so that the grown layer's own
    `1/sqrt(k·head_size)` gives the same scores; values and output are at the
    stream scale. With `Growth(k, heads="count")` the number of heads grows
    instead and whole heads are copied (docs/widening.md#attention-more-heads).

    Args:
        heads: number of attention heads.
        head_size: width of each head's query, key and value.
        output_dim: width of the output; defaults to the query's width.
        scaled: divide scores by `sqrt(head_size)`.
        use_bias: whether the four projections have biases.
        use_output_bias: whether the output projection has one; None
            follows `use_bias` (Qwen2 has query, key and value biases only).
        dropout: dropout rate on the attention probabilities.
        rotary_base: rotate queries and keys by position (RoFormer, LLaMA)
            with the standard schedule of this base; None for no rotation.
        rotary_frequencies: explicit rotary frequencies, one per pair (a grown
            layer keeps its source's this way); overrides `rotary_base`.
        key_value_heads: grouped-query attention (LLaMA): fewer key/value heads
            than query heads, each shared by `heads // key_value_heads`
            consecutive query heads; None for one per query head.
        kernel_initializer, bias_initializer: initializers of the projections.

    Example:

    >>> import numpy as np
    >>> attention = ExpandableMultiHeadAttention(heads=2, head_size=4)
    >>> x = np.random.rand(2, 5, 8).astype("float32")
    >>> mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    >>> tuple(attention(x, attention_mask=mask).shape)
    (2, 5, 8)
    """

    def __init__(
        self,
        heads,
        head_size,
        output_dim=None,
        scaled=True,
        use_bias=True,
        use_output_bias=None,
        dropout=0.0,
        rotary_base=None,
        rotary_frequencies=None,
        key_value_heads=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.rotary_base = rotary_base
        self.rotary_frequencies = None if rotary_frequencies is None else [float(f) for f in rotary_frequencies]
        self.rotary = None
        if rotary_base is not None or rotary_frequencies is not None:
            self.rotary = RotaryEmbedding(
                self.rotary_frequencies, head_size, rotary_base or 10000.0, dtype=self.dtype_policy
            )
        self.heads = heads
        self.key_value_heads = key_value_heads
        if key_value_heads is not None and heads % key_value_heads:
            raise ValueError(f"`heads` ({heads}) must be a multiple of `key_value_heads` ({key_value_heads}).")
        self.head_size = head_size
        self.output_dim = output_dim
        self.scaled = scaled
        self.use_bias = use_bias
        self.use_output_bias = use_output_bias
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = value_shape or query_shape
        key_shape = key_shape or value_shape
        inputs = {"query": query_shape, "key": key_shape, "value": value_shape}
        for name in PROJECTIONS:
            heads = self.heads_of(name)
            kernel = self.add_weight(
                shape=(inputs[name][-1], heads, self.head_size),
                initializer=self.kernel_initializer,
                name=f"{name}_kernel",
            )
            setattr(self, f"{name}_kernel", kernel)
            bias = self._add_bias((heads, self.head_size), f"{name}_bias")
            setattr(self, f"{name}_bias", bias)
        output_dim = self.output_dim or query_shape[-1]
        self.output_kernel = self.add_weight(
            shape=(self.heads, self.head_size, output_dim),
            initializer=self.kernel_initializer,
            name="output_kernel",
        )
        self.output_bias = self._add_bias((output_dim,), "output_bias", self.has_output_bias)

    @property
    def has_output_bias(self):
        return self.use_bias if self.use_output_bias is None else self.use_output_bias

    def _add_bias(self, shape, name, present=None):
        if not (self.use_bias if present is None else present):
            return None
        return self.add_weight(shape=shape, initializer=self.bias_initializer, name=name)

    def heads_of(self, projection):
        if projection == "query" or self.key_value_heads is None:
            return self.heads
        return self.key_value_heads

    def _project(self, name, x):
        # reshape + 2-D matmul: on TensorFlow, einsum "btd,dnh->btnh" becomes a
        # broadcasting batched matmul, about 3x slower on CPU.
        kernel = ops.cast(getattr(self, f"{name}_kernel"), self.compute_dtype)
        dim = kernel.shape[0]
        heads = self.heads_of(name)
        y = ops.matmul(ops.reshape(x, (-1, dim)), ops.reshape(kernel, (dim, heads * self.head_size)))
        y = ops.reshape(y, (ops.shape(x)[0], ops.shape(x)[1], heads, self.head_size))
        bias = getattr(self, f"{name}_bias")
        return y if bias is None else y + ops.cast(bias, self.compute_dtype)

    def call(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        attention_bias=None,
        training=None,
    ):
        value = query if value is None else value
        key = value if key is None else key
        q = self._project("query", query)
        k = self._project("key", key)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        v = self._project("value", value)
        mask = self._mask(q, k, attention_mask, use_causal_mask)
        return self._output(self._attend(q, k, v, mask, attention_bias, training))

    def call_cached(self, query, cache, index, positions, mask):
        """Self-attention of new positions on all earlier ones, for decoding.

        `cache` is `(keys, values)`, each `(batch, length, key_value_heads,
        head_size)`: every position's keys (rotated) and values so far. The
        new positions' go in at `index`; `positions` `(batch, new)` are their
        places in their rows (what rotary attention turns by) and `mask`
        `(batch, new, length)` says which cache slots each may see. Returns
        the output and the updated cache.
        """
        q, k, v = (self._project(name, query) for name in PROJECTIONS)
        if self.rotary is not None:
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        start = (0, index, 0, 0)
        keys = ops.slice_update(cache[0], start, ops.cast(k, cache[0].dtype))
        values = ops.slice_update(cache[1], start, ops.cast(v, cache[1].dtype))
        y = self._output(self._attend(q, keys, values, ops.cast(mask, "bool")[:, None], None, False))
        return y, (keys, values)

    def _attend(self, q, k, v, mask, attention_bias, training):
        """Each query's mix of the values, `(batch, queries, heads, head_size)`."""
        scale = self.head_size**-0.5 if self.scaled else 1.0
        if self.key_value_heads is not None:
            # Each key/value head serves its group of query heads. (Keras' fused
            # attention takes fewer key/value heads itself, but not one on TensorFlow.)
            groups = self.heads // self.key_value_heads
            k, v = ops.repeat(k, groups, axis=2), ops.repeat(v, groups, axis=2)
        if not (training and self.dropout > 0):
            return ops.dot_product_attention(q, k, v, bias=attention_bias, mask=mask, scale=scale)
        logits = ops.cast(ops.einsum("btnh,bsnh->bnts", q, k), "float32") * scale
        if attention_bias is not None:
            logits = logits + ops.cast(attention_bias, "float32")
        if mask is not None:
            logits = ops.where(mask, logits, -1e9)
        probs = ops.cast(ops.softmax(logits, axis=-1), self.compute_dtype)
        probs = self.dropout_layer(probs, training=training)
        return ops.einsum("bnts,bsnh->btnh", probs, v)

    def _output(self, o):
        kernel = ops.cast(self.output_kernel, self.compute_dtype)
        width = self.heads * self.head_size
        y = ops.matmul(ops.reshape(o, (-1, width)), ops.reshape(kernel, (width, kernel.shape[-1])))
        y = ops.reshape(y, (ops.shape(o)[0], ops.shape(o)[1], kernel.shape[-1]))
        if self.output_bias is not None:
            y = y + ops.cast(self.output_bias, self.compute_dtype)
        return y

    @staticmethod
    def _mask(q, k, attention_mask, use_causal_mask):
        """A boolean mask broadcastable to (batch, heads, queries, keys)."""
        mask = None
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "bool")
            if len(mask.shape) == 2:  # (batch, keys): padding
                mask = mask[:, None, None, :]
            else:  # (batch, queries, keys)
                mask = mask[:, None, :, :]
        if use_causal_mask:
            causal = ops.tril(ops.ones((ops.shape(q)[1], ops.shape(k)[1]), "bool"))
            causal = causal[None, None]
            mask = causal if mask is None else ops.logical_and(mask, causal)
        return mask

    # Zero, these make the layer output zeros: a new residual branch that adds nothing.
    residual_output_weights = ("output_kernel", "output_bias")

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])

    def get_config(self):
        return {
            **super().get_config(),
            "heads": self.heads,
            "head_size": self.head_size,
            "output_dim": self.output_dim,
            "scaled": self.scaled,
            "use_bias": self.use_bias,
            "use_output_bias": self.use_output_bias,
            "dropout": self.dropout,
            "rotary_base": self.rotary_base,
            "rotary_frequencies": self.rotary_frequencies,
            "key_value_heads": self.key_value_heads,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }

    def get_expanded_config(self, k, input_space=None):
        growth = Growth.of(k)
        what = f"ExpandableMultiHeadAttention '{self.name}'"
        output_dim = None if self.output_dim is None else grown_size(self.output_dim, growth.k, f"{what} output_dim")
        if growth.heads == "count":
            heads = self._head_spaces(growth)
            key_value_heads = None
            if self.key_value_heads is not None:
                key_value_heads = heads["key"].grown_size(self.key_value_heads, f"{what} key_value_heads")
            return {
                **self.get_config(),
                "heads": heads["query"].grown_size(self.heads, f"{what} heads"),
                "key_value_heads": key_value_heads,
                "output_dim": output_dim,
            }
        if not isinstance(growth.k, int):
            raise GrowthError(
                f"{what}: the non-integer factor {growth.k} cannot grow each head's size exactly "
                "(scores need one scale per head). Grow the number of heads instead: heads='count'."
            )
        config = {**self.get_config(), "head_size": self.head_size * growth.k, "output_dim": output_dim}
        if self.rotary is not None and growth.k != 1:  # at k=1 (depth growth) the heads and their schedule stay
            if growth.rope == "exact":  # each pair's copies turn as the pair did
                config["rotary_frequencies"] = np.repeat(self.rotary.frequencies, growth.k).tolist()
            else:
                growth.refuse_approximation(
                    what,
                    "rope='standard' gives the grown heads their own frequency schedule, which "
                    "changes the function (docs/widening.md#rotary-position-embedding).",
                    "use rope='exact'",
                )
                config["rotary_frequencies"] = None
                config["rotary_base"] = self.rotary.base
        return config

    def _head_spaces(self, growth):
        """Heads axis spaces for `heads="count"` (`query_head_space`)."""
        query = query_head_space(growth.k, self.heads, self.key_value_heads)
        return {"query": query, "key": Space.copy(growth.k), "value": Space.copy(growth.k)}

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        if self.output_dim is None:
            return Space.stream(default_space(k, input_space).factor)
        return Space.stream(Growth.of(k).k)

    def get_expanded_weight_axes(self, k, input_space):
        growth = Growth.of(k)
        k = growth.k
        out = self.get_expanded_output_space(growth, input_space)
        if growth.heads == "count":
            # The output projection spreads each head over its copies (docs/widening.md#attention-more-heads).
            heads = self._head_spaces(growth)
            projection = {name: [(input_space, IN), (heads[name], OUT), None] for name in PROJECTIONS}
            bias = {name: [(heads[name], OUT), None] for name in PROJECTIONS}
            output = [(heads["query"], IN), None, (out, OUT)]
        else:
            # Head size ×k: interleaved copies inside each head; q and k at
            # k^(-1/4) (scaled) or k^(-1/2) (unscaled) so that q·k/√(k·d) = q·k/√d.
            # Rotary heads copy pairs (x_2i, x_2i+1), so each copy still rotates as a pair.
            group = 2 if self.rotary is not None else 1
            scores = Space(k, k**-0.25 if self.scaled else k**-0.5, group)
            spaces = {"query": scores, "key": scores, "value": Space.stream(k)}
            projection = {name: [(input_space, IN), None, (spaces[name], OUT)] for name in PROJECTIONS}
            bias = {name: [None, (spaces[name], OUT)] for name in PROJECTIONS}
            output = [None, (spaces["value"], IN), (out, OUT)]
        axes = {"output_kernel": output}
        for name in PROJECTIONS:
            axes[f"{name}_kernel"] = projection[name]
            if self.use_bias:
                axes[f"{name}_bias"] = bias[name]
        if self.has_output_bias:
            axes["output_bias"] = [(out, OUT)]
        return axes
