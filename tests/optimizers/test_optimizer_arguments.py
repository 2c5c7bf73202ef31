"""Bad arguments are refused when an optimizer or schedule is made, with one
error naming the argument and its value; arguments a Keras user writes
(a single pattern string, numpy numbers) mean what they say."""

import json

import keras
import numpy as np
import pytest

from kwiden import optimizers

# Backend-independent checks, but schedules are evaluated on the backend.
pytestmark = pytest.mark.backends

NAN, INF = float("nan"), float("inf")
OPTIMIZERS = [optimizers.SGDM, optimizers.Adam, optimizers.AdamW, optimizers.RAdam]


def kernel_and_bias():
    return [
        keras.Variable(np.ones((2, 2), "float32"), name="kernel"),
        keras.Variable(np.ones(2, "float32"), name="bias"),
    ]


def decayed(optimizer):
    """Which of a kernel and a bias one update with zero gradients decays."""
    weights = kernel_and_bias()
    optimizer.apply([np.zeros((2, 2), "float32"), np.zeros(2, "float32")], weights)
    return [not np.array_equal(keras.ops.convert_to_numpy(w), np.ones(w.shape)) for w in weights]


# A single string for exclude_from_weight_decay is one pattern, not its characters.


def test_a_single_string_excludes_what_it_names():
    optimizer = optimizers.AdamW(0.1, weight_decay=0.5, exclude_from_weight_decay="bias")
    assert optimizer.exclude_patterns == ["bias"]
    assert decayed(optimizer) == [True, False]  # the kernel is decayed, the bias is not


def test_a_single_string_is_the_same_as_a_list_of_it():
    one = optimizers.AdamW(0.1, weight_decay=0.5, exclude_from_weight_decay="bias")
    listed = optimizers.AdamW(0.1, weight_decay=0.5, exclude_from_weight_decay=["bias"])
    assert decayed(one) == decayed(listed) == [True, False]
    clone = optimizers.AdamW.from_config(one.get_config())
    assert clone.exclude_patterns == ["bias"] and decayed(clone) == [True, False]


@pytest.mark.parametrize("var_names", ["bias", ["bias"]], ids=["string", "list"])
def test_keras_exclude_from_weight_decay_takes_a_name_or_a_list(var_names):
    optimizer = optimizers.AdamW(0.1, weight_decay=0.5, exclude_from_weight_decay=None)
    optimizer.exclude_from_weight_decay(var_names=var_names)
    assert decayed(optimizer) == [True, False]


def test_keras_exclude_from_weight_decay_takes_one_variable():
    optimizer = optimizers.AdamW(0.1, weight_decay=0.5, exclude_from_weight_decay=None)
    kernel, bias = kernel_and_bias()
    optimizer.exclude_from_weight_decay(var_list=kernel)
    optimizer.apply([np.zeros((2, 2), "float32"), np.zeros(2, "float32")], [kernel, bias])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(kernel), np.ones((2, 2)))
    assert not np.array_equal(keras.ops.convert_to_numpy(bias), np.ones(2))


def test_keras_exclude_from_weight_decay_after_the_first_step_is_refused():
    optimizer = optimizers.AdamW(0.1, weight_decay=0.5, exclude_from_weight_decay=None)
    decayed(optimizer)
    with pytest.raises(ValueError, match=r"`exclude_from_weight_decay\(\)` can only be configured before"):
        optimizer.exclude_from_weight_decay(var_names=["kernel"])


@pytest.mark.parametrize(
    "value, message",
    [
        ([3], r"`exclude_from_weight_decay` takes regular expressions \(strings\), got 3 \(an int\)"),
        ({"bias": 1}, r"`exclude_from_weight_decay` must be a regular expression or a list of them"),
        (0.5, r"`exclude_from_weight_decay` must be a regular expression or a list of them, got .*=0\.5"),
    ],
)
def test_exclusions_that_are_not_patterns(value, message):
    with pytest.raises(ValueError, match=message):
        optimizers.AdamW(exclude_from_weight_decay=value)


# Integers of any type, bools and floats refused.


