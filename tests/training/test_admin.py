"""Admin residuals: the layer, builders, `kwiden.training.admin.initialize` and `fold` (docs/admin.md)."""

import math

import keras
import numpy as np
import pytest

import kwiden
from kwiden.layers import AdminResidual, ExpandableLayerNormalization, FeedForward
from kwiden.testing import NOTICEABLE_EPSILON as EPS
from kwiden.testing import RTOL, assert_exact, numpy_outputs, padded_batch, randomize_weights, tiny_config


def admin_model(model="bert", seed=0, **overrides):
    built = kwiden.build_transformer_model(tiny_config(**overrides), model=model, residual="admin")
    return randomize_weights(built, seed)  # ω random too: per channel, as after training


def test_admin_residual_computes_layernorm_of_weighted_sum():
    rng = np.random.default_rng(0)
    x, f = rng.normal(size=(2, 3, 6)).astype("float32"), rng.normal(size=(2, 3, 6)).astype("float32")
    layer = AdminResidual(epsilon=EPS)
    layer([x, f])
    omega, gamma, beta = rng.normal(size=(3, 6))
    layer.set_weights([gamma, beta, omega])
    z = omega * x + f
    expected = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + EPS) * gamma + beta
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer([x, f])), expected, rtol=1e-5, atol=1e-5)
    fixed = AdminResidual.from_config(AdminResidual(omega_trainable=False, epsilon=EPS).get_config())
    fixed([x, f])
    assert not fixed.omega.trainable and len(fixed.trainable_weights) == 2


@pytest.mark.parametrize("model", ["bert", "gpt", "llama"])
def test_builders_make_admin_blocks(model):
    built = kwiden.build_transformer_model(tiny_config(), model=model, residual="admin")
    admin = [layer for layer in built.layers if isinstance(layer, AdminResidual)]
    assert [layer.name for layer in admin[:2]] == [
        "Transformer-0-MultiHeadSelfAttention-Norm",
        "Transformer-0-FeedForward-Norm",
    ]
    assert len(admin) == 4 and not any(
        isinstance(layer, keras.layers.Add) and "Transformer" in layer.name for layer in built.layers
    )
    assert admin[0].rms == (model == "llama")
    with pytest.raises(ValueError, match=r"`residual` must be one of \('post_ln', 'pre_ln', 'admin'\)"):
        kwiden.build_transformer_model(tiny_config(), model=model, residual="sandwich")


@pytest.mark.parametrize("residual", ["pre_ln", "post_ln"])
def test_builders_switch_between_pre_and_post_ln(residual):
    for model in ("bert", "gpt"):
        names = [
            layer.name for layer in kwiden.build_transformer_model(tiny_config(), model=model, residual=residual).layers
        ]
        assert ("Output-Norm" in names) == (residual == "pre_ln")
        assert ("Embedding-Norm" in names) == (model == "bert" or residual == "post_ln")


def test_admin_model_saves_and_loads(tmp_path):
    model = admin_model(with_mlm=True)
    model.save(tmp_path / "admin.keras")
    loaded = keras.saving.load_model(tmp_path / "admin.keras")
    for a, b in zip(numpy_outputs(model, padded_batch()), numpy_outputs(loaded, padded_batch())):
        np.testing.assert_array_equal(a, b)


@pytest.mark.backends
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("heads", ["size", "count"])
def test_admin_models_grow_exactly(k, heads):
    for model, inputs in (("bert", padded_batch()), ("gpt", padded_batch(segments=False))):
        small = admin_model(model)
        big = kwiden.grow(small, k, heads=heads, spread=1.0, seed=0)
        small_omega = small.get_layer("Transformer-1-FeedForward-Norm").omega.numpy()
        np.testing.assert_array_equal(
            big.get_layer("Transformer-1-FeedForward-Norm").omega.numpy(), np.repeat(small_omega, k)
        )
        assert_exact(small, big, inputs)


def branch_variances(model, batch, blocks):
    """Var of the stream entering the first block and of every residual branch,
    read from the plain Post-LN model with the same weights (ω = 1 there)."""
    names = ["Embedding-Dropout"] + [
        f"Transformer-{i}-{sublayer}-Dropout"
        for i in range(blocks)
        for sublayer in ("MultiHeadSelfAttention", "FeedForward")
    ]
    probe = keras.Model(model.inputs, [model.get_layer(name).output for name in names])
    return [float(np.var(np.asarray(v, np.float64))) for v in probe(batch, training=True)]


