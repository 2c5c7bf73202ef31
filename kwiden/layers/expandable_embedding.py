import keras
from keras import ops

from kwiden.growth.expansion import OUT, Growth, Space, grown_size
from kwiden.layers.expandable import Expandable

MODES = ("lookup", "position")


@keras.saving.register_keras_serializable(package="kwiden")
class ExpandableEmbedding(Expandable, keras.layers.Layer):
    """An embedding table for tokens, segments or learned positions.

    `mode="lookup"` maps integer ids `(batch, seq)` to vectors
    `(batch, seq, output_dim)`. `mode="position"` takes any `(batch, seq, ...)`
    tensor and returns the first `seq` rows of the table, one per position
    (or the rows `positions` `(batch, seq)` names, for a decoder's new tokens).
    Called with `reverse=True`, the layer turns hidden states into tied output
    logits `h Eᵀ` (as Keras-Hub's `ReversibleEmbedding`).

    Growth (docs/widening.md#embeddings): the table's columns are copied at the stream scale;
    tied logits stay exact because their input arrives at the stream scale.

    Args:
        input_dim: rows of the table (vocabulary size, segment types, or the
            longest sequence for positions).
        output_dim: width of each vector.
        mode: `"lookup"` or `"position"`.
        embeddings_initializer: initializer of the table.

    Example:

    >>> import numpy as np
    >>> embedding = ExpandableEmbedding(100, 8)
    >>> h = embedding(np.array([[5, 7, 0]]))
    >>> tuple(embedding(h, reverse=True).shape)
    (1, 3, 100)
    """

    def __init__(
        self,
        input_dim,
        output_dim,
        mode="lookup",
        embeddings_initializer="uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if mode not in MODES:
            raise ValueError(f"`mode` must be one of {MODES}, got mode={mode!r}.")
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.mode = mode
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            shape=(self.input_dim, self.output_dim),
            initializer=self.embeddings_initializer,
            name="embeddings",
        )

    def call(self, inputs, reverse=False, positions=None):
        table = ops.cast(self.embeddings, self.compute_dtype)
        if reverse:
            return ops.matmul(ops.cast(inputs, self.compute_dtype), ops.transpose(table))
        if self.mode == "position" and positions is not None:
            return ops.take(table, ops.cast(positions, "int32"), axis=0)
        if self.mode == "position":
            batch, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
            positions = ops.slice(table, (0, 0), (length, self.output_dim))
            return ops.broadcast_to(positions[None], (batch, length, self.output_dim))
        return ops.take(table, ops.cast(inputs, "int32"), axis=0)

    def compute_output_spec(self, inputs, reverse=False, positions=None):
        if reverse:
            shape = (*inputs.shape[:-1], self.input_dim)
        else:
            shape = (*inputs.shape[:2], self.output_dim)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "mode": self.mode,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }

    def get_expanded_config(self, k, input_space=None):
        return {
            **self.get_config(),
            "output_dim": grown_size(self.output_dim, Growth.of(k).k, f"ExpandableEmbedding '{self.name}' output_dim"),
        }

    def get_expanded_output_space(self, k, input_space=None, reverse=False, **call_kwargs):
        k = Growth.of(k).k
        if not reverse:
            return Space.stream(k)
        if input_space != Space.stream(k):
            raise ValueError(
                f"ExpandableEmbedding '{self.name}' (reverse=True) gives exact tied "
                f"logits only when its input is the residual stream "
                f"({Space.stream(k)}); its input is {input_space}. Put a layer "
                "that outputs the stream (ExpandableLayerNormalization, "
                "ExpandableDense without activation) before it."
            )
        return Space()

    def get_expanded_weight_axes(self, k, input_space):
        return {"embeddings": [None, (Space.stream(Growth.of(k).k), OUT)]}