@pytest.mark.parametrize("make", OPTIMIZERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("steps", [np.int64(4), np.int32(4), np.uint8(4)], ids=lambda s: type(s).__name__)
def test_numpy_integer_accum_steps(make, steps):
    optimizer = make(accum_steps=steps)
    assert optimizer.accum_steps == 4 and type(optimizer.accum_steps) is int
    json.dumps(optimizer.get_config())  # saves as a plain int


def test_numpy_accum_steps_train_like_python_ones():
    grads = [[np.full((2, 2), g, "float32"), np.full(2, g, "float32")] for g in (1.0, 2.0, 3.0, 4.0)]

    def trained(steps):
        weights = kernel_and_bias()
        optimizer = optimizers.SGDM(0.1, accum_steps=steps)
        for g in grads:
            optimizer.apply(g, weights)
        return [keras.ops.convert_to_numpy(w) for w in weights]

    for a, b in zip(trained(np.int64(2)), trained(2)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "steps, shown",
    [(np.float64(4.0), r"np\.float64\(4\.0\)"), (False, r"False \(a bool\)"), (np.int64(0), r"np\.int64\(0\)")],
)
def test_accum_steps_not_integers_or_below_one(steps, shown):
    with pytest.raises(
        ValueError, match=rf"`accum_steps` must be an integer >= 1 \(1: no accumulation\), got accum_steps={shown}\."
    ):
        optimizers.Adam(accum_steps=steps)


def test_nesterov_with_numpy_accumulation_is_refused():
    with pytest.raises(ValueError, match=r"nesterov=True\) needs each update's mean"):
        optimizers.SGDM(0.1, nesterov=True, accum_steps=np.int64(2))


# Every float argument finite and in range, one error naming it and its value.


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: optimizers.SGDM(NAN), r"`learning_rate` must be >= 0 and finite, got learning_rate=nan\."),
        (lambda: optimizers.Adam(INF), r"`learning_rate` must be >= 0 and finite, got learning_rate=inf\."),
        (lambda: optimizers.RAdam(-1e-3), r"`learning_rate` must be >= 0 and finite, got learning_rate=-0\.001\."),
        (
            lambda: optimizers.Adam("1e-3"),
            r"`learning_rate` must be a number >= 0, .*got learning_rate='1e-3' \(a str\)",
        ),
        (lambda: optimizers.Adam(True), r"`learning_rate` must be a number >= 0, .*got learning_rate=True \(a bool\)"),
        (
            lambda: optimizers.AdamW(weight_decay=NAN),
            r"`weight_decay` must be >= 0 and finite \(or None\), got weight_decay=nan\.",
        ),
        (
            lambda: optimizers.SGDM(weight_decay=INF),
            r"`weight_decay` must be >= 0 and finite \(or None\), got weight_decay=inf\.",
        ),
        (lambda: optimizers.Adam(beta_1=NAN), r"`beta_1` must be in \[0, 1\), got beta_1=nan\."),
        (lambda: optimizers.AdamW(beta_1=1.0), r"`beta_1` must be in \[0, 1\), got beta_1=1\.0\."),
        (lambda: optimizers.RAdam(beta_2=NAN), r"`beta_2` must be in \[0, 1\), got beta_2=nan\."),
        (lambda: optimizers.Adam(beta_2=-INF), r"`beta_2` must be in \[0, 1\), got beta_2=-inf\."),
        (lambda: optimizers.Adam(epsilon=NAN), r"`epsilon` must be > 0 and finite .*, got epsilon=nan\."),
        (lambda: optimizers.Adam(epsilon=0.0), r"`epsilon` must be > 0 and finite .*, got epsilon=0\.0\."),
        (lambda: optimizers.RAdam(epsilon=-1e-7), r"`epsilon` must be > 0 and finite .*, got epsilon=-1e-07\."),
        (lambda: optimizers.SGDM(momentum=NAN), r"`momentum` must be in \[0, 1\), got momentum=nan\."),
        (lambda: optimizers.SGDM(momentum=-0.1), r"`momentum` must be in \[0, 1\), got momentum=-0\.1\."),
        (lambda: optimizers.SGDM(momentum="0.9"), r"`momentum` must be in \[0, 1\), got momentum='0\.9' \(a str\)\."),
        (
            lambda: optimizers.RAdam(rectify_threshold=NAN),
            r"`rectify_threshold` must be >= 4 and finite .*, got rectify_threshold=nan\.",
        ),
        (
            lambda: optimizers.RAdam(rectify_threshold=INF),
            r"`rectify_threshold` must be >= 4 and finite .*, got rectify_threshold=inf\.",
        ),
        (
            lambda: optimizers.Adam(lr_multipliers={"Embedding-": NAN}),
            r"`lr_multipliers` values must be numbers >= 0 and finite, got lr_multipliers\['Embedding-'\]=nan\.",
        ),
        (
            lambda: optimizers.SGDM(lr_multipliers={"out/": INF}),
            r"`lr_multipliers` values must be numbers >= 0 and finite, got lr_multipliers\['out/'\]=inf\.",
        ),
        (lambda: optimizers.SGDM(lr_multipliers=["out/"]), r"`lr_multipliers` must be a dict \{pattern: multiplier\}"),
        (
            lambda: optimizers.Adam(growth_scales={"dense/kernel": (NAN, 2)}),
            r"`growth_scales\['dense/kernel'\]\[0\]` must be > 0 and finite, got .*=nan\.",
        ),
        (
            lambda: optimizers.Adam(growth_scales={"dense/kernel": (0.5, 0)}),
            r"`growth_scales\['dense/kernel'\]\[1\]` must be > 0 and finite, got .*=0\.",
        ),
    ],
)
def test_float_arguments_finite_and_in_range(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("make", OPTIMIZERS, ids=lambda c: c.__name__)
def test_every_optimizer_checks_the_shared_arguments(make):
    for kwargs, message in [
        ({"learning_rate": NAN}, r"`learning_rate` must be >= 0 and finite, got learning_rate=nan\."),
        ({"accum_steps": 2.5}, r"`accum_steps` must be an integer >= 1"),
        ({"weight_decay": NAN}, r"`weight_decay` must be >= 0 and finite \(or None\), got weight_decay=nan\."),
        ({"lr_multipliers": {"(": 1.0}}, r"`lr_multipliers`: '\(' is not a valid regular expression"),
        ({"exclude_from_weight_decay": "["}, r"`exclude_from_weight_decay`: '\[' is not a valid regular expression"),
    ]:
        with pytest.raises(ValueError, match=message):
            make(**kwargs)


def test_numpy_floats_and_ints_are_numbers():
    optimizer = optimizers.Adam(np.float32(0.01), beta_1=np.float64(0.8), epsilon=np.float32(1e-6))
    assert float(optimizer.learning_rate) == pytest.approx(0.01)
    assert type(optimizer.beta_1) is float and optimizer.beta_1 == 0.8
    assert float(optimizers.SGDM(1).learning_rate) == 1.0  # Keras itself wants a float
    json.dumps(optimizer.get_config())


# Regular expressions compiled when the optimizer is made.


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: optimizers.SGDM(0.1, lr_multipliers={"Embedding-[": 0.5}),
            r"`lr_multipliers`: 'Embedding-\[' is not a valid regular expression: unterminated character set",
        ),
        (
            lambda: optimizers.AdamW(exclude_from_weight_decay=["Norm", "(bias"]),
            r"`exclude_from_weight_decay`: '\(bias' is not a valid regular expression: missing \)",
        ),
        (
            lambda: optimizers.AdamW(exclude_from_weight_decay="*bias"),
            r"`exclude_from_weight_decay`: '\*bias' is not a valid regular expression: nothing to repeat",
        ),
        (
            lambda: optimizers.Adam(lr_multipliers={3: 0.5}),
            r"`lr_multipliers` takes regular expressions \(strings\), got 3 \(an int\)",
        ),
    ],
)
def test_invalid_regular_expressions_are_refused_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# Schedules: their own arguments, and their values where an optimizer uses them.