@pytest.mark.backends
def test_profiled_omega_equals_numpy_from_the_branch_outputs():
    config = dict(num_hidden_layers=3, hidden_dropout_prob=0.0)
    admin = admin_model(**config)
    plain = kwiden.build_transformer_model(tiny_config(**config), residual="post_ln")
    for layer in plain.layers:
        if layer.weights:
            source = admin.get_layer(layer.name)
            layer.set_weights([w for w, v in zip(source.get_weights(), source.weights) if v.name != "omega"])
    batch = padded_batch()
    omegas = kwiden.training.admin.initialize(admin, batch)
    variances = branch_variances(plain, batch, blocks=3)
    expected = np.sqrt(np.cumsum(variances[:-1]))
    np.testing.assert_allclose(list(omegas.values()), expected, rtol=1e-5)
    assert list(omegas) == [layer.name for layer in admin.layers if isinstance(layer, AdminResidual)]
    np.testing.assert_allclose(admin.get_layer("Transformer-2-FeedForward-Norm").omega.numpy(), expected[-1], rtol=1e-6)


def test_profiled_omega_grows_with_depth():
    # Weights of unit scale (std ≈ 1/√hidden), so that branches matter as much as the stream.
    config = tiny_config(num_hidden_layers=6, initializer_range=0.25)
    model = kwiden.build_transformer_model(config, residual="admin")
    omegas = list(kwiden.training.admin.initialize(model, padded_batch()).values())
    assert all(a < b for a, b in zip(omegas, omegas[1:]))
    assert omegas[-1] > 2 * omegas[0]


def test_closed_form_omega():
    model = admin_model(num_hidden_layers=3)
    omegas = kwiden.training.admin.initialize(model, method="closed_form")
    np.testing.assert_allclose(list(omegas.values()), [math.sqrt(7 / math.log(7) - 1)] * 6)
    np.testing.assert_allclose(
        model.get_layer("Transformer-0-FeedForward-Norm").omega.numpy(), omegas["Transformer-0-FeedForward-Norm"]
    )


def test_initialize_errors():
    plain = kwiden.build_transformer_model(tiny_config())
    with pytest.raises(ValueError, match=r"Model 'bert' has no AdminResidual layers; build it with .*residual='admin'"):
        kwiden.training.admin.initialize(plain, padded_batch())
    model = admin_model()
    with pytest.raises(ValueError, match=r"`batch` is empty"):
        kwiden.training.admin.initialize(model, [np.zeros((0, 4), "int32"), np.zeros((0, 4), "int32")])
    with pytest.raises(ValueError, match=r"`batch` is empty"):
        kwiden.training.admin.initialize(model)
    with pytest.raises(ValueError, match=r"`method` must be one of \('profile', 'closed_form'\)"):
        kwiden.training.admin.initialize(model, padded_batch(), method="fixup")


@pytest.mark.backends
@pytest.mark.parametrize("model", ["bert", "gpt", "llama", "t5"])
def test_fold_is_exact_with_per_channel_omega(model):
    admin = admin_model(model, with_mlm=True) if model == "bert" else admin_model(model)
    inputs = padded_batch(segments=model == "bert")
    before = [w.copy() for w in admin.get_weights()]
    plain = kwiden.training.admin.fold(admin)
    assert not any(isinstance(layer, AdminResidual) for layer in plain.layers)
    assert isinstance(plain.get_layer("Transformer-0-FeedForward-Add"), keras.layers.Add)
    for a, b in zip(numpy_outputs(admin, inputs), numpy_outputs(plain, inputs)):
        assert np.max(np.abs(a - b)) <= RTOL * np.max(np.abs(a)), np.max(np.abs(a - b))
    for a, b in zip(before, admin.get_weights()):
        np.testing.assert_array_equal(a, b)  # the source is not modified


def branch_model(omega):
    """A stream that does not come out of a LayerNorm: only a uniform ω folds exactly."""
    x = keras.Input((None, 8))
    y = FeedForward(12, name="Block-FeedForward")(x)
    out = AdminResidual(epsilon=EPS, name="Block-FeedForward-Norm")([x, y])
    model = randomize_weights(keras.Model(x, out))
    model.get_layer("Block-FeedForward-Norm").omega.assign(omega)
    return model


