"""What the span heads share (GlobalPointer, EfficientGlobalPointer): their
arguments checked, and padded or backward spans scored out of reach."""

from keras import ops

# The score of a span that cannot be an entity: bert4keras's "infinity", far
# below any real score, so that `score > 0` never picks it and the multi-label
# cross-entropy gives it no weight (e^-1e12 is 0). Finite in float32 and
# bfloat16 (-inf in float16, which the loss handles too).
MASKED = -1e12


def check_positive_int(value, name, layer):
    """`value` as an int; a `ValueError` naming `layer`'s argument `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{layer}: `{name}` must be a positive integer, got {name}={value!r}.")
    return value


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
