"""Each layer grows exactly on its own, and serialises."""

import keras
import numpy as np
import pytest

from kwiden import layers
from kwiden.growth.expansion import UNCHANGED, Growth, Space
from kwiden.testing import assert_grows_exactly, randomize_weights


def hidden(rng, d=8, batch=2, length=5):
    return rng.normal(size=(batch, length, d)).astype("float32")


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("activation", ["gelu", "relu", "tanh", None])
def test_dense(rng, k, activation):
    layer = layers.ExpandableDense(6, activation=activation)
    layer.build((None, 8))
    randomize_weights(layer)
    big = assert_grows_exactly(layer, hidden(rng), k)
    assert big.units == 6 * k


def test_dense_output_space_follows_activation():
    assert layers.ExpandableDense(4, activation="relu").get_expanded_output_space(2) == Space.stream(2)
    assert layers.ExpandableDense(4, activation="gelu").get_expanded_output_space(2) == Space.copy(2)


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("rms, center", [(False, True), (True, False)])
@pytest.mark.parametrize("input_space", ["stream", "copy"])
def test_layer_normalization(rng, k, rms, center, input_space):
    layer = layers.ExpandableLayerNormalization(epsilon=1e-3, rms=rms, center=center)
    layer.build((None, None, 8))
    randomize_weights(layer)
    space = Space.stream(k) if input_space == "stream" else Space.copy(k)
    big = assert_grows_exactly(layer, hidden(rng), k, space)
    assert big.epsilon == pytest.approx(1e-3 * space.scale**2)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("mode", ["lookup", "position"])
def test_embedding(rng, k, mode):
    layer = layers.ExpandableEmbedding(20, 8, mode=mode)
    ids = rng.integers(0, 20, (2, 6)).astype("int32")
    layer(ids)
    randomize_weights(layer)
    big = assert_grows_exactly(layer, ids, k, UNCHANGED)
    assert big.output_dim == 8 * k


@pytest.mark.parametrize("k", [2, 3])
def test_embedding_reverse_gives_tied_logits_exactly(rng, k):
    layer = layers.ExpandableEmbedding(20, 8)
    layer.build()
    randomize_weights(layer)
    assert_grows_exactly(layer, hidden(rng), k, call_kwargs={"reverse": True})


def test_embedding_reverse_needs_stream_input():
    layer = layers.ExpandableEmbedding(20, 8, name="tied")
    with pytest.raises(ValueError, match="'tied'.*residual stream"):
        layer.get_expanded_output_space(2, Space.copy(2), reverse=True)


def test_embedding_rejects_unknown_mode():
    with pytest.raises(ValueError, match="`mode` must be one of"):
        layers.ExpandableEmbedding(5, 4, mode="rotary")


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_attention(rng, k, scaled, causal):
    layer = layers.ExpandableMultiHeadAttention(heads=2, head_size=3, scaled=scaled)
    x = hidden(rng)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    call_kwargs = {"attention_mask": mask, "use_causal_mask": causal}
    layer(x, **call_kwargs)
    randomize_weights(layer)
    big = assert_grows_exactly(layer, x, k, call_kwargs=call_kwargs)
    assert (big.heads, big.head_size) == (2, 3 * k)


def test_attention_padding_mask_hides_padded_keys(rng):
    layer = layers.ExpandableMultiHeadAttention(heads=2, head_size=4)
    x = hidden(rng, length=4)
    mask = np.array([[1, 1, 0, 0]] * 2, bool)
    y = keras.ops.convert_to_numpy(layer(x, attention_mask=mask))
    x_changed = x.copy()
    x_changed[:, 2:] = 100.0  # what padded keys hold must not matter
    y_changed = keras.ops.convert_to_numpy(layer(x_changed, attention_mask=mask))
    np.testing.assert_allclose(y[:, :2], y_changed[:, :2], rtol=1e-5)


def test_attention_dropout_only_in_training(rng):
    layer = layers.ExpandableMultiHeadAttention(heads=2, head_size=4, dropout=0.5)
    x = hidden(rng)
    inference = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_array_equal(inference, keras.ops.convert_to_numpy(layer(x, training=False)))
    assert not np.allclose(keras.ops.convert_to_numpy(layer(x, training=True)), inference)


def test_attention_manual_path_equals_fused_path(rng):
    layer = layers.ExpandableMultiHeadAttention(heads=2, head_size=4, dropout=1e-9)
    x = hidden(rng)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    fused = keras.ops.convert_to_numpy(layer(x, attention_mask=mask, use_causal_mask=True))
    manual = keras.ops.convert_to_numpy(layer(x, attention_mask=mask, use_causal_mask=True, training=True))
    np.testing.assert_allclose(manual, fused, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("glu", [False, True])
@pytest.mark.parametrize("activation", ["gelu", "relu", "silu"])
def test_feed_forward(rng, k, glu, activation):
    layer = layers.FeedForward(12, activation=activation, glu=glu)
    layer.build((None, None, 8))
    randomize_weights(layer)
    big = assert_grows_exactly(layer, hidden(rng), k)
    assert big.intermediate_size == 12 * k


@pytest.mark.parametrize("space", [Space.stream(2), UNCHANGED])
def test_bias_add(rng, space):
    layer = layers.BiasAdd()
    layer.build((None, 8))
    randomize_weights(layer)
    assert_grows_exactly(layer, hidden(rng), 2, space)


def test_select_token(rng):
    x = hidden(rng)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layers.SelectToken(1)(x)), x[:, 1])
    assert_grows_exactly(layers.SelectToken(0), x, 3)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("scaled", [True, False])
