"""Growth that training can continue from: exact symmetry breaking, growth
scales as learning-rate multipliers, and grown optimizer state."""

import keras
import numpy as np
import pytest

import kwiden
from kwiden import optimizers
from kwiden.testing import numpy_outputs, padded_batch

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

# Plain copies, grown state and per-tensor multipliers: the growth whose training
# follows the small model's trajectory (docs/optimizer-state.md), not grow's default.
FOLLOW = dict(spread=0.0, optimizer_state="grown", scale_learning_rates=True, relax_learning_rates=0)


def lm_batch(seed=3):
    ids = padded_batch(segments=False, lengths=(9,) * 8, seed=seed)
    return ids[:, :-1], ids[:, 1:]


def copy_gap(hidden, k):
    """How far apart the k copies of each hidden unit are."""
    groups = hidden.reshape(*hidden.shape[:-1], -1, k)
    return float(np.max(np.abs(groups - groups[..., :1])))


def hidden_states(model, x):
    probe = keras.Model(model.input, model.get_layer("Output-Norm").output)
    return keras.ops.convert_to_numpy(probe(x))


@pytest.mark.parametrize("k", [2, 3])
def test_spread_is_exact_right_after_growth(gpt, k):
    small = gpt()
    big = kwiden.grow(small, k, spread=1.0, seed=0)
    report = kwiden.verify(small, big, padded_batch(segments=False))
    assert report.ok, str(report)
    plain = kwiden.grow(small, k, spread=0.0)
    differs = [
        not np.allclose(a.numpy(), b.numpy()) for a, b in zip(big.weights, plain.weights) if a.path.endswith("kernel")
    ]
    assert all(differs)  # every kernel reads its inputs through unequal splits


def test_spread_breaks_the_symmetry_after_one_step(gpt):
    small = gpt()
    x, y = lm_batch()
    gaps = {}
    for spread in (0.0, 1.0):
        big = kwiden.grow(small, 2, spread=spread, seed=0)
        assert copy_gap(hidden_states(big, x), 2) < 1e-5  # copies equal at growth
        big.compile(optimizers.Adam(1e-2), LOSS, run_eagerly=True)
        big.train_on_batch(x, y)
        gaps[spread] = copy_gap(hidden_states(big, x), 2)
    assert gaps[0.0] < 1e-5  # plain copies train as one: the big model is the small one
    assert gaps[1.0] > 1e-2


def test_spread_is_reproducible_and_rejects_negative_values(gpt):
    small = gpt()
    a = kwiden.grow(small, 2, spread=0.5, seed=7)
    b = kwiden.grow(small, 2, spread=0.5, seed=7)
    for x, y in zip(a.weights, b.weights):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    with pytest.raises(
        ValueError,
        match=r"`spread` must be a number from 0 to 100 \(exact symmetry breaking, of order 1; 0: plain copies",
    ):
        kwiden.grow(small, 2, spread=-1.0)


def test_growth_scales_are_the_design_factors(bert):
    k = 2
    scales = kwiden.growth_scales(bert(), k)
    assert scales["Embedding-Token/embeddings"] == pytest.approx(k**-0.5)
    assert scales["Transformer-0-MultiHeadSelfAttention/query_kernel"] == pytest.approx(k**-0.75)
    assert scales["Transformer-0-MultiHeadSelfAttention/output_kernel"] == pytest.approx(1 / k)
    assert scales["Transformer-0-FeedForward/inner_kernel"] == pytest.approx(k**-0.5)
    assert scales["Transformer-0-FeedForward/inner_bias"] == pytest.approx(1.0)
    assert scales["Transformer-0-FeedForward/output_kernel"] == pytest.approx(k**-1.5)
    assert scales["Transformer-0-FeedForward-Norm/gamma"] == pytest.approx(k**-0.5)


def train_small(gpt, make_optimizer, steps=3):
    small = gpt()
    small.compile(make_optimizer(), LOSS, run_eagerly=True)
    for seed in range(steps):
        small.train_on_batch(*lm_batch(seed))
    return small


def step_error(small, big, x, y):
    """After one identical step on both, how far the big model is from the small one."""
    small.train_on_batch(x, y)
    big.train_on_batch(x, y)
    expected = numpy_outputs(small, x)[0]
    return float(np.max(np.abs(numpy_outputs(big, x)[0] - expected)) / np.max(np.abs(expected)))


