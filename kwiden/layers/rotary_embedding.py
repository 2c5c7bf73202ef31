import keras
import numpy as np
from keras import ops


def standard_frequencies(head_size, base=10000.0):
    """θ_i = base^(-2i/d) for the pairs (x_2i, x_2i+1) of a head of size d."""
    if head_size % 2:
        raise ValueError(f"Rotary embeddings rotate pairs: head_size must be even, got {head_size}.")
    return (base ** (-np.arange(0, head_size, 2) / head_size)).tolist()


@keras.saving.register_keras_serializable(package="kwiden")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding (RoFormer): rotates each pair `(x_2i, x_2i+1)`
    of the last axis by `position · θ_i`.

    Input `(batch, seq, heads, head_size)`; positions are 0, 1, … along `seq`,
    or `positions` `(batch, seq)` given (a decoder's new tokens, each at its
    place in its row).
    The layer carries its frequencies in its config, so a grown layer can keep
    the small model's (docs/widening.md#rotary-position-embedding: `θ̃ = repeat(θ, k)` keeps growth exact).

    Args:
        frequencies: one θ per pair; or None with `head_size` (and `base`) for
            the standard schedule `base^(-2i/head_size)`.
        head_size, base: the standard schedule.

    Example:

    >>> import numpy as np
    >>> rope = RotaryEmbedding(head_size=4)
    >>> tuple(rope(np.ones((2, 5, 3, 4), "float32")).shape)
    (2, 5, 3, 4)
    """

    def __init__(self, frequencies=None, head_size=None, base=10000.0, **kwargs):
        super().__init__(**kwargs)
        if frequencies is None:
            if head_size is None:
                raise ValueError("RotaryEmbedding needs `frequencies` or `head_size`.")
            frequencies = standard_frequencies(head_size, base)
        self.frequencies = [float(f) for f in frequencies]
        self.head_size = head_size
        self.base = float(base)

    def call(self, x, positions=None):
        if positions is None:
            positions = ops.arange(ops.shape(x)[1])[None, :]
        angles = ops.cast(positions, "float32")[..., None] * ops.convert_to_tensor(self.frequencies, "float32")
        cos = ops.cast(ops.cos(angles), x.dtype)[:, :, None, :]
        sin = ops.cast(ops.sin(angles), x.dtype)[:, :, None, :]
        pairs = ops.reshape(x, (*ops.shape(x)[:-1], len(self.frequencies), 2))
        even, odd = pairs[..., 0], pairs[..., 1]
        rotated = ops.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
        return ops.reshape(rotated, ops.shape(x))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "frequencies": self.frequencies,
            "head_size": self.head_size,
            "base": self.base,
        }
