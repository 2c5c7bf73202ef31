import math

import keras
from keras import ops

from kwiden.growth.expansion import IN
from kwiden.layers.spans import SpanScores, check_sequence_input, mask_spans


@keras.saving.register_keras_serializable(package="kwiden")
class EfficientGlobalPointer(SpanScores):
    """GlobalPointer with one start/end projection for all entity types (as bert4keras).

    GlobalPointer's Dense gives each type its own start and end vectors,
    `heads · 2 · head_size` outputs per token; here one Dense gives a shared
    `2 · head_size` (start `x[..., 0::2]`, end `x[..., 1::2]`, rotated as in
    GlobalPointer), and a small Dense on that projection gives each type a
    start bias and an end bias per token (`2 · heads` outputs: the odd ones
    start, the even ones end, halved, as bert4keras, so its weights load as
    they are). The span `[i, j]` of type `h` scores
    `q_i · k_j / √head_size + start_hi + end_hj`: far fewer weights when
    there are many types, at about the same F1.

    Padding and backward spans are masked as in `GlobalPointer` (the Keras
    mask, or `mask` `(batch, seq)` passed to the call).

    Growth: only the shared Dense reads the hidden states; its kernel's input
    axis is expanded as a plain Dense head's, and the scores stay.

    Args:
        heads: the number of entity types.
        head_size: the size of the shared start and end vectors (even with `rope`).
        rope: whether start and end vectors carry rotary positions.
        tril_mask: whether spans ending before they start are masked.
        use_bias, kernel_initializer: of both Dense maps.

    Output: `(batch, heads, seq, seq)`, `[b, h, start, end]`.

    Example:

    >>> import numpy as np
    >>> pointer = EfficientGlobalPointer(heads=3, head_size=4)
    >>> tuple(pointer(np.ones((2, 5, 8), "float32")).shape)
    (2, 3, 5, 5)
    >>> [tuple(w.shape) for w in pointer.weights]
    [(8, 8), (8,), (8, 6), (6,)]
    """

    def build(self, input_shape):
        width = check_sequence_input(input_shape, f"EfficientGlobalPointer '{self.name}'")
        shared, types = 2 * self.head_size, 2 * self.heads
        self.kernel = self.add_weight(shape=(width, shared), initializer=self.kernel_initializer, name="kernel")
        self.bias = self.add_weight(shape=(shared,), initializer="zeros", name="bias") if self.use_bias else None
        self.type_kernel = self.add_weight(
            shape=(shared, types), initializer=self.kernel_initializer, name="type_kernel"
        )
        self.type_bias = (
            self.add_weight(shape=(types,), initializer="zeros", name="type_bias") if self.use_bias else None
        )

    def call(self, inputs, mask=None):
        x = ops.matmul(inputs, ops.cast(self.kernel, inputs.dtype))
        if self.use_bias:
            x = x + ops.cast(self.bias, x.dtype)
        types = ops.matmul(x, ops.cast(self.type_kernel, x.dtype))
        if self.use_bias:
            types = types + ops.cast(self.type_bias, x.dtype)
        start, end = x[..., 0::2], x[..., 1::2]
        if self.rope:
            start, end = self.rotary(start[:, :, None])[:, :, 0], self.rotary(end[:, :, None])[:, :, 0]
        scores = ops.einsum("bmd,bnd->bmn", start, end) / math.sqrt(self.head_size)
        types = ops.transpose(types, (0, 2, 1)) / 2  # (batch, 2·heads, seq)
        scores = scores[:, None] + types[:, 0::2, None, :] + types[:, 1::2, :, None]
        return mask_spans(scores, mask, self.tril_mask)

    def get_expanded_weight_axes(self, k, input_space):
        axes = {"kernel": [(input_space, IN), None], "type_kernel": [None, None]}
        if self.use_bias:
            axes.update(bias=[None], type_bias=[None])
        return axes
