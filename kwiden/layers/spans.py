"""What the span heads share (GlobalPointer, EfficientGlobalPointer): their
arguments, config and growth, and padded or backward spans scored out of
reach."""

import keras
from keras import ops

from kwiden.arguments import is_count
from kwiden.growth.expansion import UNCHANGED
from kwiden.layers.expandable import Expandable
from kwiden.layers.rotary_embedding import RotaryEmbedding

# The score of a span that cannot be an entity: bert4keras's "infinity", far
# below any real score, so that `score > 0` never picks it and the multi-label
# cross-entropy gives it no weight (e^-1e12 is 0). Finite in float32 and
# bfloat16 (-inf in float16, which the loss handles too).
MASKED = -1e12


def check_positive_int(value, name, layer):
    """`value` as an int; a `ValueError` naming `layer`'s argument `name` otherwise."""
    if not is_count(value, 1):
        raise ValueError(f"{layer}: `{name}` must be a positive integer, got {name}={value!r}.")
    return int(value)


def check_sequence_input(input_shape, layer):
    """The feature width of a `(batch, seq, features)` input; a `ValueError` naming `layer` otherwise."""
    if len(input_shape) != 3 or input_shape[-1] is None:
        raise ValueError(
            f"{layer} reads a sequence (batch, seq, features) with a known feature width, got shape {tuple(input_shape)}."
        )
    return input_shape[-1]


def mask_spans(scores, mask=None, tril_mask=True):
    """`scores` `(batch, heads, start, end)` with the spans that cannot be
    entities set to `MASKED`: those touching a padded position (`mask`
    `(batch, seq)`, True at real tokens) and, with `tril_mask`, those ending
    before they start."""
    keep = None
    if mask is not None:
        real = ops.cast(mask, "bool")
        keep = ops.logical_and(real[:, None, :, None], real[:, None, None, :])
    if tril_mask:
        positions = ops.arange(ops.shape(scores)[-1])
        forward = ops.greater_equal(positions[None, :], positions[:, None])
        keep = forward if keep is None else ops.logical_and(keep, forward)
    if keep is None:
        return scores
    return ops.where(keep, scores, ops.cast(MASKED, scores.dtype))


class SpanScores(Expandable, keras.layers.Layer):
    """The base of the span heads: their arguments checked (errors name the
    head), their rotary positions, output `(batch, heads, seq, seq)` with no
    Keras mask after it, their config, and scores that do not grow. A head
    adds its weights (`build`), its scores (`call`) and which of its weights
    read the hidden states (`get_expanded_weight_axes`)."""

    def __init__(
        self, heads, head_size, rope=True, tril_mask=True, use_bias=True, kernel_initializer="lecun_normal", **kwargs
    ):
        super().__init__(**kwargs)
        head = type(self).__name__
        self.heads = check_positive_int(heads, "heads", head)
        self.head_size = check_positive_int(head_size, "head_size", head)
        if rope and head_size % 2:
            raise ValueError(f"{head}: rope rotates pairs, so `head_size` must be even, got head_size={head_size}.")
        self.rope = bool(rope)
        self.tril_mask = bool(tril_mask)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.rotary = RotaryEmbedding(head_size=head_size) if self.rope else None

    def compute_mask(self, inputs, mask=None):
        return None  # the padding is in the scores

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.heads, input_shape[1], input_shape[1])

    def get_config(self):
        return {
            **super().get_config(),
            "heads": self.heads,
            "head_size": self.head_size,
            "rope": self.rope,
            "tril_mask": self.tril_mask,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        return UNCHANGED