class NanAtStart(keras.optimizers.schedules.LearningRateSchedule):
    def __call__(self, step):
        return keras.ops.where(keras.ops.equal(step, 0), NAN, 1e-3)


class NegativeAtBreakpoint(keras.optimizers.schedules.LearningRateSchedule):
    """Fine at step 0, negative from update 500 on: found through `breakpoints`."""

    breakpoints = (500,)

    def __call__(self, step):
        return keras.ops.where(keras.ops.less(step, 500), 1e-3, -1e-3)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: optimizers.WarmupDecay(NAN, 10, 100), r"`peak` must be >= 0 and finite, got peak=nan\."),
        (lambda: optimizers.WarmupDecay(-1e-3, 10, 100), r"`peak` must be >= 0 and finite, got peak=-0\.001\."),
        (lambda: optimizers.WarmupDecay(1e-3, 10, 100, end=NAN), r"`end` must be >= 0 and finite, got end=nan\."),
        (
            lambda: optimizers.WarmupDecay(1e-3, 10.5, 100),
            r"`warmup_steps` must be an integer >= 0, got warmup_steps=10\.5\.",
        ),
        (
            lambda: optimizers.WarmupDecay(1e-3, 10, INF),
            r"`total_steps` must be an integer >= 0, got total_steps=inf\.",
        ),
        (
            lambda: optimizers.PiecewiseLinear(1e-3, {1000: -1.0}),
            r"`schedule` values must be numbers >= 0 and finite, got schedule\[1000\]=-1\.0\.",
        ),
        (
            lambda: optimizers.PiecewiseLinear(1e-3, {0: 1.0, 1000: NAN}),
            r"`schedule` values must be numbers >= 0 and finite, got schedule\[1000\]=nan\.",
        ),
        (
            lambda: optimizers.PiecewiseLinear(NAN, {1000: 1.0}),
            r"`learning_rate` must be >= 0 and finite, got learning_rate=nan\.",
        ),
        (
            lambda: optimizers.PiecewiseLinear(1e-3, {1000.5: 1.0}),
            r"`schedule` needs steps >= 0 \(integers\), got step 1000\.5",
        ),
        (lambda: optimizers.PiecewiseLinear(1e-3, {1000: 1.0, "1000": 0.5}), r"`schedule` gives step 1000 twice"),
        (lambda: optimizers.PiecewiseLinear(1e-3, [1.0]), r"`schedule` must be a dict \{step: multiplier\}"),
        (
            lambda: optimizers.Adam(NanAtStart()),
            r"`learning_rate` must be >= 0 and finite, got NanAtStart\(step=0\)=nan\.",
        ),
        (lambda: optimizers.SGDM(lambda: NAN), r"`learning_rate` must be >= 0 and finite, got <lambda>\(\)=nan\."),
        (
            lambda: optimizers.RAdam(NegativeAtBreakpoint()),
            r"`learning_rate` must be >= 0 and finite, got NegativeAtBreakpoint\(step=500\)=-0\.001\.",
        ),
        (
            lambda: optimizers.AdamW(keras.optimizers.schedules.PiecewiseConstantDecay([10], [1e-3, -1e-3])),
            r"`learning_rate` must be >= 0 and finite, got PiecewiseConstantDecay\(step=11\)=-0\.001\.",
        ),
    ],
)
def test_schedules_with_nan_or_negative_rates(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_schedules_that_are_fine_are_taken_as_they_are():
    warmup = optimizers.WarmupDecay(1e-3, 1e2, np.int64(1000), decay="cosine")
    assert (warmup.warmup_steps, warmup.total_steps) == (100, 1000) and warmup.breakpoints == (0, 100, 1000)
    piecewise = optimizers.PiecewiseLinear(np.float32(1e-3), {np.int64(1000): 1.0, 2000: np.float32(0.1)})
    assert piecewise.breakpoints == (0, 1000, 2000)
    again = optimizers.PiecewiseLinear.from_config(piecewise.get_config())  # steps saved as strings
    assert again.points == piecewise.points
    for schedule in (warmup, again, keras.optimizers.schedules.CosineDecay(1e-3, 1000, warmup_steps=100)):
        assert optimizers.Adam(schedule, accum_steps=np.int64(2)).accum_steps == 2
    assert optimizers.SGDM(lambda: 0.01).learning_rate == pytest.approx(0.01)
