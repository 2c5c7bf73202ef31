"""The learned depth operator (LiGO): it starts as the exact growth, learns
only its mix on the loss, leaves the source alone, and refuses width growth."""

import keras
import numpy as np
import pytest

import kwiden
from kwiden.growth.learned import DepthOperator, learn_depth_operator
from kwiden.testing import assert_exact, numpy_outputs, padded_batch

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def causal_batches(count, vocab_size=97, seed=0):
    ids = np.random.default_rng(seed).integers(1, vocab_size, (count, 4, 10))
    return [(window[:, :-1], window[:, 1:]) for window in ids]


@pytest.mark.backends
def test_the_operator_starts_as_the_exact_growth_and_learns_only_its_mix(gpt):
    small = gpt(num_hidden_layers=2)
    big = kwiden.grow(small, depth=2)
    inputs = padded_batch(segments=False)
    operator = DepthOperator(small, big)
    # one (4 blocks × 2 blocks) mix for each kind of block weight, and no other weight
    kinds = {
        v.path.removeprefix("Transformer-0-") for v in small.trainable_variables if v.path.startswith("Transformer-0-")
    }
    assert len(operator.trainable_variables) == len(kinds) == 16
    assert all(tuple(v.shape) == (4, 2) for v in operator.trainable_variables)
    np.testing.assert_allclose(numpy_outputs(operator, inputs), numpy_outputs(big, inputs), rtol=1e-6, atol=1e-6)

    source = [keras.ops.convert_to_numpy(w).copy() for w in small.weights]
    grown = {v.path: keras.ops.convert_to_numpy(v).copy() for v in big.trainable_variables}
    batches = causal_batches(12)
    losses = learn_depth_operator(small, big, batches, LOSS, learning_rate=0.05)
    assert len(losses) == 12 and losses[-1] < losses[0]
    for before, after in zip(source, small.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(after), before)
    # outside the blocks nothing moves; in them, each weight is its grown value plus the learned mix
    after = {v.path: keras.ops.convert_to_numpy(v) for v in big.trainable_variables}
    changed = {path for path, value in grown.items() if not np.array_equal(after[path], value)}
    assert changed and all(p.startswith("Transformer-") for p in changed)
    # the grown model now computes what the learned operator computes, and lower on the batches it learned on
    big.compile(loss=LOSS)
    x, y = batches[0]
    assert big.evaluate(x, y, verbose=0) < losses[0]


def test_a_growth_that_widens_is_refused(gpt):
    small = gpt(num_hidden_layers=1)
    big = kwiden.grow(small, 2, depth=2)
    with pytest.raises(
        ValueError, match=r"needs a depth-only growth: 'Transformer-0-.*' .* Grow width and depth at different points"
    ):
        DepthOperator(small, big)


def test_setting_the_weights_keeps_an_unmoved_mix_exact(gpt):
    small = gpt(num_hidden_layers=1)
    big = kwiden.grow(small, depth=3)
    learn_depth_operator(small, big, causal_batches(2), LOSS, learning_rate=0.0)  # a rate of 0: the mix stays 0
    assert_exact(small, big, padded_batch(segments=False))


def test_a_deeper_growth_mixes_every_block_of_the_small_model(gpt):
    small = gpt(num_hidden_layers=2)
    big = kwiden.grow(small, depth=3)
    operator = DepthOperator(small, big)
    assert all(tuple(v.shape) == (6, 2) for v in operator.trainable_variables)
    batches = causal_batches(12)
    losses = learn_depth_operator(small, big, batches, LOSS, learning_rate=0.05, accum_steps=2)
    assert losses[-1] < losses[0]
    big.compile(loss=LOSS)
    assert big.evaluate(*batches[0], verbose=0) < losses[0]


def test_under_a_mixed_policy_the_mix_is_taken_on_the_stored_weights(gpt):
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        small = gpt(num_hidden_layers=1)
        big = kwiden.grow(small, depth=2)
        grown = [keras.ops.convert_to_numpy(v).copy() for v in big.trainable_variables]
        losses = learn_depth_operator(small, big, causal_batches(2), LOSS, learning_rate=0.0)
        assert all(np.isfinite(losses))
        for before, variable in zip(grown, big.trainable_variables):  # float32 as stored, not rounded to bfloat16
            assert variable.dtype == "float32"
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), before)
        losses = learn_depth_operator(small, big, causal_batches(1) * 6, LOSS, learning_rate=0.05)  # one batch, learned
        assert losses[-1] < losses[0]
    finally:
        keras.config.set_dtype_policy(policy)


def test_misuse_is_refused_saying_what_to_pass(gpt):
    small = gpt(num_hidden_layers=1)
    big = kwiden.grow(small, depth=2)
    with pytest.raises(ValueError, match=r"blocks of `small` \(2\) into those of `big` \(1\), which must be deeper"):
        learn_depth_operator(big, small, causal_batches(1), LOSS)
    result = kwiden.grow(small, depth=2, optimizer=keras.optimizers.Adam())
    with pytest.raises(ValueError, match=r"`big` must be a Keras model, got GrowthResult: pass its .model"):
        learn_depth_operator(small, result, causal_batches(1), LOSS)
    with pytest.raises(ValueError, match=r"3 batches do not make whole updates of accum_steps=2"):
        learn_depth_operator(small, big, causal_batches(3), LOSS, accum_steps=2)
    fresh = gpt(num_hidden_layers=2)  # deeper, but not grown from small: its blocks are not the exact growth
    with pytest.raises(ValueError, match=r"model '.*' was not grown by kwiden.grow: pass kwiden.grow\(small, depth"):
        learn_depth_operator(small, fresh, causal_batches(1), LOSS)
    with pytest.raises(ValueError, match=r"was grown from another model"):
        learn_depth_operator(gpt(num_hidden_layers=1, seed=1), big, causal_batches(1), LOSS)
