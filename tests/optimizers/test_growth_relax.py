"""Width-aware rates relaxing to one rate: the growth scales' step
multipliers move linearly to 1 over `growth_relax`'s updates (Adam's ε keeps
its growth scale), against a numpy reference; saved in the config; and
folded into the next growth's multipliers."""

import keras
import numpy as np
import pytest

import kwiden
from kwiden import optimizers
from kwiden.growth.expansion import GrowthError

pytestmark = pytest.mark.backends

C, COPIES = 0.5, 4
RELAX = (2, 3)  # held through update 2, then 1/3, 2/3, 1 of the way to 1 on updates 3, 4, 5


def relaxed_scale(update, c):
    start, steps = RELAX
    return c + (1 - c) * np.clip((update - start) / steps, 0.0, 1.0)


def adam_reference(start, grads, lr, k, b1=0.9, b2=0.999, eps=1e-3):
    """Adam on each cycle's mean gradient (mean of squares for v); the grown
    kernel's step times its relaxed scale, its ε over c·copies."""
    w = [x.astype(np.float64) for x in start]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    for t, cycle in enumerate(range(0, len(grads), k), start=1):
        micro = grads[cycle : cycle + k]
        for i in range(len(w)):
            m[i] = b1 * m[i] + (1 - b1) * np.mean([g[i] for g in micro], axis=0)
            v[i] = b2 * v[i] + (1 - b2) * np.mean([g[i].astype(np.float64) ** 2 for g in micro], axis=0)
            scale, epsilon = (relaxed_scale(t, C), eps / (C * COPIES)) if i == 0 else (1.0, eps)
            step = np.sqrt(1 - b2**t) / (1 - b1**t) * m[i] / (np.sqrt(v[i]) + epsilon)
            w[i] = w[i] - lr * scale * step
    return w


@pytest.mark.parametrize("k", [1, 2])
def test_growth_scales_relax_to_one_rate_as_numpy_does(k):
    rng = np.random.default_rng(0)
    variables = [
        keras.Variable(rng.normal(size=(3, 4)).astype("float32"), name="kernel"),
        keras.Variable(rng.normal(size=(4,)).astype("float32"), name="bias"),
    ]
    start = [keras.ops.convert_to_numpy(v) for v in variables]
    grads = [[rng.normal(size=v.shape).astype("float32") for v in variables] for _ in range(7 * k)]
    optimizer = optimizers.Adam(
        0.01, epsilon=1e-3, accum_steps=k, growth_scales={variables[0].path: (C, COPIES)}, growth_relax=RELAX
    )
    for step in grads:
        optimizer.apply([keras.ops.convert_to_tensor(g) for g in step], variables)
    for variable, value in zip(variables, adam_reference(start, grads, 0.01, k)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), value, rtol=1e-5, atol=1e-6)


def test_sgdm_relaxes_to_its_plain_step():
    """SGDM's grown step is c²·copies times the rate; relaxed, it is the rate."""
    kernel = keras.Variable(np.ones((2, 2), "float32"), name="kernel")
    optimizer = optimizers.SGDM(0.1, momentum=0.0, growth_scales={kernel.path: (C, 2)}, growth_relax=(0, 2))
    moves = []
    for _ in range(3):
        before = keras.ops.convert_to_numpy(kernel).copy()
        optimizer.apply([keras.ops.ones((2, 2))], [kernel])
        moves.append(float((before - keras.ops.convert_to_numpy(kernel))[0, 0]))
    held = C * C * 2  # 1/2: c²·copies
    np.testing.assert_allclose(moves, [0.1 * (held + (1 - held) * p) for p in (0.5, 1.0, 1.0)], rtol=1e-6)


def test_growth_relax_is_saved_and_checked():
    optimizer = optimizers.AdamW(1e-3, growth_scales={"kernel": (C, COPIES)}, growth_relax=RELAX)
    restored = optimizers.AdamW.from_config(optimizer.get_config())
    assert restored.growth_relax == RELAX and restored.growth_scales == {"kernel": (C, COPIES)}
    with pytest.raises(ValueError, match=r"`growth_relax` must be None or a pair \(start, steps\)"):
        optimizers.Adam(growth_relax=5)
    with pytest.raises(ValueError, match=r"`growth_relax\[1\]` must be an integer >= 1"):
        optimizers.Adam(growth_relax=(0, 0))


@pytest.mark.parametrize("make", [optimizers.Adam, optimizers.SGDM, optimizers.RAdam], ids=["Adam", "SGDM", "RAdam"])
def test_fully_relaxed_a_grown_tensor_steps_as_a_plain_one(make):
    """Relaxed at once (over 1 update), a tensor grown with c = 1/2 from 2
    copies (so ε is unchanged too) moves exactly as one never grown; held, it
    does not (RAdam in both its momentum and its rectified steps)."""
    rng = np.random.default_rng(0)
    start = rng.normal(size=(3, 4)).astype("float32")
    grads = [rng.normal(size=(3, 4)).astype("float32") for _ in range(8)]
    moved = {}
    for relax in (None, (0, 1)):
        grown, plain = keras.Variable(start, name="grown"), keras.Variable(start, name="plain")
        optimizer = make(0.01, growth_scales={grown.path: (0.5, 2)}, growth_relax=relax)
        for g in grads:
            optimizer.apply([keras.ops.convert_to_tensor(g)] * 2, [grown, plain])
        moved[relax] = keras.ops.convert_to_numpy(grown), keras.ops.convert_to_numpy(plain)
    np.testing.assert_allclose(*moved[(0, 1)], rtol=1e-6, atol=1e-7)
    assert not np.allclose(*moved[None], rtol=1e-3, atol=0)


