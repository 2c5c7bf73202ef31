import math

import keras
from keras import ops

from kwiden.growth.expansion import IN
from kwiden.layers.spans import SpanScores, check_sequence_input, mask_spans


@keras.saving.register_keras_serializable(package="kwiden")
class GlobalPointer(SpanScores):
    """Span scores for named entities (Su Jianlin's GlobalPointer, as bert4keras).

    For each entity type `h` a Dense gives every token a start vector `q` and an
    end vector `k` of `head_size`; with `rope` both are rotated by their
    position (`RotaryEmbedding`), so a score depends on the span's length as
    well as its tokens. The span `[i, j]` of type `h` scores
    `q_hi · k_hj / √head_size`; entities are the spans scoring above 0
    (train with `kwiden.ner.losses.global_pointer_crossentropy`).

    Spans touching padding and, with `tril_mask`, spans ending before they
    start score `MASKED` (-1e12). Padding comes from the Keras mask of the
    input, or from `mask` `(batch, seq)` (True at real tokens) passed to the
    call: kwiden's models attach no Keras mask to their outputs, so pass
    `mask=keras.ops.not_equal(token_ids, 0)` on them.

    Growth: the Dense reads the hidden states, so its kernel's input axis is
    expanded as a plain Dense head's; the scores stay as they were.

    Args:
        heads: the number of entity types.
        head_size: the size of the start and end vectors (even with `rope`).
        rope: whether start and end vectors carry rotary positions.
        tril_mask: whether spans ending before they start are masked.
        use_bias, kernel_initializer: of the Dense.

    Output: `(batch, heads, seq, seq)`, `[b, h, start, end]`.

    Example:

    >>> import numpy as np
    >>> pointer = GlobalPointer(heads=3, head_size=4)
    >>> scores = pointer(np.ones((2, 5, 8), "float32"), mask=np.array([[1] * 5, [1, 1, 1, 0, 0]], bool))
    >>> tuple(scores.shape), float(scores[1, 0, 0, 4]) < -1e11, float(scores[0, 0, 2, 1]) < -1e11
    ((2, 3, 5, 5), True, True)
    """

    def build(self, input_shape):
        width = check_sequence_input(input_shape, f"GlobalPointer '{self.name}'")
        units = self.heads * 2 * self.head_size
        self.kernel = self.add_weight(shape=(width, units), initializer=self.kernel_initializer, name="kernel")
        self.bias = self.add_weight(shape=(units,), initializer="zeros", name="bias") if self.use_bias else None

    def call(self, inputs, mask=None):
        x = ops.matmul(inputs, ops.cast(self.kernel, inputs.dtype))
        if self.use_bias:
            x = x + ops.cast(self.bias, x.dtype)
        x = ops.reshape(x, (*ops.shape(x)[:-1], self.heads, 2 * self.head_size))
        start, end = x[..., : self.head_size], x[..., self.head_size :]
        if self.rope:
            start, end = self.rotary(start), self.rotary(end)
        scores = ops.einsum("bmhd,bnhd->bhmn", start, end) / math.sqrt(self.head_size)
        return mask_spans(scores, mask, self.tril_mask)

    def get_expanded_weight_axes(self, k, input_space):
        axes = {"kernel": [(input_space, IN), None]}
        if self.use_bias:
            axes["bias"] = [None]
        return axes
