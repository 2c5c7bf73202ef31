import dataclasses

import keras
from keras import ops

from kwiden.growth.expansion import OUT, Growth, Space, query_head_space
from kwiden.layers.expandable import Expandable


@keras.saving.register_keras_serializable(package="kwiden")
class RelativePositionBias(Expandable, keras.layers.Layer):
    """T5's relative position bias: one learned scalar per head and bucket of
    `key position − query position` (exact buckets near 0, logarithmic ones
    up to `max_distance`), added to the attention logits.

    Takes any `(batch, seq, ...)` tensor and returns a `(1, heads, seq, seq)`
    bias for `ExpandableMultiHeadAttention(..., attention_bias=...)`.

    Growth: with the number of heads fixed the bias stays as it is (docs/widening.md#attention-wider-heads); when heads are copied (`heads="count"`, docs/widening.md#attention-more-heads) each copy keeps its
    source head's biases.

    Args:
        heads: number of attention heads.
        num_buckets: buckets of relative positions (half per direction when
            `bidirectional`).
        max_distance: distances at and beyond this share the last bucket.
        bidirectional: encoder (True) or decoder (False) buckets.
        key_value_heads: the attention's key/value heads under grouped-query
            attention, so that growth copies the biases as it copies the
            query heads (`kwiden.growth.expansion.query_head_space`).
        embeddings_initializer: initializer of the `(num_buckets, heads)` table.

    Example:

    >>> import numpy as np
    >>> tuple(RelativePositionBias(heads=2)(np.ones((3, 5), "int32")).shape)
    (1, 2, 5, 5)
    """

    def __init__(
        self,
        heads,
        num_buckets=32,
        max_distance=128,
        bidirectional=True,
        key_value_heads=None,
        embeddings_initializer="uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.heads = heads
        self.key_value_heads = key_value_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            shape=(self.num_buckets, self.heads), initializer=self.embeddings_initializer, name="embeddings"
        )

    def buckets(self, length):
        positions = ops.arange(length)
        distance = positions[None, :] - positions[:, None]  # key − query
        buckets = self.num_buckets
        bucket = ops.zeros_like(distance)
        if self.bidirectional:
            buckets //= 2
            bucket = ops.cast(distance > 0, "int32") * buckets
            distance = ops.abs(distance)
        else:
            distance = ops.maximum(-distance, 0)
        exact = buckets // 2
        scaled = ops.log(ops.maximum(ops.cast(distance, "float32"), 1.0) / exact)
        scaled = scaled / ops.log(self.max_distance / exact) * (buckets - exact)
        large = ops.minimum(exact + ops.cast(scaled, "int32"), buckets - 1)
        return bucket + ops.where(distance < exact, distance, large)

    def call(self, inputs):
        table = ops.cast(self.embeddings, self.compute_dtype)
        bias = ops.take(table, self.buckets(ops.shape(inputs)[1]), axis=0)  # (q, k, heads)
        return ops.transpose(bias, (2, 0, 1))[None]

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((1, self.heads, inputs.shape[1], inputs.shape[1]), dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "heads": self.heads,
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "bidirectional": self.bidirectional,
            "key_value_heads": self.key_value_heads,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }

    def get_expanded_config(self, k, input_space=None):
        growth = Growth.of(k)
        if growth.heads == "size":
            return self.get_config()
        return {
            **self.get_config(),
            "heads": self._heads_space(growth).grown_size(self.heads, f"RelativePositionBias '{self.name}' heads"),
        }

    def _heads_space(self, growth):
        # Each copied head keeps its source head's biases: the same copies as
        # the attention's query heads (docs/widening.md#attention-more-heads), on axis 1 of the bias.
        if growth.heads == "size":
            return Space()
        return query_head_space(growth.k, self.heads, self.key_value_heads)

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        return dataclasses.replace(self._heads_space(Growth.of(k)), axis=1)

    def get_expanded_weight_axes(self, k, input_space):
        heads = self._heads_space(Growth.of(k))
        return {"embeddings": [None, (heads, OUT) if heads.expanded else None]}
