"""The one place where kwiden's optimizers and schedules check their arguments.

Each check returns the value as the optimizer keeps it (a float, an int, a
list of patterns) or raises one `ValueError` that names the argument and its
value, when the optimizer or schedule is made rather than at its first step.

>>> number(0.9, "beta_1", at_least=0, below=1)
0.9
>>> number(float("nan"), "beta_1", at_least=0, below=1)
Traceback (most recent call last):
...
ValueError: `beta_1` must be in [0, 1), got beta_1=nan.
>>> patterns("bias", "exclude_from_weight_decay")  # one string is one pattern
['bias']
"""

import math
import numbers
import re
from collections.abc import Mapping

import keras
import numpy as np
from keras import ops

from kwiden.arguments import is_count


def typed(value):
    """`value!r` and its type: `'0.1' (a str)`."""
    kind = type(value).__name__
    return f"{value!r} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"


def describe(value):
    """`value!r`, and its type where the repr does not show that it is no number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        return typed(value)
    return repr(value)


def number(value, name, *, at_least=None, above=None, below=None, hint=None, subject=None, noun=None):
    """`value` as a float if it is a finite real number (not a bool) with
    `value >= at_least`, `value > above`, `value < below` (each bound optional);
    otherwise a ValueError "`name` must be …, got name=value." (`subject`
    replaces "`name`" and `noun` comes before the range: "`lr_multipliers`
    values must be numbers >= 0 …")."""
    if at_least is not None and below is not None:
        wanted = f"in [{at_least:g}, {below:g})"
    else:
        bounds = [f">= {at_least:g}"] if at_least is not None else []
        bounds += [f"> {above:g}"] if above is not None else []
        bounds += [f"< {below:g}"] if below is not None else []
        wanted = " and ".join(bounds + ["finite"])
    if noun:
        wanted = f"{noun} {wanted}"
    try:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
    except OverflowError:  # an int beyond floats
        ok = False
    if ok:
        ok = (
            (at_least is None or value >= at_least)
            and (above is None or value > above)
            and (below is None or value < below)
        )
    if not ok:
        hint = f" ({hint})" if hint else ""
        raise ValueError(f"{subject or f'`{name}`'} must be {wanted}{hint}, got {name}={describe(value)}.")
    return float(value)


def integer(value, name, *, at_least, whole_floats=False, hint=None):
    """`value` as an int if it is an integer (any `numbers.Integral`, such as
    `np.int64`, not a bool; with `whole_floats` also a float such as `1e4`)
    `>= at_least`; otherwise a ValueError naming it."""
    whole_float = (
        whole_floats
        and isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and float(value).is_integer()
        and value >= at_least
    )
    if not (is_count(value, at_least) or whole_float):
        hint = f" ({hint})" if hint else ""
        raise ValueError(f"`{name}` must be an integer >= {at_least}{hint}, got {name}={describe(value)}.")
    return int(value)


def pattern(value, name):
    """`value` if it is a valid regular expression; otherwise a ValueError
    naming the argument, the pattern and the regular expression's error."""
    if not isinstance(value, str):
        raise ValueError(f"`{name}` takes regular expressions (strings), got {typed(value)}.")
    try:
        re.compile(value)
    except re.error as error:
        raise ValueError(f"`{name}`: {value!r} is not a valid regular expression: {error}.") from None
    return value


def patterns(value, name):
    """A list of regular expressions: None gives none, one string is one
    pattern (not its characters), any other iterable its items."""
    if value is None:
        return []
    if isinstance(value, str):
        return [pattern(value, name)]
    if isinstance(value, Mapping) or not hasattr(value, "__iter__"):
        raise ValueError(f"`{name}` must be a regular expression or a list of them, got {name}={describe(value)}.")
    return [pattern(item, name) for item in value]


def multipliers(value, name="lr_multipliers"):
    """`{pattern: multiplier}`, each pattern a valid regular expression and
    each multiplier a finite number >= 0, in the order given."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"`{name}` must be a dict {{pattern: multiplier}}, got {name}={describe(value)}.")
    return {
        pattern(key, name): number(
            multiplier, f"{name}[{key!r}]", at_least=0, subject=f"`{name}` values", noun="numbers"
        )
        for key, multiplier in value.items()
    }


def growth_scales(value, name="growth_scales"):
    """`{variable path: (c, copies)}` with `c` and `copies` finite and > 0
    (`copies` is a whole number but where a relaxation was folded in)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"`{name}` must be a dict {{variable path: (c, copies)}}, got {name}={describe(value)}.")
    scales = {}
    for path, scale in value.items():
        try:
            c, copies = scale
        except (TypeError, ValueError):
            raise ValueError(f"`{name}` values must be pairs (c, copies), got {name}[{path!r}]={scale!r}.") from None
        scales[str(path)] = (
            number(c, f"{name}[{path!r}][0]", above=0),
            number(copies, f"{name}[{path!r}][1]", above=0),
        )
    return scales


