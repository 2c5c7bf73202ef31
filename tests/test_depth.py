"""Depth growth: blocks found by their residual merges, copied, renumbered."""

import keras
import numpy as np
import pytest

import kwiden
from kwiden import GrowthError
from kwiden.layers import ExpandableDense
from kwiden.testing import assert_exact, padded_batch


@pytest.mark.backends
@pytest.mark.parametrize("k, depth, num_layers", [(1, 2, None), (2, 2, None), (2, None, 3), (1, None, 5)])
def test_pre_ln_depth_growth_is_exact(gpt, k, depth, num_layers):
    small = gpt()
    big = kwiden.grow(small, k, depth=depth, num_layers=num_layers, spread=0.5, seed=1)
    blocks = num_layers or 2 * depth
    names = [layer.name for layer in big.layers]
    assert [f"Transformer-{i}-FeedForward" in names for i in range(blocks + 1)] == [True] * blocks + [False]
    assert_exact(small, big, padded_batch(segments=False))


def test_new_blocks_are_copies_with_zero_output_projections(gpt):
    small = gpt()
    big = kwiden.grow(small, 1, depth=2)
    copy, source = big.get_layer("Transformer-1-FeedForward"), small.get_layer("Transformer-0-FeedForward")
    np.testing.assert_array_equal(copy.inner_kernel.numpy(), source.inner_kernel.numpy())
    assert not np.any(copy.output_kernel.numpy()) and not np.any(copy.output_bias.numpy())
    np.testing.assert_array_equal(
        big.get_layer("Transformer-2-FeedForward").output_kernel.numpy(),
        small.get_layer("Transformer-1-FeedForward").output_kernel.numpy(),
    )


def test_post_ln_depth_growth_is_approximate_and_says_so(bert):
    small = bert(with_mlm=True)
    with pytest.raises(GrowthError, match=r"Transformer blocks \[0, 1\] are not Pre-LN.*allow_approximate=True"):
        kwiden.grow(small, 2, depth=2)
    with pytest.warns(UserWarning, match="the grown model is approximate"):
        big = kwiden.grow(small, 2, depth=2, allow_approximate=True, check=padded_batch())
    report = big.growth_report
    assert not report.ok  # LayerNorm on the stream: no exact identity block
    deviation = max(o.max_relative_error for o in report.outputs)
    assert 1e-4 < deviation < 2.0, str(report)


def test_depth_argument_errors(gpt):
    with pytest.raises(ValueError, match=r"`depth` \(a factor\) or `num_layers` \(a total\), not both"):
        kwiden.grow(gpt(), 2, depth=2, num_layers=4)
    with pytest.raises(ValueError, match=r"`num_layers` must be an integer >= the model's 2 blocks"):
        kwiden.grow(gpt(), 2, num_layers=1)
    with pytest.raises(ValueError, match=r"`depth` must be a positive integer"):
        kwiden.grow(gpt(), 2, depth=0)
    x_in = keras.Input((None, 8))
    with pytest.raises(GrowthError, match=r"Depth growth needs residual blocks"):
        kwiden.grow(keras.Model(x_in, ExpandableDense(8)(x_in)), 2, depth=2)