def test_attention_head_count_growth(rng, k, scaled):

    layer = layers.ExpandableMultiHeadAttention(heads=2, head_size=3, scaled=scaled)
    x = hidden(rng)
    call_kwargs = {"attention_mask": np.array([[1, 1, 1, 0, 0], [1] * 5], bool), "use_causal_mask": True}
    layer(x, **call_kwargs)
    randomize_weights(layer)
    big = assert_grows_exactly(layer, x, Growth(k, heads="count"), Space.stream(k), call_kwargs)
    assert (big.heads, big.head_size) == (2 * k, 3)


@pytest.mark.parametrize("ffn_factor", [1, 3])
def test_feed_forward_own_factor(rng, ffn_factor):

    layer = layers.FeedForward(12, activation="gelu", glu=True)
    layer.build((None, None, 8))
    randomize_weights(layer)
    big = assert_grows_exactly(layer, hidden(rng), Growth(2, ffn=ffn_factor))
    assert big.intermediate_size == 12 * ffn_factor


def test_rotary_embedding_scores_depend_on_relative_position_only(rng):
    rope = layers.RotaryEmbedding(head_size=8)
    q = np.tile(rng.normal(size=(1, 1, 1, 8)), (1, 6, 1, 1)).astype("float32")
    k = np.tile(rng.normal(size=(1, 1, 1, 8)), (1, 6, 1, 1)).astype("float32")
    rq, rk = (keras.ops.convert_to_numpy(rope(x))[0, :, 0] for x in (q, k))
    scores = rq @ rk.T
    np.testing.assert_allclose(scores[1, 0], scores[5, 4], rtol=1e-5)
    np.testing.assert_allclose(scores[0, 2], scores[3, 5], rtol=1e-5)
    np.testing.assert_allclose(rq[0], q[0, 0, 0], rtol=1e-6)  # position 0 is not rotated
    with pytest.raises(ValueError, match="head_size must be even"):
        layers.RotaryEmbedding(head_size=5)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("heads", ["size", "count"])
def test_rotary_attention_grows_exactly(rng, k, heads):
    layer = layers.ExpandableMultiHeadAttention(heads=2, head_size=4, rotary_base=100.0)
    x = hidden(rng)
    layer(x, use_causal_mask=True)
    randomize_weights(layer)
    assert_grows_exactly(layer, x, Growth(k, heads=heads), Space.stream(k), {"use_causal_mask": True})


def test_pair_space_copies_pairs():
    np.testing.assert_array_equal(Space(2, 1.0, group=2).source(4), [0, 1, 0, 1, 2, 3, 2, 3])


def test_grouped_query_attention_equals_repeated_key_value_heads(rng):
    gqa = layers.ExpandableMultiHeadAttention(heads=4, head_size=3, key_value_heads=2, dropout=1e-9)
    x = hidden(rng)
    fused = keras.ops.convert_to_numpy(gqa(x, use_causal_mask=True))
    manual = keras.ops.convert_to_numpy(gqa(x, use_causal_mask=True, training=True))  # repeats k and v
    np.testing.assert_allclose(manual, fused, rtol=1e-5, atol=1e-6)
    assert gqa.key_kernel.shape == (8, 2, 3) and gqa.query_kernel.shape == (8, 4, 3)
    with pytest.raises(ValueError, match=r"`heads` \(4\) must be a multiple of `key_value_heads` \(3\)"):
        layers.ExpandableMultiHeadAttention(heads=4, head_size=3, key_value_heads=3)


def test_relative_position_bias_buckets():
    bias = layers.RelativePositionBias(heads=1, num_buckets=8, max_distance=16)
    buckets = keras.ops.convert_to_numpy(bias.buckets(20))
    assert buckets[0, 0] == 0 and buckets[5, 5] == 0  # same position
    assert buckets[0, 1] != buckets[1, 0]  # bidirectional: direction matters
    assert buckets[0, 1] == buckets[7, 8]  # only the distance matters
    assert buckets.max() <= 7 and buckets[0, 19] == buckets[0, 18]  # far distances share a bucket
    bias.build()
    randomize_weights(bias)
    table = keras.ops.convert_to_numpy(bias.embeddings)
    values = keras.ops.convert_to_numpy(bias(np.ones((2, 20), "int32")))
    np.testing.assert_array_equal(values[0, 0], table[buckets, 0])