def test_fold_with_uniform_omega_rescales_the_branch():
    model = branch_model(np.full(8, 2.5, "float32"))
    plain = kwiden.training.admin.fold(model)
    norm = plain.get_layer("Block-FeedForward-Norm")
    assert isinstance(norm, ExpandableLayerNormalization) and norm.epsilon == pytest.approx(EPS / 2.5**2)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")
    a, b = numpy_outputs(model, x)[0], numpy_outputs(plain, x)[0]
    assert np.max(np.abs(a - b)) <= RTOL * np.max(np.abs(a))


def test_fold_refuses_per_channel_omega_it_cannot_fold_and_reports_the_approximation():
    model = branch_model(np.random.default_rng(3).uniform(0.5, 3.0, 8).astype("float32"))
    with pytest.raises(
        ValueError,
        match=r"AdminResidual 'Block-FeedForward-Norm': ω differs from channel to channel.*allow_approximate=True",
    ):
        kwiden.training.admin.fold(model)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")
    with pytest.warns(UserWarning, match=r"folded approximately") as caught:
        plain = kwiden.training.admin.fold(model, allow_approximate=True, check=x)
    assert {w.filename for w in caught if "folded" in str(w.message)} == {__file__}
    report = plain.fold_report
    assert not report.ok and 1e-3 < report.outputs[0].max_relative_error < 2.0, str(report)


def test_admin_depth_growth_is_approximate_and_says_so():
    small = admin_model()
    with pytest.raises(kwiden.GrowthError, match=r"Transformer blocks \[0, 1\] are not Pre-LN"):
        kwiden.grow(small, 1, depth=2)
    with pytest.warns(UserWarning, match="approximate"):
        big = kwiden.grow(small, 1, depth=2, allow_approximate=True, check=padded_batch())
    assert len([layer for layer in big.layers if isinstance(layer, AdminResidual)]) == 8
    assert not big.growth_report.ok


def test_fold_with_negative_uniform_omega_flips_gamma():
    model = branch_model(np.full(8, -1.5, "float32"))
    plain = kwiden.training.admin.fold(model)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")
    a, b = numpy_outputs(model, x)[0], numpy_outputs(plain, x)[0]
    assert np.max(np.abs(a - b)) <= RTOL * np.max(np.abs(a))


def test_fold_names_zero_omega_and_refuses_a_zero_mean():
    omega = np.ones(8, "float32")
    omega[[2, 5]] = 0.0
    with pytest.raises(ValueError, match=r"ω is 0 in channels \[2, 5\], where the layer ignores its stream"):
        kwiden.training.admin.fold(branch_model(omega))
    with pytest.raises(ValueError, match=r"ω averages 0"):
        kwiden.training.admin.fold(branch_model(np.array([1, -1] * 4, "float32")), allow_approximate=True)


def test_fold_refuses_to_rescale_outputs_read_elsewhere():
    x = keras.Input((None, 8))
    y = FeedForward(12, name="Block-FeedForward")(x)
    out = AdminResidual(epsilon=EPS, name="Block-FeedForward-Norm")([x, y])
    model = randomize_weights(keras.Model(x, [out, y]))
    model.get_layer("Block-FeedForward-Norm").omega.assign(np.full(8, 2.5, "float32"))
    with pytest.raises(ValueError, match=r"the output of 'Block-FeedForward' is also read elsewhere"):
        kwiden.training.admin.fold(model)


def test_fold_does_not_divide_kernels_of_layers_called_twice():
    """A reader of the normalised stream that is also called elsewhere cannot
    absorb ω, so the per-channel fold does not apply."""
    x = keras.Input((None, 8))
    h = ExpandableLayerNormalization(epsilon=EPS, name="Input-Norm")(x)
    shared = FeedForward(12, name="Block-FeedForward")
    out = AdminResidual(epsilon=EPS, name="Block-FeedForward-Norm")([h, shared(h)])
    model = randomize_weights(keras.Model(x, [out, shared(x)]))
    with pytest.raises(ValueError, match=r"ω differs from channel to channel"):
        kwiden.training.admin.fold(model)


def test_builders_called_directly_keep_their_defaults():
    from kwiden.models import load_config
    from kwiden.models.gpt import build_gpt

    model = randomize_weights(build_gpt(load_config(tiny_config())))
    ids = padded_batch(segments=False)
    changed = ids.copy()
    changed[:, 5:] = 1
    a, b = numpy_outputs(model, ids)[0], numpy_outputs(model, changed)[0]
    np.testing.assert_allclose(a[:, :5], b[:, :5], rtol=1e-5, atol=1e-6)  # causal: the past ignores the future
