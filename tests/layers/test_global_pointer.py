"""GlobalPointer's span scores against loops over spans in numpy; padding,
backward spans, the Keras mask, growth on its own, refusals."""

import keras
import numpy as np
import pytest

from kwiden import Space, layers
from kwiden.layers.spans import MASKED
from kwiden.testing import RTOL, assert_grows_exactly, randomize_weights

MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], bool)


def rotate(vector, position):
    """RoFormer's rotation of the pairs (v_2t, v_2t+1) by position · 10000^(-2t/d), one pair at a time."""
    d = len(vector)
    out = np.empty(d)
    for t in range(d // 2):
        angle = position * 10000.0 ** (-2 * t / d)
        even, odd = vector[2 * t], vector[2 * t + 1]
        out[2 * t] = even * np.cos(angle) - odd * np.sin(angle)
        out[2 * t + 1] = even * np.sin(angle) + odd * np.cos(angle)
    return out


def reference(x, kernel, bias, heads, d, rope, tril_mask, mask):
    """Span by span: q_hi · k_hj / √d, or MASKED."""
    batch, n, _ = x.shape
    scores = np.empty((batch, heads, n, n))
    for b in range(batch):
        for h in range(heads):
            for i in range(n):
                for j in range(n):
                    q = x[b, i] @ kernel[:, h * 2 * d : h * 2 * d + d] + bias[h * 2 * d : h * 2 * d + d]
                    k = x[b, j] @ kernel[:, h * 2 * d + d : (h + 1) * 2 * d] + bias[h * 2 * d + d : (h + 1) * 2 * d]
                    if rope:
                        q, k = rotate(q, i), rotate(k, j)
                    padded = mask is not None and not (mask[b, i] and mask[b, j])
                    scores[b, h, i, j] = MASKED if padded or (tril_mask and j < i) else q @ k / np.sqrt(d)
    return scores


def built(layer, x, seed=0):
    layer(x)
    return randomize_weights(layer, seed)


def assert_scores(actual, expected):
    """Masked spans exactly MASKED in float32, the others to float32 rounding."""
    actual = np.asarray(keras.ops.convert_to_numpy(actual), np.float64)
    masked = expected == MASKED
    np.testing.assert_array_equal(actual[masked], np.float32(MASKED))
    scale = np.abs(expected[~masked]).max()
    np.testing.assert_allclose(actual[~masked], expected[~masked], rtol=RTOL, atol=RTOL * scale)


@pytest.mark.backends
@pytest.mark.parametrize("rope", [True, False])
@pytest.mark.parametrize("tril_mask", [True, False])
@pytest.mark.parametrize("padded", [True, False])
def test_scores_are_the_loops(rng, rope, tril_mask, padded):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = built(layers.GlobalPointer(heads=3, head_size=4, rope=rope, tril_mask=tril_mask), x)
    mask = MASK if padded else None
    kernel, bias = (np.asarray(w, np.float64) for w in layer.get_weights())
    assert_scores(layer(x, mask=mask), reference(x.astype(np.float64), kernel, bias, 3, 4, rope, tril_mask, mask))


def test_without_bias_and_with_an_odd_head_size_without_rope(rng):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = built(layers.GlobalPointer(heads=2, head_size=3, rope=False, use_bias=False), x)
    (kernel,) = layer.get_weights()
    expected = reference(x.astype(np.float64), kernel.astype(np.float64), np.zeros(12), 2, 3, False, True, MASK)
    assert_scores(layer(x, mask=MASK), expected)


def test_rotary_scores_depend_on_the_distance_only(rng):
    """With rope, moving a span keeps its score when its tokens move with it."""
    layer = layers.GlobalPointer(heads=1, head_size=4, tril_mask=False)
    token = rng.normal(size=(1, 1, 8)).astype("float32")
    scores = np.asarray(layer(np.repeat(token, 6, axis=1)))[0, 0]
    for shift in range(1, 4):
        np.testing.assert_allclose(np.diagonal(scores, shift), np.diagonal(scores, shift)[0], rtol=1e-5)


def test_the_keras_mask_is_the_padding(rng):
    ids = np.where(MASK, rng.integers(1, 20, MASK.shape), 0).astype("int32")
    token_ids = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(20, 8, mask_zero=True)(token_ids)
    pointer = layers.GlobalPointer(2, 4)
    model = keras.Model(token_ids, pointer(hidden))
    embedded = np.asarray(model.layers[1](ids))
    np.testing.assert_array_equal(np.asarray(model(ids)), np.asarray(pointer(embedded, mask=MASK)))


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("space", ["stream", "copy"])
def test_grows_as_a_dense_head(rng, k, space):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = built(layers.GlobalPointer(heads=2, head_size=4, tril_mask=False), x)
    input_space = Space.stream(k) if space == "stream" else Space.copy(k)
    big = assert_grows_exactly(layer, x, k, input_space, spread=1.0)
    assert (big.heads, big.head_size) == (2, 4)
    assert big.kernel.shape == (8 * k, 16)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"heads": 0, "head_size": 4}, r"GlobalPointer: `heads` must be a positive integer, got heads=0"),
        ({"heads": 2, "head_size": 2.5}, r"`head_size` must be a positive integer, got head_size=2.5"),
        ({"heads": 2, "head_size": 3}, r"rope rotates pairs, so `head_size` must be even, got head_size=3"),
    ],
)
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        layers.GlobalPointer(**arguments)


def test_a_non_sequence_input_is_refused():
    with pytest.raises(ValueError, match=r"GlobalPointer 'gp' reads a sequence \(batch, seq, features\)"):
        layers.GlobalPointer(2, 4, name="gp")(np.ones((2, 8), "float32"))
