"""Per-slice learning-rate multipliers: row and column vectors over a kernel,
their warmup counted in updates, against a numpy reference."""

import keras
import numpy as np
import pytest

from kwiden import optimizers

pytestmark = pytest.mark.backends

ROWS = [1.0, 0.0, 0.5]
COLUMNS = [1.0, 2.0, 0.0, 1.0]
BIAS = [0.0, 1.0, 1.0, 0.25]


def weights(seed=0):
    rng = np.random.default_rng(seed)
    return [
        keras.Variable(rng.normal(size=(3, 4)).astype("float32"), name="kernel"),
        keras.Variable(rng.normal(size=(4,)).astype("float32"), name="bias"),
        keras.Variable(rng.normal(size=(4,)).astype("float32"), name="plain"),
    ]


def multipliers(variables):
    kernel, bias, _ = variables
    return {kernel.path: [ROWS, COLUMNS], bias.path: [BIAS]}


def reference_multipliers(update, warmup):
    """Per variable, the multiplier array at update number `update` (from 1)."""
    arrays = [np.outer(ROWS, COLUMNS), np.array(BIAS), np.ones(4)]
    if warmup is None:
        return arrays
    start, steps = warmup
    progress = np.clip((update - start) / steps, 0.0, 1.0)
    return [m + (1 - m) * progress for m in arrays]


def adamw_reference(start, grads, lr, wd, k, warmup, b1=0.9, b2=0.999, eps=1e-7):
    """AdamW on each cycle's mean gradient (mean of squares for v), each
    element's rate times its slice multiplier; the bias is not decayed."""
    w = [x.astype(np.float64) for x in start]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    for t, cycle in enumerate(range(0, len(grads), k), start=1):
        micro = grads[cycle : cycle + k]
        for i, multiplier in enumerate(reference_multipliers(t, warmup)):
            m[i] = b1 * m[i] + (1 - b1) * np.mean([g[i] for g in micro], axis=0)
            v[i] = b2 * v[i] + (1 - b2) * np.mean([g[i].astype(np.float64) ** 2 for g in micro], axis=0)
            rate = lr * multiplier
            if i == 0:
                w[i] = w[i] - rate * wd * w[i]
            w[i] = w[i] - rate * np.sqrt(1 - b2**t) / (1 - b1**t) * m[i] / (np.sqrt(v[i]) + eps)
    return w


@pytest.mark.parametrize("warmup", [None, (2, 3)], ids=["static", "warmup"])
@pytest.mark.parametrize("k", [1, 3])
def test_slice_multipliers_match_numpy_with_accumulation(k, warmup):
    variables = weights()
    start = [keras.ops.convert_to_numpy(v) for v in variables]
    rng = np.random.default_rng(1)
    grads = [[rng.normal(size=v.shape).astype("float32") for v in variables] for _ in range(7 * k)]
    optimizer = optimizers.AdamW(
        0.01, weight_decay=0.1, exclude_from_weight_decay=["bias", "plain"], accum_steps=k,
        slice_multipliers=multipliers(variables), slice_warmup=warmup,
    )  # fmt: skip
    for step in grads:
        optimizer.apply([keras.ops.convert_to_tensor(g) for g in step], variables)
    expected = adamw_reference(start, grads, 0.01, 0.1, k, warmup)
    for variable, value in zip(variables, expected):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), value, rtol=1e-5, atol=1e-6)
    # Elements with multiplier 0 have not moved (no warmup) or have (warmup done by update 5).
    kernel = keras.ops.convert_to_numpy(variables[0])
    assert (kernel[1] == start[0][1]).all() == (warmup is None)


def functional_model():
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(4, name="dense")(inputs)
    return keras.Model(inputs, outputs)


def test_slice_multipliers_are_saved_and_resumed_mid_warmup(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(24, 3)).astype("float32"), rng.normal(size=(24, 4)).astype("float32")

    def make():
        keras.utils.set_random_seed(0)
        model = functional_model()
        slices = {"dense/kernel": [ROWS, COLUMNS], "dense/bias": [BIAS]}
        model.compile(optimizers.Adam(0.01, accum_steps=2, slice_multipliers=slices, slice_warmup=(1, 4)), "mse")
        return model

    straight = make()
    straight.fit(x, y, batch_size=2, shuffle=False, verbose=0)
    interrupted = make()
    interrupted.fit(x[:10], y[:10], batch_size=2, shuffle=False, verbose=0)  # 5 micro-steps: mid-cycle
    interrupted.save(tmp_path / "model.keras")
    resumed = keras.saving.load_model(tmp_path / "model.keras")
    assert resumed.optimizer.slice_warmup == (1, 4)
    assert resumed.optimizer.slice_multipliers["dense/kernel"] == [ROWS, COLUMNS]
    resumed.fit(x[10:], y[10:], batch_size=2, shuffle=False, verbose=0)
    for a, b in zip(straight.get_weights(), resumed.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_slice_multipliers_are_checked_against_the_variables():
    variables = weights()
    with pytest.raises(ValueError, match=r"`slice_multipliers` names 'kernal', but the optimizer is built on no"):
        optimizers.Adam(slice_multipliers={"kernal": [ROWS, COLUMNS]}).build(variables)
    with pytest.raises(ValueError, match=r"slice_multipliers\['kernel'\]` must give one vector .* shape \(3, 4\)"):
        optimizers.Adam(slice_multipliers={"kernel": [COLUMNS, ROWS]}).build(variables)
    with pytest.raises(ValueError, match=r"shape \(3, 4\).* lengths \[3\]"):
        optimizers.Adam(slice_multipliers={"kernel": [ROWS]}).build(variables)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(slice_multipliers=[ROWS]), r"`slice_multipliers` must be a dict \{variable path"),
        (dict(slice_multipliers={"kernel": "rows"}), r"`slice_multipliers\['kernel'\]` must be a list with one vector"),
        (dict(slice_multipliers={"kernel": [[1.0, -1.0], None]}), r"`slice_multipliers\['kernel'\]\[0\]` .* >= 0"),
        (dict(slice_multipliers={"kernel": [[1.0, np.nan]]}), r"finite numbers >= 0, got \[1.0, nan\]"),
        (
            dict(slice_multipliers={"kernel": [["a"]]}),
            r"`slice_multipliers\['kernel'\]\[0\]` must be a list of numbers",
        ),
        (dict(slice_warmup=5), r"`slice_warmup` must be None or a pair \(start, steps\)"),
        (dict(slice_warmup=(-1, 5)), r"`slice_warmup\[0\]` must be an integer >= 0"),
        (dict(slice_warmup=(0, 0)), r"`slice_warmup\[1\]` must be an integer >= 1"),
    ],
)
def test_bad_slice_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        optimizers.Adam(0.01, **kwargs)
