"""EfficientGlobalPointer's span scores against loops in numpy (bert4keras's
formula: shared start/end vectors, a start and an end bias per type), growth
on its own, refusals."""

import keras
import numpy as np
import pytest
from test_global_pointer import rotate  # RoFormer's rotation, pair by pair

from kwiden import Space, layers
from kwiden.layers.spans import MASKED
from kwiden.testing import RTOL, assert_grows_exactly, randomize_weights

MASK = np.array([[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 0]], bool)


def reference(x, weights, heads, d, rope, tril_mask, mask):
    """Span by span: q_i · k_j / √d + (start bias of type h at i) + (end bias of type h at j)."""
    kernel, bias, type_kernel, type_bias = weights
    batch, n, _ = x.shape
    scores = np.empty((batch, heads, n, n))
    for b in range(batch):
        shared = [x[b, i] @ kernel + bias for i in range(n)]
        biases = [(p @ type_kernel + type_bias) / 2 for p in shared]  # [end_0, start_0, end_1, start_1, …]
        for h in range(heads):
            for i in range(n):
                for j in range(n):
                    q, k = shared[i][0::2], shared[j][1::2]
                    if rope:
                        q, k = rotate(q, i), rotate(k, j)
                    score = q @ k / np.sqrt(d) + biases[i][2 * h + 1] + biases[j][2 * h]
                    padded = mask is not None and not (mask[b, i] and mask[b, j])
                    scores[b, h, i, j] = MASKED if padded or (tril_mask and j < i) else score
    return scores


def assert_scores(actual, expected):
    actual = np.asarray(keras.ops.convert_to_numpy(actual), np.float64)
    masked = expected == MASKED
    np.testing.assert_array_equal(actual[masked], np.float32(MASKED))
    scale = np.abs(expected[~masked]).max()
    np.testing.assert_allclose(actual[~masked], expected[~masked], rtol=RTOL, atol=RTOL * scale)


def built(layer, x, seed=0):
    layer(x)
    return randomize_weights(layer, seed)


@pytest.mark.backends
@pytest.mark.parametrize("rope", [True, False])
@pytest.mark.parametrize("tril_mask", [True, False])
@pytest.mark.parametrize("padded", [True, False])
def test_scores_are_the_loops(rng, rope, tril_mask, padded):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = built(layers.EfficientGlobalPointer(heads=3, head_size=4, rope=rope, tril_mask=tril_mask), x)
    mask = MASK if padded else None
    weights = [np.asarray(w, np.float64) for w in layer.get_weights()]
    assert_scores(layer(x, mask=mask), reference(x.astype(np.float64), weights, 3, 4, rope, tril_mask, mask))


def test_without_bias(rng):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = built(layers.EfficientGlobalPointer(heads=2, head_size=3, rope=False, use_bias=False), x)
    kernel, type_kernel = (np.asarray(w, np.float64) for w in layer.get_weights())
    weights = [kernel, np.zeros(6), type_kernel, np.zeros(4)]
    assert_scores(layer(x, mask=MASK), reference(x.astype(np.float64), weights, 2, 3, False, True, MASK))


def test_its_weights_do_not_grow_with_the_types():
    """Why it is efficient: the per-type part is 2·heads wide, not heads·2·head_size."""
    efficient = built(layers.EfficientGlobalPointer(heads=10, head_size=64), np.ones((1, 3, 32), "float32"))
    plain = built(layers.GlobalPointer(heads=10, head_size=64), np.ones((1, 3, 32), "float32"))
    assert [tuple(w.shape) for w in efficient.weights] == [(32, 128), (128,), (128, 20), (20,)]
    assert sum(np.prod(w.shape) for w in efficient.weights) < sum(np.prod(w.shape) for w in plain.weights) / 4


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("space", ["stream", "copy"])
def test_grows_as_a_dense_head(rng, k, space):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = built(layers.EfficientGlobalPointer(heads=2, head_size=4, tril_mask=False), x)
    input_space = Space.stream(k) if space == "stream" else Space.copy(k)
    big = assert_grows_exactly(layer, x, k, input_space, spread=1.0)
    assert [tuple(w.shape) for w in big.weights] == [(8 * k, 8), (8,), (8, 4), (4,)]


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"heads": -1, "head_size": 4}, r"EfficientGlobalPointer: `heads` must be a positive integer, got heads=-1"),
        ({"heads": 2, "head_size": True}, r"`head_size` must be a positive integer, got head_size=True"),
        ({"heads": 2, "head_size": 5}, r"rope rotates pairs, so `head_size` must be even, got head_size=5"),
    ],
)
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        layers.EfficientGlobalPointer(**arguments)


def test_a_non_sequence_input_is_refused():
    with pytest.raises(ValueError, match=r"EfficientGlobalPointer 'egp' reads a sequence"):
        layers.EfficientGlobalPointer(2, 4, name="egp")(np.ones((2, 3, 4, 8), "float32"))