@pytest.mark.parametrize(
    "make_optimizer, steps",
    [
        (lambda: optimizers.Adam(3e-3), 3),
        (lambda: optimizers.Adam(3e-3, epsilon=1e-3), 3),  # ε must shrink with the grown v
        (lambda: optimizers.AdamW(3e-3, weight_decay=0.5), 3),  # decay at the base rate
        (lambda: optimizers.SGDM(0.05), 3),
        (lambda: optimizers.SGDM(0.05, weight_decay=0.5), 3),
        (lambda: optimizers.RAdam(3e-3), 3),  # in its momentum (SGD-like) steps
        (lambda: optimizers.RAdam(3e-3), 6),  # rectified Adam steps
    ],
    ids=["Adam", "Adam-eps", "AdamW", "SGDM", "SGDM-decay", "RAdam-early", "RAdam"],
)
def test_grown_optimizer_continues_the_small_models_trajectory(gpt, make_optimizer, steps):
    x, y = lm_batch(seed=11)
    errors = {}
    for mode in ("grown", "fresh"):
        small = train_small(gpt, make_optimizer, steps)
        big, grown_optimizer = kwiden.grow(small, 2, optimizer=small.optimizer, **FOLLOW)
        assert type(grown_optimizer) is type(small.optimizer)
        assert int(grown_optimizer.iterations) == int(small.optimizer.iterations) == steps
        big.compile(grown_optimizer if mode == "grown" else make_optimizer(), LOSS, run_eagerly=True)
        errors[mode] = step_error(small, big, x, y)
    assert errors["grown"] < 1e-4, errors
    assert errors["fresh"] > 100 * errors["grown"], errors


def test_grown_slots_are_copied_and_scaled(gpt):
    small = train_small(gpt, lambda: optimizers.Adam(3e-3))
    _, grown = kwiden.grow(small, 2, optimizer=small.optimizer, **FOLLOW)
    path = "Transformer-0-FeedForward/output_kernel"  # (inner, hidden): c = 2^-1.5, K = 4
    index = {v.path: i for i, v in enumerate(small.optimizer._trainable_variables)}[path]
    big_index = {v.path: i for i, v in enumerate(grown._trainable_variables)}[path]
    m = small.optimizer.momentums[index].numpy()
    v = small.optimizer.velocities[index].numpy()
    gradient_scale = 1 / (2**-1.5 * 4)
    np.testing.assert_allclose(grown.momentums[big_index].numpy()[::2, ::2], m * gradient_scale, rtol=1e-6)
    np.testing.assert_allclose(grown.momentums[big_index].numpy()[1::2, 1::2], m * gradient_scale, rtol=1e-6)
    np.testing.assert_allclose(grown.velocities[big_index].numpy()[::2, 1::2], v * gradient_scale**2, rtol=1e-6)
    variable = grown._trainable_variables[big_index]
    assert grown.growth_of(variable) == (pytest.approx(2**-1.5), 4)
    assert grown.step_scale(variable) == pytest.approx(2**-1.5)
    assert grown.epsilon_of(variable) == pytest.approx(1e-7 / (2**-1.5 * 4))
    assert grown._multiplier_of(variable) == 1.0  # the user's own multipliers stay


@pytest.mark.parametrize(
    "make, slots",
    [
        (lambda: keras.optimizers.Adam(3e-3), {"_momentums": 1, "_velocities": 2}),
        (lambda: keras.optimizers.SGD(0.05, momentum=0.9), {"momentums": 1}),
    ],
    ids=["Adam", "SGD"],
)
def test_keras_optimizer_state_grows_too(gpt, make, slots):
    small = train_small(gpt, make)
    _, grown = kwiden.grow(small, 2, optimizer=small.optimizer, optimizer_state="grown", spread=2.0, seed=0)
    assert type(grown) is type(small.optimizer) and int(grown.iterations) == 3
    path = "Transformer-0-MultiHeadSelfAttention/query_kernel"  # c = 2^-0.75, K = 4
    small_index = {v.path: i for i, v in enumerate(small.optimizer._trainable_variables)}[path]
    big_index = {v.path: i for i, v in enumerate(grown._trainable_variables)}[path]
    for name, power in slots.items():
        source = getattr(small.optimizer, name)[small_index].numpy()
        target = getattr(grown, name)[big_index].numpy()
        expected = np.repeat(np.repeat(source, 2, 0), 2, 2) * (1 / (2**-0.75 * 4)) ** power
        expected *= (1 + 2.0**2 / 6) ** (power - 1)  # the spread's share of a second moment (Keras' Adam too)
        np.testing.assert_allclose(target, expected, rtol=1e-6)


def test_unknown_optimizer_state_is_refused(gpt):
    small = train_small(gpt, lambda: keras.optimizers.Adagrad(0.01), steps=1)
    with pytest.raises(ValueError, match=r"cannot grow the state of Adagrad"):
        kwiden.grow(small, 2, optimizer=small.optimizer)


