"""Learning-rate schedules. kwiden's optimizers call them with the number of
parameter updates done (micro-steps // accum_steps), so a schedule written in
updates means the same thing whatever the accumulation."""

import keras
from keras import ops

from kwiden.optimizers import arguments


@keras.saving.register_keras_serializable(package="kwiden")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, `peak` held for
    `hold_steps` more, then linear or cosine decay to `end` at `total_steps`,
    constant after. `peak` and `end` are finite and >= 0, the steps integers
    (`1e4` is 10000).

    >>> schedule = WarmupDecay(1e-3, warmup_steps=10, total_steps=110)
    >>> [round(float(schedule(s)), 6) for s in (0, 5, 10, 60, 110, 200)]
    [0.0, 0.0005, 0.001, 0.0005, 0.0, 0.0]

    Warmup-stable-decay (WSD): the peak held until the last fifth, which decays linearly to 0:

    >>> wsd = WarmupDecay(1e-3, warmup_steps=10, total_steps=110, hold_steps=80)
    >>> [round(float(wsd(s)), 6) for s in (5, 10, 50, 90, 100, 110)]
    [0.0005, 0.001, 0.001, 0.001, 0.0005, 0.0]
    """

    def __init__(self, peak, warmup_steps, total_steps, decay="linear", end=0.0, hold_steps=0):
        if decay not in ("linear", "cosine"):
            raise ValueError(f"`decay` must be 'linear' or 'cosine', got decay={decay!r}.")
        self.peak = arguments.number(peak, "peak", at_least=0)
        self.warmup_steps = arguments.integer(warmup_steps, "warmup_steps", at_least=0, whole_floats=True)
        self.total_steps = arguments.integer(total_steps, "total_steps", at_least=0, whole_floats=True)
        self.hold_steps = arguments.integer(hold_steps, "hold_steps", at_least=0, whole_floats=True)
        if self.warmup_steps + self.hold_steps > self.total_steps:
            held = f", hold_steps={hold_steps}" if self.hold_steps else ""
            raise ValueError(
                f"Need 0 <= warmup_steps{' + hold_steps' * bool(self.hold_steps)} <= total_steps, got "
                f"warmup_steps={warmup_steps}{held}, total_steps={total_steps}."
            )
        self.decay = decay
        self.end = arguments.number(end, "end", at_least=0)

    @property
    def breakpoints(self):
        """The updates where the schedule changes course (checked by the optimizers)."""
        return tuple(dict.fromkeys((0, self.warmup_steps, self.warmup_steps + self.hold_steps, self.total_steps)))

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = self.peak * step / max(self.warmup_steps, 1)
        decay_start = self.warmup_steps + self.hold_steps
        progress = ops.clip((step - decay_start) / max(self.total_steps - decay_start, 1), 0.0, 1.0)
        if self.decay == "cosine":
            fraction = 0.5 * (1.0 + ops.cos(progress * 3.141592653589793))
        else:
            fraction = 1.0 - progress
        decayed = self.end + (self.peak - self.end) * fraction
        return ops.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return dict(
            peak=self.peak,
            warmup_steps=self.warmup_steps,
            total_steps=self.total_steps,
            decay=self.decay,
            end=self.end,
            hold_steps=self.hold_steps,
        )


@keras.saving.register_keras_serializable(package="kwiden")
class PiecewiseLinear(keras.optimizers.schedules.LearningRateSchedule):
    """bert4keras' `piecewise_linear`: `learning_rate` times a multiplier that
    moves linearly between `{step: multiplier}` points, from 0 at step 0 unless
    step 0 is given, and stays at the last one after it.

    >>> schedule = PiecewiseLinear(1e-3, {1000: 1.0, 2000: 0.1})
    >>> [round(float(schedule(s)), 6) for s in (0, 500, 1000, 1500, 2000, 5000)]
    [0.0, 0.0005, 0.001, 0.00055, 0.0001, 0.0001]

    Multipliers and the rate must be finite and >= 0:

    >>> PiecewiseLinear(1e-3, {1000: -1.0})
    Traceback (most recent call last):
    ...
    ValueError: `schedule` values must be numbers >= 0 and finite, got schedule[1000]=-1.0.
    """

    def __init__(self, learning_rate, schedule):
        points = arguments.schedule_points(schedule)
        if points[0][0] != 0:
            points.insert(0, (0, 0.0))
        self.learning_rate = arguments.number(learning_rate, "learning_rate", at_least=0)
        self.points = points

    @property
    def breakpoints(self):
        """The updates where the schedule changes course (checked by the optimizers)."""
        return tuple(step for step, _ in self.points)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        value = ops.convert_to_tensor(self.points[-1][1], "float32")
        for (s0, v0), (s1, v1) in reversed(list(zip(self.points, self.points[1:]))):
            between = v0 + (v1 - v0) * (step - s0) / (s1 - s0)
            value = ops.where(step < s1, between, value)
        return self.learning_rate * value

    def get_config(self):
        return {"learning_rate": self.learning_rate, "schedule": {str(s): v for s, v in self.points}}
