"""`kwiden.layers.GlobalPointer` and `EfficientGlobalPointer` with weights set from random arrays, held to
bert4keras' formulas and weight layout (tests/layers/ holds them to loops over spans; here the authors'
vectorised formula, their Dense's column layout and their RoPE pairing).

References (parity_reference.py): layers.GlobalPointer.call, layers.EfficientGlobalPointer.call,
backend.sinusoidal_embeddings, backend.apply_rotary_position_embeddings, backend.sequence_masking and
backend.multilabel_categorical_crossentropy (bert4keras' GlobalPointer loss: over each (example, type)'s
spans flattened, averaged).

Masked spans: bert4keras writes −inf, kwiden −1e12 (`kwiden.layers.spans.MASKED`: finite in float32 and
bfloat16). What matters is asserted: the same spans are masked, every masked score is below every real one
and below the threshold 0, and the loss is the same.
"""

import keras
import numpy as np
import parity_reference as reference
import pytest
from parity_checkpoints import assert_close

from kwiden import layers
from kwiden.ner import losses

HEADS, HEAD_SIZE, WIDTH = 3, 6, 10
# Row 0 whole, row 1 padded at the end, as a BERT batch's padding (token id 0).
MASK = np.array([[1] * 7, [1, 1, 1, 1, 0, 0, 0]], bool)


def assert_spans(actual, expected):
    """Real spans to rtol 1e-5; masked ones (−inf in bert4keras) masked in kwiden too, out of every comparison."""
    actual = np.asarray(keras.ops.convert_to_numpy(actual), np.float64)
    masked = np.isneginf(expected)
    assert masked.any() and (~masked).any()
    assert_close(actual[~masked], expected[~masked])
    assert np.all(actual[masked] < actual[~masked].min()) and np.all(actual[masked] < -1e11)
    return actual


def spans_loss(y_true, y_pred):
    """bert4keras' GlobalPointer loss a row: the multi-label cross-entropy of each type's spans, averaged
    over the types."""
    b, h = y_pred.shape[:2]
    flat = reference.multilabel_categorical_crossentropy(y_true.reshape(b * h, -1), y_pred.reshape(b * h, -1))
    return flat.reshape(b, h).mean(axis=1)


def gold_spans(rng, shape):
    """A few gold spans of each type, among the real forward ones."""
    gold = (rng.random(shape) < 0.15) & MASK[:, None, :, None] & MASK[:, None, None, :]
    return (gold & np.triu(np.ones(shape[-2:], bool))).astype(np.float64)


@pytest.mark.parametrize("rope", [True, False])
@pytest.mark.parametrize("tril_mask", [True, False])
def test_global_pointer_scores_are_the_authors(rng, rope, tril_mask):
    x = rng.normal(size=(2, 7, WIDTH))
    kernel, bias = rng.normal(0, 0.5, (WIDTH, HEADS * 2 * HEAD_SIZE)), rng.normal(0, 0.5, HEADS * 2 * HEAD_SIZE)
    layer = layers.GlobalPointer(HEADS, HEAD_SIZE, rope=rope, tril_mask=tril_mask)
    layer.build(x.shape)
    layer.set_weights([kernel.astype("float32"), bias.astype("float32")])
    expected = reference.global_pointer(x, kernel, bias, HEADS, HEAD_SIZE, rope, tril_mask, MASK)
    actual = assert_spans(layer(x.astype("float32"), mask=MASK), expected)
    y_true = gold_spans(rng, expected.shape)
    loss = losses.global_pointer_crossentropy(y_true.astype("float32"), actual.astype("float32"))
    assert_close(keras.ops.convert_to_numpy(loss), spans_loss(y_true, expected))


@pytest.mark.parametrize("rope", [True, False])
@pytest.mark.parametrize("tril_mask", [True, False])
def test_efficient_global_pointer_scores_are_the_authors(rng, rope, tril_mask):
    x = rng.normal(size=(2, 7, WIDTH))
    p_kernel, p_bias = rng.normal(0, 0.5, (WIDTH, 2 * HEAD_SIZE)), rng.normal(0, 0.5, 2 * HEAD_SIZE)
    q_kernel, q_bias = rng.normal(0, 0.5, (2 * HEAD_SIZE, 2 * HEADS)), rng.normal(0, 0.5, 2 * HEADS)
    layer = layers.EfficientGlobalPointer(HEADS, HEAD_SIZE, rope=rope, tril_mask=tril_mask)
    layer.build(x.shape)
    layer.set_weights([w.astype("float32") for w in (p_kernel, p_bias, q_kernel, q_bias)])  # p_dense, q_dense
    expected = reference.efficient_global_pointer(x, p_kernel, p_bias, q_kernel, q_bias, HEADS, HEAD_SIZE, rope,
                                                  tril_mask, MASK)  # fmt: skip
    actual = assert_spans(layer(x.astype("float32"), mask=MASK), expected)
    y_true = gold_spans(rng, expected.shape)
    loss = losses.global_pointer_crossentropy(y_true.astype("float32"), actual.astype("float32"))
    assert_close(keras.ops.convert_to_numpy(loss), spans_loss(y_true, expected))


def test_without_a_mask_only_the_lower_triangle_is_masked(rng):
    x = rng.normal(size=(1, 5, WIDTH))
    kernel, bias = rng.normal(0, 0.5, (WIDTH, HEADS * 2 * HEAD_SIZE)), rng.normal(0, 0.5, HEADS * 2 * HEAD_SIZE)
    layer = layers.GlobalPointer(HEADS, HEAD_SIZE)
    layer.build(x.shape)
    layer.set_weights([kernel.astype("float32"), bias.astype("float32")])
    expected = reference.global_pointer(x, kernel, bias, HEADS, HEAD_SIZE)
    assert_spans(layer(x.astype("float32")), expected)
