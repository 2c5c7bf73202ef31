import fractions

import numpy as np
import pytest

from kwiden.growth.expansion import IN, OUT, UNCHANGED, Space, expand


def test_space_source_interleaves_copies():
    np.testing.assert_array_equal(Space(2).source(3), [0, 0, 1, 1, 2, 2])
    np.testing.assert_allclose(Space.stream(3).carry([1.0, 2.0]), np.array([1, 1, 1, 2, 2, 2]) / np.sqrt(3), rtol=1e-15)


def test_stream_is_an_isometry(rng):
    a = rng.normal(size=10)
    for k in (2, 3, 4):
        assert np.linalg.norm(Space.stream(k).carry(a)) == pytest.approx(np.linalg.norm(a))


@pytest.mark.parametrize(
    "s_in, s_out, kernel_factor, bias_factor",
    [
        # The seed's table for k=2, with its FFN second bias corrected (docs/widening.md#linear-maps).
        (Space.stream(2), Space.stream(2), 1 / 2, 2**-0.5),  # residual Dense
        (Space.stream(2), Space.copy(2), 2**-0.5, 1.0),  # FFN first Dense
        (Space.copy(2), Space.stream(2), 1 / (2 * 2**0.5), 2**-0.5),  # FFN second Dense
    ],
)
def test_dense_factors_match_design_table(rng, s_in, s_out, kernel_factor, bias_factor):
    w, b = rng.normal(size=(3, 4)), rng.normal(size=4)
    big_w = expand(w, [(s_in, IN), (s_out, OUT)])
    big_b = expand(b, [(s_out, OUT)])
    np.testing.assert_allclose(big_w, np.repeat(np.repeat(w, 2, 0), 2, 1) * kernel_factor)
    np.testing.assert_allclose(big_b, np.repeat(b, 2) * bias_factor)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_expanded_dense_maps_carried_input_to_carried_output(rng, k):
    w, b = rng.normal(size=(5, 6)), rng.normal(size=6)
    x = rng.normal(size=(3, 5))
    s_in, s_out = Space.stream(k), Space.copy(k)
    y = s_in.carry(x) @ expand(w, [(s_in, IN), (s_out, OUT)]) + expand(b, [(s_out, OUT)])
    np.testing.assert_allclose(y, s_out.carry(x @ w + b), rtol=1e-12)


def test_unchanged_axes_are_left_alone(rng):
    w = rng.normal(size=(7, 3))
    np.testing.assert_array_equal(expand(w, [None, (UNCHANGED, OUT)]), w)


def test_expand_keeps_dtype_and_rejects_wrong_axes(rng):
    w = rng.normal(size=(2, 3)).astype("float32")
    assert expand(w, [None, (Space.stream(2), OUT)]).dtype == np.float32
    with pytest.raises(ValueError, match="names 1 axes but the weight has shape"):
        expand(w, [None])
    with pytest.raises(ValueError, match="Axis role"):
        expand(w, [None, (Space(2), "sideways")])


def test_spread_keeps_sums_and_needs_a_generator():
    from kwiden.growth.expansion import spread_weights

    source = np.repeat(np.arange(2), 3)
    alpha = spread_weights((6, 4), 0, source, spread=2.0, rng=np.random.default_rng(0))
    np.testing.assert_allclose(alpha.reshape(2, 3, 4).sum(1), np.ones((2, 4)))
    assert np.ptp(alpha) > 0.1
    with pytest.raises(ValueError, match="`spread` needs a random generator"):
        spread_weights((6, 4), 0, source, spread=1.0)


def test_spread_over_unequal_copies_keeps_sums():
    from kwiden.growth.expansion import spread_weights

    source = np.array([0, 0, 1, 2, 2, 2, 3])
    alpha = spread_weights((4, 7), 1, source, spread=1.5, rng=np.random.default_rng(0))
    sums = np.stack([alpha[:, source == j].sum(1) for j in range(4)], 1)
    np.testing.assert_allclose(sums, np.ones((4, 4)))
    np.testing.assert_array_equal(alpha[:, 2], np.ones(4))  # one copy: nothing to split
    assert np.ptp(alpha[:, 3:6]) > 0.1


@pytest.mark.parametrize("spread", [0.0, 1.0])
def test_expand_with_spread_is_exact(rng, spread):
    w, x = rng.normal(size=(5, 6)), rng.normal(size=(3, 5))
    s_in, s_out = Space.stream(3), Space.stream(3)
    big = expand(w, [(s_in, IN), (s_out, OUT)], spread, np.random.default_rng(1))
    np.testing.assert_allclose(s_in.carry(x) @ big, s_out.carry(x @ w), rtol=1e-12)


@pytest.mark.parametrize("k, spread", [(2, 2.0), (3, 1.0)])
def test_spread_variance_factor_is_what_the_split_adds_to_a_copys_mean_square_signal(k, spread):
    from kwiden.growth.expansion import spread_variance_factor

    rng = np.random.default_rng(0)
    rows, outputs = 4000, 64
    w, delta = rng.normal(size=(rows, outputs)), rng.normal(size=outputs)
    space = Space.copy(k)
    split = expand(w, [(space, IN), None], spread, np.random.default_rng(1))
    signal = split @ delta  # the backward signal each copy of a row gets from this reader
    plain = (w @ delta) / k  # what every copy gets under equal splits
    # E[signal²] = plain² + spread²·(k − 1)/(3k)·Σ_p (w·δ)²/k², row by row (docs/optimizer-state.md#under-a-spread)
    added = ((w * delta) ** 2).sum(1) / k**2
    noise = np.repeat(added, k) * spread**2 * (k - 1) / (3 * k)
    assert np.mean(signal**2) == pytest.approx(np.mean(np.repeat(plain, k) ** 2 + noise), rel=0.03)
    # Signals that do not line up, as here, have Σ_p (w·δ)² = E[(w·δ)²] over rows: the factor kwiden uses.
    factor = spread_variance_factor([None, (space, OUT)], (3, rows), spread)
    assert factor.shape == (1, rows * k)
    assert np.mean(signal**2) / np.mean(plain**2) == pytest.approx(float(factor.max()), rel=0.05)


def test_spread_variance_factor_raises_only_the_tensors_that_write_a_split_space():
    from kwiden.growth.expansion import spread_variance_factor

    stream, copies = Space.stream(2), Space.copy(2)
    assert spread_variance_factor([(stream, IN), None], (4, 3), 2.0) == 1.0  # reads it: gradients unchanged
    assert spread_variance_factor([(stream, IN), (copies, OUT)], (4, 3), 0.0) == 1.0  # plain copies
    factor = spread_variance_factor([(stream, IN), (copies, OUT)], (4, 3), 2.0)
    np.testing.assert_allclose(np.broadcast_to(factor, (8, 6)), np.full((8, 6), 1 + 4 / 6))
    uneven = spread_variance_factor([(Space(fractions.Fraction(4, 3)), OUT)], (3,), 3.0)
    np.testing.assert_allclose(uneven, [2.5, 2.5, 1.0, 1.0])  # one copy: α = 1, nothing added