def gpt():
    config = dict(vocab_size=40, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    return kwiden.build_transformer_model(config, model="gpt")


STEP = {"Adam": lambda c, copies: c, "SGDM": lambda c, copies: c * c * copies}


@pytest.mark.parametrize("name", ["Adam", "SGDM"])
def test_a_later_growth_starts_from_the_relaxed_multipliers(name):
    """Grown at update 0 relaxing over 4 updates, trained 2, grown again:
    the second growth's step multiplier is its own times the first's halfway
    to 1, for Adam (whose ε keeps both growths' scales) and SGDM (c²·K)."""
    make = getattr(optimizers, name)
    small = gpt()
    optimizer = make(1e-3)
    optimizer.build(small.trainable_variables)
    middle, grown = kwiden.grow(small, 2, optimizer=optimizer, relax_learning_rates=4, seed=0)
    assert grown.growth_relax == (0, 4)
    grown.iterations.assign(2)
    big, twice = kwiden.grow(middle, 2, optimizer=grown, relax_learning_rates=0, seed=0)
    fresh = make(1e-3)
    fresh.build(middle.trainable_variables)
    own = kwiden.grow(middle, 2, optimizer=fresh, relax_learning_rates=0, seed=0)[1]  # the second growth alone
    inner = "Transformer-0-FeedForward/inner_kernel"
    path = next(v.path for v in big.trainable_variables if v.path.endswith(inner))
    first, second, both = (STEP[name](*o.growth_scales[path]) for o in (grown, own, twice))
    assert first != 1.0
    np.testing.assert_allclose(both, (first + (1 - first) * 0.5) * second, rtol=1e-12)
    if name == "Adam":
        (c1, k1), (c2, k2), (c, k) = (o.growth_scales[path] for o in (grown, own, twice))
        np.testing.assert_allclose(c * k, c1 * k1 * c2 * k2, rtol=1e-12)  # ε's scale
    assert twice.growth_relax is None


def test_a_non_integer_growth_gets_no_multipliers_by_default():
    small = gpt()
    optimizer = optimizers.Adam(1e-3)
    optimizer.build(small.trainable_variables)
    with pytest.warns(UserWarning, match="the grown model is approximate"):  # LayerNorm under 8 -> 12
        grown = kwiden.grow(small, hidden_size=12, intermediate_size=24, heads="count", optimizer=optimizer,
                            allow_approximate=True)[1]  # fmt: skip
    assert grown.growth_scales == {} and grown.growth_relax is None
    with pytest.warns(UserWarning, match="approximate"), pytest.raises(GrowthError, match=r"no one learning-rate"):
        kwiden.grow(small, hidden_size=12, intermediate_size=24, heads="count", optimizer=optimizer,
                    allow_approximate=True, scale_learning_rates=True)  # fmt: skip


@pytest.mark.parametrize("relax", [-1, 2.5, True, "1000"])
def test_bad_relax_learning_rates(relax):
    small = gpt()
    optimizer = optimizers.Adam(1e-3)
    with pytest.raises(
        ValueError,
        match=r"`relax_learning_rates` must be a whole number of at least 0 \(updates over which the width-aware rates move to one rate; 0: they hold\), got relax_learning_rates=",
    ):
        kwiden.grow(small, 2, optimizer=optimizer, relax_learning_rates=relax)


@pytest.mark.parametrize("scale", [0, 1, "False"])
def test_bad_scale_learning_rates(scale):
    optimizer = optimizers.Adam(1e-3)
    with pytest.raises(
        ValueError,
        match=r"`scale_learning_rates` must be True or False, or None \(growth scales as learning-rate multipliers \(None: where each tensor has one\)\), got scale_learning_rates=",
    ):
        kwiden.grow(gpt(), 2, optimizer=optimizer, scale_learning_rates=scale)


def test_a_relaxation_without_width_aware_rates_is_refused():
    """A relaxation length under one rate would be ignored: say so instead."""
    with pytest.raises(
        ValueError, match=r"`relax_learning_rates=500` relaxes width-aware .* scale_learning_rates=False"
    ):
        kwiden.grow(gpt(), 2, optimizer=optimizers.Adam(1e-3), scale_learning_rates=False, relax_learning_rates=500)
    for relax in (0, 1000):  # holding and the default say nothing wrong
        assert kwiden.grow(gpt(), 2, optimizer=optimizers.Adam(1e-3), scale_learning_rates=False,
                           relax_learning_rates=relax)[1].growth_relax is None  # fmt: skip