def slice_multipliers(value, name="slice_multipliers"):
    """`{variable path: [vector or None per axis]}`, each vector a list of
    finite numbers >= 0 (shapes are checked against the variables when the
    optimizer is built)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(
            f"`{name}` must be a dict {{variable path: [vector or None per axis]}}, got {name}={describe(value)}."
        )
    checked = {}
    for path, vectors in value.items():
        label = f"{name}[{path!r}]"
        if isinstance(vectors, (str, Mapping)) or not hasattr(vectors, "__iter__"):
            raise ValueError(f"`{label}` must be a list with one vector (or None) per axis, got {describe(vectors)}.")
        checked[str(path)] = [None if v is None else _vector(v, f"{label}[{axis}]") for axis, v in enumerate(vectors)]
    return checked


def _vector(value, label):
    try:
        array = np.asarray(value, dtype="float64")
    except (TypeError, ValueError):
        raise ValueError(f"`{label}` must be a list of numbers >= 0, got {describe(value)}.") from None
    if array.ndim != 1 or not len(array) or not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError(f"`{label}` must be a non-empty list of finite numbers >= 0, got {value!r}.")
    return [float(v) for v in array]


def slice_warmup(value, name="slice_warmup"):
    """None, or `(start, steps)`: integers, start >= 0 and steps >= 1."""
    if value is None:
        return None
    try:
        start, steps = value
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be None or a pair (start, steps), got {name}={describe(value)}.") from None
    return (
        integer(start, f"{name}[0]", at_least=0, whole_floats=True, hint="the update the warmup starts from"),
        integer(steps, f"{name}[1]", at_least=1, whole_floats=True, hint="updates to climb to 1"),
    )


def schedule_points(value, name="schedule"):
    """`{step: value}` (steps as ints, or strings of them from a saved
    config) as a sorted list of `(step, value)`, steps >= 0 and values finite
    and >= 0."""
    try:
        items = list(dict(value).items())
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a dict {{step: multiplier}}, got {name}={describe(value)}.") from None
    points = {}
    for step, multiplier in items:
        try:
            whole = int(step) if isinstance(step, str) else integer(step, name, at_least=0, whole_floats=True)
        except ValueError:
            whole = -1
        if whole < 0:
            raise ValueError(f"`{name}` needs steps >= 0 (integers), got step {step!r} in {name}={value!r}.")
        if whole in points:
            raise ValueError(f"`{name}` gives step {whole} twice, in {name}={value!r}.")
        points[whole] = number(multiplier, f"{name}[{step!r}]", at_least=0, subject=f"`{name}` values", noun="numbers")
    if not points:
        raise ValueError(f"`{name}` needs steps >= 0, got {name}={value!r}.")
    return sorted(points.items())


# Where Keras' own schedules change course: PiecewiseConstantDecay's
# boundaries, the decays' decay_steps, CosineDecay's warmup_steps, … .
KERAS_SCHEDULE_STEPS = ("boundaries", "decay_steps", "warmup_steps", "first_decay_steps")


def schedule_steps(schedule):
    """The updates at which a schedule is checked: 0, and its `breakpoints`
    (kwiden's schedules) or the steps a Keras schedule names, each with the
    step after it (where a piecewise constant schedule takes its next value)."""
    named = getattr(schedule, "breakpoints", None)
    if callable(named):
        named = named()
    if named is None:
        named = []
        for attribute in KERAS_SCHEDULE_STEPS:
            steps = getattr(schedule, attribute, None)
            named += list(steps) if isinstance(steps, (list, tuple)) else [steps]
    steps = {0}
    for step in named:
        if isinstance(step, numbers.Real) and not isinstance(step, bool) and math.isfinite(step) and step >= 0:
            steps |= {int(step), int(step) + 1}
    return sorted(steps)


def learning_rate(value, name="learning_rate"):
    """A learning rate as Keras' optimizers take it: a finite number >= 0
    (returned as a float, which Keras wants, so that `1` and `np.float32(0.1)`
    do too), or a `LearningRateSchedule` or callable whose values at
    `schedule_steps` are finite and >= 0 (returned as given)."""
    if isinstance(value, keras.optimizers.schedules.LearningRateSchedule):
        step_dtype = keras.backend.standardize_dtype("int")
        largest = np.iinfo(step_dtype).max
        for step in schedule_steps(value):
            if step <= largest:
                rate = value(ops.convert_to_tensor(step, dtype=step_dtype))
                scalar(rate, name, f"{type(value).__name__}(step={step})")
        return value
    if callable(value):
        scalar(value(), name, f"{getattr(value, '__name__', type(value).__name__)}()")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"`{name}` must be a number >= 0, a `keras.optimizers.schedules.LearningRateSchedule` "
            f"or a callable, got {name}={describe(value)}."
        )
    return number(value, name, at_least=0)


def scalar(rate, name, label):
    """Check one value of a schedule: a finite number >= 0."""
    array = np.asarray(ops.convert_to_numpy(rate))
    if array.shape != () or array.dtype.kind not in "fiu":
        raise ValueError(
            f"`{name}` must give one number per step, got {label} = {rate!r} (shape {array.shape}, {array.dtype})."
        )
    # str() then float(): float32 values shown as float32 writes them (-0.001).
    number(float(str(array[()])), label, at_least=0, subject=f"`{name}`")