def test_loss_scale_optimizer_is_refused_with_advice(gpt):
    small = gpt()
    wrapped = keras.optimizers.LossScaleOptimizer(optimizers.Adam())
    with pytest.raises(ValueError, match=r"Pass the inner optimizer"):
        kwiden.grow(small, 2, optimizer=wrapped)


def test_depth_growth_carries_the_optimizer_too(gpt):
    small = train_small(gpt, lambda: optimizers.Adam(3e-3))
    big, grown = kwiden.grow(small, 2, depth=2, optimizer=small.optimizer, **FOLLOW)
    paths = {v.path: i for i, v in enumerate(grown._trainable_variables)}
    small_paths = {v.path: i for i, v in enumerate(small.optimizer._trainable_variables)}
    source = small.optimizer.momentums[small_paths["Transformer-1-FeedForward/inner_kernel"]].numpy()
    moved = grown.momentums[paths["Transformer-2-FeedForward/inner_kernel"]].numpy()  # block 1 is now 2
    np.testing.assert_allclose(moved[::2, ::2], source * (1 / (2**-0.5 * 4)), rtol=1e-6)
    copy = grown.momentums[paths["Transformer-1-FeedForward/inner_kernel"]].numpy()  # copy of block 0
    original = grown.momentums[paths["Transformer-0-FeedForward/inner_kernel"]].numpy()
    np.testing.assert_array_equal(copy, original)
    assert not np.any(grown.momentums[paths["Transformer-1-FeedForward/output_kernel"]].numpy())  # fresh
    assert grown.growth_of(grown._trainable_variables[paths["Transformer-3-FeedForward/output_kernel"]]) == (
        pytest.approx(2**-1.5),
        4,
    )
    big.compile(grown, LOSS, run_eagerly=True)
    big.train_on_batch(*lm_batch())


def slots_of(optimizer, path):
    index = {v.path: i for i, v in enumerate(optimizer._trainable_variables)}[path]
    return optimizer.momentums[index].numpy(), optimizer.velocities[index].numpy()


def test_source_state_keeps_the_original_slice_and_zeroes_the_copies(gpt):
    small = train_small(gpt, lambda: optimizers.Adam(3e-3))
    path = "Transformer-0-FeedForward/output_kernel"  # (inner, hidden), both axes grow
    _, grown = kwiden.grow(small, 2, optimizer=small.optimizer, optimizer_state="grown", spread=0.0)
    _, source = kwiden.grow(small, 2, optimizer=small.optimizer, optimizer_state="source", spread=0.0)
    for full, kept in zip(slots_of(grown, path), slots_of(source, path)):
        np.testing.assert_array_equal(kept[::2, ::2], full[::2, ::2])  # the original slice
        assert np.all(full[1::2, :] != 0) and np.all(full[::2, 1::2] != 0)
        assert not np.any(kept[1::2, :]) and not np.any(kept[:, 1::2])  # every new copy
    _, zero = kwiden.grow(small, 2, optimizer=small.optimizer, optimizer_state="zero")
    assert not any(np.any(s) for s in slots_of(zero, path)) and int(zero.iterations) == 3


def test_grown_v_grows_the_second_moments_and_zeroes_the_first(gpt):
    small = train_small(gpt, lambda: optimizers.Adam(3e-3))
    path = "Transformer-0-FeedForward/output_kernel"
    _, grown = kwiden.grow(small, 2, optimizer=small.optimizer, optimizer_state="grown", spread=0.0)
    _, default = kwiden.grow(small, 2, optimizer=small.optimizer, spread=0.0)  # grow's default is grown_v
    (_, velocity), (momentum, grown_v) = slots_of(grown, path), slots_of(default, path)
    np.testing.assert_array_equal(grown_v, velocity)
    assert np.all(grown_v != 0) and not np.any(momentum)
    assert int(default.iterations) == 3


def test_a_spread_raises_the_grown_second_moments_by_what_it_adds_to_the_gradients(gpt):
    """Every tensor of a GPT writes a split space (the stream, heads or FFN units), so each second moment is the
    equal-split one times 1 + spread²/6 for two copies, and the first moments are the equal-split ones."""
    small = train_small(gpt, lambda: optimizers.Adam(3e-3))
    _, split = kwiden.grow(small, 2, optimizer=small.optimizer, optimizer_state="grown", spread=2.0, seed=0)
    _, plain = kwiden.grow(small, 2, optimizer=small.optimizer, optimizer_state="grown", spread=0.0)
    for variable in split._trainable_variables:
        (momentum, velocity), (plain_momentum, plain_velocity) = (
            slots_of(split, variable.path),
            slots_of(plain, variable.path),
        )
        np.testing.assert_array_equal(momentum, plain_momentum)
        np.testing.assert_allclose(velocity, plain_velocity * (1 + 4 / 6), rtol=1e-6, err_msg=variable.path)
        assert np.any(velocity)


def test_grown_v_gives_a_new_blocks_zeroed_weights_the_second_moments_they_copy(gpt):
    small = train_small(gpt, lambda: optimizers.Adam(3e-3))
    big, grown = kwiden.grow(small, depth=2, optimizer=small.optimizer)
    fresh = "Transformer-1-FeedForward/output_kernel"  # the copy of block 0, its output zeroed
    assert not np.any(big.get_layer("Transformer-1-FeedForward").output_kernel.numpy())
    momentum, velocity = slots_of(grown, fresh)
    np.testing.assert_array_equal(velocity, slots_of(small.optimizer, "Transformer-0-FeedForward/output_kernel")[1])
    assert np.all(velocity != 0) and not np.any(momentum)
    _, old = kwiden.grow(small, depth=2, optimizer=small.optimizer, optimizer_state="grown")
    assert not np.any(slots_of(old, fresh)[1])  # "grown" leaves a fresh weight's state at zero


def test_a_fresh_blocks_weights_start_with_zero_first_moments(gpt):
    small = train_small(gpt, lambda: optimizers.Adam(3e-3))
    options = dict(depth=2, optimizer=small.optimizer, new_blocks="fresh", allow_approximate=True)
    with pytest.warns(UserWarning, match="approximate"):
        _, grown = kwiden.grow(small, **options)
    for weight in ("FeedForward/inner_kernel", "FeedForward/output_kernel"):
        momentum, velocity = slots_of(grown, f"Transformer-1-{weight}")
        np.testing.assert_array_equal(velocity, slots_of(small.optimizer, f"Transformer-0-{weight}")[1])
        assert not np.any(momentum)
    with pytest.warns(UserWarning, match="approximate"):
        _, old = kwiden.grow(small, **options, optimizer_state="grown")
    assert not np.any(slots_of(old, "Transformer-1-FeedForward/inner_kernel")[1])  # drawn, not copied: no state


def test_rewarm_gives_the_new_copies_a_rising_learning_rate(gpt):
    small = train_small(gpt, lambda: optimizers.Adam(3e-3))
    big, grown = kwiden.grow(small, 2, optimizer=small.optimizer, rewarm=4, scale_learning_rates=False, seed=0)
    assert grown.slice_warmup == (3, 4)  # from the 3 updates done, over 4
    inner, hidden = small.get_layer("Transformer-0-FeedForward").output_kernel.shape
    assert grown.slice_multipliers["Transformer-0-FeedForward/output_kernel"] == [
        [1.0, 0.0] * inner,
        [1.0, 0.0] * hidden,
    ]
    assert grown.slice_multipliers["Embedding-Token/embeddings"] == [None, [1.0, 0.0] * hidden]
    before = big.get_layer("Transformer-0-FeedForward").output_kernel.numpy()
    big.compile(grown, LOSS, run_eagerly=True)
    big.train_on_batch(*lm_batch())  # update 4: the copies at 1/4 of the rate
    moved = big.get_layer("Transformer-0-FeedForward").output_kernel.numpy() - before
    original, copy = np.abs(moved[::2, ::2]), np.abs(moved[1::2, ::2])
    assert np.all(copy > 0) and np.median(copy / original) == pytest.approx(0.25, rel=1e-3)  # (4 - 3) / 4
    restored = optimizers.Adam.from_config(grown.get_config())
    assert restored.slice_warmup == (3, 4) and restored.slice_multipliers == grown.slice_multipliers


def test_rewarm_of_a_deeper_model_rewarms_its_new_blocks(gpt):
    small = train_small(gpt, lambda: optimizers.Adam(3e-3))
    _, grown = kwiden.grow(small, 1, depth=2, optimizer=small.optimizer, rewarm=10)
    # Block 1 is the copy of block 0: all of it re-warms; the originals (now 0 and 2) keep their rate.
    hidden = small.get_layer("Transformer-0-FeedForward").inner_kernel.shape[0]
    assert grown.slice_multipliers["Transformer-1-FeedForward/inner_kernel"] == [[0.0] * hidden, None]
    assert not any(path.startswith(("Transformer-0-", "Transformer-2-")) for path in grown.slice_multipliers)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(optimizer_state="copies"),
            r"`optimizer_state` must be one of grown, grown_v, source, zero \(what the grown optimizer slots hold\)",
        ),
        (dict(rewarm=-1), r"`rewarm` must be a whole number of at least 0 \(updates over which .*\), got rewarm=-1\."),
        (dict(rewarm=2.5), r"`rewarm` must be a whole number of at least 0 .*got rewarm=2\.5\."),
    ],
)
def test_bad_optimizer_options(gpt, kwargs, message):
    small = gpt()
    with pytest.raises(ValueError, match=message):
        kwiden.grow(small, 2, optimizer=optimizers.Adam(), **kwargs)


@pytest.mark.backends
def test_the_small_optimizer_still_works_after_the_big_model_trains(gpt):
    """The grown optimizer gets a copy of the step count: on JAX, sharing the
    buffer let the big model's training donate (delete) the small one's."""
    small = train_small(gpt, lambda: optimizers.Adam(3e-3), steps=2)
    big, grown = kwiden.grow(small, 2, optimizer=small.optimizer)
    big.compile(grown, LOSS)
    big.fit(*lm_batch(), verbose=0)
    assert int(small.optimizer.iterations) == 2 and int(grown.iterations) == 3
    small.train_on_batch(*lm_batch())
    assert int(small.optimizer.iterations) == 3


def test_optimizer_settings_without_an_optimizer_are_refused(gpt):
    with pytest.raises(ValueError, match=r"`rewarm=5` says how to grow an optimizer, and none was given: pass"):
        kwiden.grow(gpt(), 2, rewarm=5)
    with pytest.raises(ValueError, match=r"`optimizer_state='zero'` says how to grow an optimizer"):
        kwiden.grow(gpt(), 2, optimizer_state="zero")


def test_rewarm_needs_a_kwiden_optimizer(gpt):
    small = train_small(gpt, lambda: keras.optimizers.Adam(3e-3), steps=1)
    with pytest.raises(ValueError, match=r"`rewarm` needs one of kwiden's optimizers .* grow with rewarm=0"):
        kwiden.grow(small, 2, optimizer=small.optimizer, rewarm=10)


def test_width_aware_rates_asked_of_a_keras_optimizer_are_refused(gpt):
    """Keras' Adam has one rate: `True` asks for what it cannot do, so it is
    refused rather than ignored; the default (None) gives it one rate."""
    small = train_small(gpt, lambda: keras.optimizers.Adam(3e-3), steps=1)
    with pytest.raises(
        ValueError, match=r"`scale_learning_rates=True` needs one of kwiden's optimizers .* Adam has one"
    ):
        kwiden.grow(small, 2, optimizer=small.optimizer, scale_learning_rates=True)
    big, grown = kwiden.grow(small, 2, optimizer=small.optimizer)
    assert isinstance(grown, keras.optimizers.Adam) and grown.iterations.numpy() == 1
    small = train_small(gpt, lambda: keras.optimizers.SGD(1e-2), steps=1)
    with pytest.raises(ValueError, match=r"SGD has one learning rate .* or train with kwiden.optimizers.SGDM\."):
        kwiden.grow(small, 2, optimizer=small.optimizer, scale_learning_rates=True)


@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_the_default_recipe_is_exact_at_growth(family, request):
    """grow(small, 2, optimizer=...) with nothing else: spread 2, width-aware
    multipliers relaxing to one rate over 1000 updates from the growth, and
    the grown model still exact."""
    small = request.getfixturevalue(family)()
    inputs = padded_batch(segments=family == "bert")
    optimizer = optimizers.AdamW(1e-3)
    optimizer.build(small.trainable_variables)
    big, grown = kwiden.grow(small, 2, optimizer=optimizer)
    report = kwiden.verify(small, big, inputs, rtol=1e-5)
    assert report.ok, str(report)
    inner = "Transformer-0-FeedForward/inner_kernel"
    path = next(v.path for v in big.trainable_variables if v.path.endswith(inner))
    c, copies = grown.growth_scales[path]
    assert c < 1 and copies == 4  # both axes doubled: smaller steps, four copies of each element
    held = kwiden.grow(small, 2, optimizer=optimizer, relax_learning_rates=0)[1]
    assert held.growth_scales == grown.growth_scales and held.growth_relax is None
    assert grown.growth_relax == (0, 1000) and grown.slice_multipliers == {}
    # Spread, not plain copies: the two copies of an FFN input row differ.
    kernel = big.get_layer("Transformer-0-FeedForward").inner_kernel.numpy()
    assert not np.allclose(kernel[0], kernel[1])
