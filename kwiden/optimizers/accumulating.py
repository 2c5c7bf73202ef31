"""The base of kwiden's optimizers: gradient accumulation folded into momentum.

docs/accumulation.md. With `accum_steps = k`, micro-step `t` (counted from 1) adds `g_t / k`
to the first moment, which decays by β only on the first micro-step of each
cycle, and the parameters move on every k-th micro-step. After k micro-steps
the moment holds `β·m + mean(g)`: the optimizer sees the mean gradient of the
k micro-batches, and keeps no buffer beyond its own slots.
"""

import re

import keras
import numpy as np
from keras import ops

from kwiden.keras_internals import variable_index
from kwiden.optimizers import arguments


def scalar_dtype():
    if keras.backend.backend() == "jax":
        import jax

        return "float64" if jax.config.jax_enable_x64 else "float32"
    return "float64"


class AccumulatingOptimizer(keras.optimizers.Optimizer):
    """Shared machinery: the accumulation cycle, learning-rate schedules counted
    in updates, parameter-wise learning-rate multipliers and decoupled weight
    decay with exclusion patterns.

    Every argument is checked when the optimizer is made
    (`kwiden.optimizers.arguments`), not at its first step: numbers must be
    finite and in range, patterns valid regular expressions, and a schedule's
    values finite and ≥ 0 at update 0 and at its breakpoints; a `ValueError`
    names the argument and its value.

    Args:
        learning_rate: a number ≥ 0, a `keras.optimizers.schedules.LearningRateSchedule`
            (called with the number of parameter updates done so far, not
            micro-steps), or a callable (called with no arguments, as Keras does).
            A schedule is checked at update 0 and at its `breakpoints` (kwiden's
            schedules; for Keras' own, the steps they name: `boundaries`,
            `decay_steps`, `warmup_steps`); a callable at construction.
        accum_steps: micro-batches per parameter update (an integer ≥ 1, of any
            integer type: `np.int64(4)` too).
        weight_decay: decoupled weight decay ≥ 0, `θ ← θ − lr·wd·θ` on each update
            (before the gradient step, as Keras does), or None.
        exclude_from_weight_decay: a regular expression, or a list of them,
            searched in each variable's path
            (`"Transformer-0-FeedForward/output_bias"`); a variable that matches
            any is not decayed. One string is one pattern: `"bias"` excludes the
            biases. bert4keras users write `["Norm", "bias"]`.
        lr_multipliers: `{pattern: multiplier ≥ 0}`; a variable's learning rate is
            multiplied by the multiplier of the first pattern found in its path
            (as bert4keras' `extend_with_parameter_wise_lr`). Saved in the config.
        growth_scales: `{variable path: (c, copies)}`, set by `kwiden.grow`
            (docs/optimizer-state.md#learning-rate-multipliers): the variable was grown by copying each source
            element `copies` times and scaling by `c`. Each optimizer turns this
            into the step size (and, for Adam, the ε) that keep the grown model
            on the small model's trajectory; weight decay is not affected.
        slice_multipliers: `{variable path: [vector or None per axis]}`:
            learning-rate multipliers finer than a tensor, without a buffer of
            the tensor's size. Element `(i, j, …)` of the variable gets the
            product `v₀[i]·v₁[j]·…` of its axes' vectors (None: 1 along that
            axis), on the step and the weight decay alike; a vector's length
            is its axis' size. `kwiden.grow` sets them to re-warm the new
            copies of grown weights (docs/optimizer-state.md#per-slice-multipliers).
            Saved in the config.
        slice_warmup: None (the slice multipliers hold for good), or
            `(start, steps)`: they hold up to update `start`, then move
            linearly to 1 over the next `steps` updates (at update
            `start + n` a multiplier `m` is `m + (1 − m)·min(n/steps, 1)`),
            counted in updates, so the same under any `accum_steps`.
        growth_relax: None (the growth scales' step multipliers hold for
            good), or `(start, steps)`: they hold up to update `start`, then
            move linearly to 1 over the next `steps` updates, so that a grown
            model starts on the small model's trajectory and ends with one
            learning rate for every tensor (docs/optimizer-state.md#relaxing-to-one-rate).
            ε keeps its growth scale. Set by `kwiden.grow`'s
            `relax_learning_rates`.
        **kwargs: `name`, `clipnorm`, `clipvalue`, `global_clipnorm`,
            `loss_scale_factor`, `use_ema`, … as for any Keras optimizer.
            Clipping applies to each micro-batch's gradient, and the EMA is
            updated on every micro-step (as with Keras' own accumulation).
            Micro-steps of an unfinished cycle at the end of training are
            not applied.
    """

    def __init__(
        self,
        learning_rate,
        accum_steps=1,
        weight_decay=None,
        exclude_from_weight_decay=None,
        lr_multipliers=None,
        growth_scales=None,
        slice_multipliers=None,
        slice_warmup=None,
        growth_relax=None,
        **kwargs,
    ):
        if kwargs.get("gradient_accumulation_steps"):
            raise ValueError(
                f"{type(self).__name__} accumulates inside its momentum: use "
                "`accum_steps`, not `gradient_accumulation_steps` (which would keep "
                "an extra buffer per weight)."
            )
        kwargs.pop("gradient_accumulation_steps", None)
        # Every argument checked before Keras makes any variable.
        learning_rate = arguments.learning_rate(learning_rate)
        accum_steps = arguments.integer(accum_steps, "accum_steps", at_least=1, hint="1: no accumulation")
        if weight_decay is not None:
            weight_decay = arguments.number(weight_decay, "weight_decay", at_least=0, hint="or None")
        exclude_patterns = arguments.patterns(exclude_from_weight_decay, "exclude_from_weight_decay")
        lr_multipliers = arguments.multipliers(lr_multipliers)
        growth_scales = arguments.growth_scales(growth_scales)
        slice_multipliers = arguments.slice_multipliers(slice_multipliers)
        slice_warmup = arguments.slice_warmup(slice_warmup)
        growth_relax = arguments.slice_warmup(growth_relax, "growth_relax")
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.accum_steps = accum_steps
        # Keras' attribute; kwiden applies the decay itself, once per update.
        self.weight_decay = weight_decay
        self.exclude_patterns = exclude_patterns
        self.lr_multipliers = lr_multipliers
        self.growth_scales = growth_scales
        self.slice_multipliers = slice_multipliers
        self.slice_warmup = slice_warmup
        self.growth_relax = growth_relax
        self._step_scalars = _StepScalars()

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._multipliers = [self._multiplier_of(v) for v in variables]
        self._growth = [self.growth_scales.get(v.path, (1.0, 1)) for v in variables]
        self._slices = _slice_vectors(self.slice_multipliers, variables)
        self._decays = [
            self.weight_decay is not None and not any(re.search(p, v.path) for p in self.exclude_patterns)
            for v in variables
        ]

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Keras' API: exclude these variables, or variables whose path contains
        one of these names (plain text, not regular expressions), from weight
        decay. One variable or one name may be given alone. Call before the
        optimizer is built (its first step)."""
        if self.built:
            raise ValueError(
                "`exclude_from_weight_decay()` can only be configured before the optimizer is built "
                "(its first step); pass `exclude_from_weight_decay=` patterns to the constructor instead."
            )
        if isinstance(var_list, keras.Variable):
            var_list = [var_list]
        if isinstance(var_names, str):
            var_names = [var_names]
        for name in var_names or []:
            if not isinstance(name, str):
                raise ValueError(f"`var_names` takes strings, got {arguments.typed(name)}.")
        self.exclude_patterns += [f"^{re.escape(v.path)}$" for v in var_list or []]
        self.exclude_patterns += [re.escape(name) for name in var_names or []]

    def _apply_weight_decay(self, variables):
        """Keras would decay on every micro-step; `move` decays once per update."""

    def _multiplier_of(self, variable):
        for pattern, multiplier in self.lr_multipliers.items():
            if re.search(pattern, variable.path):
                return multiplier
        return 1.0

    @property
    def updates_done(self):
        """Parameter updates completed so far (micro-steps // accum_steps)."""
        return self.iterations // self.accum_steps

    def _get_current_learning_rate(self):
        schedule = self._learning_rate
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            return schedule(self.updates_done)
        return super()._get_current_learning_rate()

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        # Scalars that depend on the step alone (the cycle's factors, bias
        # corrections, lr·correction) are made once here and shared by every
        # variable: made per variable, they cost ~15 ops each, which is most of
        # the optimizer's tracing time and of its eager step. Kept only for the
        # duration of the call, so no tensor outlives its graph (tf.function,
        # a LossScaleOptimizer's cond branch, a JAX trace).
        self._step_scalars.open()
        try:
            super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            self._step_scalars.close()

    def per_step(self, key, make):
        """`make()`, made once per step for each `key` (outside a step, e.g. an
        `update_step` called directly, made on every call)."""
        return self._step_scalars.get(key, make)

    # The cycle, as 0/1 factors: arithmetic rather than branches, so that one
    # update_step serves TensorFlow graphs, tf.distribute, JAX and PyTorch.

    def cycle_start(self, dtype):
        """1 on the first micro-step of a cycle (moments decay), else 0."""
        if self.accum_steps == 1:
            return 1.0
        return self.per_step(
            ("cycle_start", dtype),
            lambda: ops.cast(ops.equal(self.iterations % self.accum_steps, 0), dtype),
        )

    def cycle_end(self, dtype):
        """1 on the last micro-step of a cycle (parameters move), else 0."""
        if self.accum_steps == 1:
            return 1.0
        return self.per_step(
            ("cycle_end", dtype),
            lambda: ops.cast(ops.equal((self.iterations + 1) % self.accum_steps, 0), dtype),
        )

    def update_number(self):
        """The number of the update this cycle completes (1 for the first), in
        float64 where the backend allows: bias corrections and RAdam's ρ_t
        subtract nearly equal numbers early in training."""
        return self.per_step("update_number", lambda: ops.cast(self.updates_done + 1, scalar_dtype()))

    def update_rate(self, learning_rate, dtype):
        """The learning rate on a cycle's last micro-step, 0 on the others."""
        if self.accum_steps == 1:
            return self.per_step(("rate", dtype), lambda: ops.cast(learning_rate, dtype))
        return self.per_step(("rate", dtype), lambda: ops.cast(learning_rate, dtype) * self.cycle_end(dtype))

    def accumulate(self, moment, value, weight, decay, dtype):
        """`moment ← decay·moment + (weight/k)·value` on a cycle's first
        micro-step, else `moment ← moment + (weight/k)·value`."""
        if self.accum_steps == 1:
            keep = decay
        else:
            keep = self.per_step(("keep", decay, dtype), lambda: 1.0 - self.cycle_start(dtype) * (1.0 - decay))
        # ops.* rather than operators: `value` may be sparse (tf.IndexedSlices).
        self.assign(moment, ops.add(ops.multiply(moment, keep), ops.multiply(value, weight / self.accum_steps)))

    def growth_of(self, variable):
        """`(c, copies)` of a grown variable, `(1, 1)` for others."""
        return self._growth[variable_index(self, variable)]

    def step_scale(self, variable):
        """The step multiplier that follows the small model's trajectory after
        growth: Adam-like steps are normalised, so the step shrinks with the
        tensor, `c` (SGDM overrides this)."""
        return self.growth_of(variable)[0]

    def move(self, variable, step, learning_rate, step_rate=None):
        """On a cycle's last micro-step: decay the weight, then `θ ← θ − lr·step`.
        `step_rate`, if given, replaces `update_rate(learning_rate)` in the
        step (not in the decay): a per-step scalar that folds the rate with the
        step's own factors, so that the tensor is multiplied once."""
        index = variable_index(self, variable)
        dtype = variable.dtype
        rate = self.update_rate(learning_rate, dtype)
        multiplier = self._multipliers[index]
        if self._decays[index]:
            decay = multiplier * self.weight_decay
            self.assign_sub(variable, self.sliced(index, variable * (rate * decay)))
        scale = self.relax(self.step_scale(variable), dtype)
        if multiplier != 1.0:
            scale = scale * multiplier
        step_rate = rate if step_rate is None else step_rate
        if not (isinstance(scale, float) and scale == 1.0):
            step_rate = step_rate * scale
        self.assign_sub(variable, self.sliced(index, step * step_rate))

    def relax(self, scale, dtype):
        """A growth's step multiplier `scale` as `growth_relax` has moved it
        to 1 by this update (`scale` itself without a relaxation)."""
        if self.growth_relax is None or scale == 1.0:
            return scale
        relaxed = self.per_step(("relaxed", dtype), lambda: self.ramp(self.growth_relax, dtype))
        return scale + (1.0 - scale) * relaxed

    def ramp(self, window, dtype):
        """How far a `(start, steps)` window (`slice_warmup`, `growth_relax`)
        has moved its multipliers to 1 on this update: 0 up to `start`, 1
        from `steps` updates later on."""
        start, steps = window
        return ops.clip(ops.cast(self.updates_done + 1 - start, dtype) / steps, 0.0, 1.0)

    def relaxed_after(self, updates):
        """`ramp` of `growth_relax` on the last of `updates` updates done, as
        a float (0 without a relaxation): where a later growth finds it."""
        if self.growth_relax is None:
            return 0.0
        start, steps = self.growth_relax
        return min(max((updates - start) / steps, 0.0), 1.0)

    def relaxed_growth(self, c, copies, relaxed):
        """`(c, copies)` whose step multiplier is this growth's moved to 1 by
        the fraction `relaxed`, and whose ε scale `c·copies` is kept: how a
        later growth takes in an earlier one's relaxation (Adam-like steps
        scale with `c`; SGDM and RAdam override)."""
        moved = c + (1.0 - c) * relaxed
        return moved, c * copies / moved

    def sliced(self, index, delta):
        """`delta` times the variable's slice multipliers (at this update
        of their warmup), or `delta` itself for a variable without them."""
        vectors = self._slices[index]
        if vectors is None:
            return delta
        scaled = delta
        for axis, vector in enumerate(vectors):
            if vector is not None:
                shape = [1] * len(vectors)
                shape[axis] = -1
                scaled = scaled * ops.convert_to_tensor(vector.reshape(shape), delta.dtype)
        if self.slice_warmup is None:
            return scaled
        return scaled + (delta - scaled) * self.ramp(self.slice_warmup, delta.dtype)

    def get_config(self):
        config = super().get_config()
        config.pop("gradient_accumulation_steps", None)
        config.update(
            accum_steps=self.accum_steps,
            weight_decay=self.weight_decay,
            exclude_from_weight_decay=self.exclude_patterns,
            lr_multipliers=self.lr_multipliers,
            growth_scales={k: list(v) for k, v in self.growth_scales.items()},
            slice_multipliers={
                k: [None if v is None else list(v) for v in vectors] for k, vectors in self.slice_multipliers.items()
            },
            slice_warmup=None if self.slice_warmup is None else list(self.slice_warmup),
            growth_relax=None if self.growth_relax is None else list(self.growth_relax),
        )
        return config


class _StepScalars:
    """The per-step cache of `AccumulatingOptimizer.per_step`: a plain object,
    so that TensorFlow's tracking does not wrap it as it wraps dicts."""

    def __init__(self):
        self.values = None

    def open(self):
        self.values = {}

    def close(self):
        self.values = None

    def get(self, key, make):
        if self.values is None:
            return make()
        if key not in self.values:
            self.values[key] = make()
        return self.values[key]


def _slice_vectors(slice_multipliers, variables):
    """Per variable, its slice multipliers as numpy vectors (or None),
    checked against its shape."""
    by_path = {v.path: v for v in variables}
    unknown = sorted(set(slice_multipliers) - set(by_path))
    if unknown:
        raise ValueError(
            f"`slice_multipliers` names {unknown[0]!r}, but the optimizer is built on no variable with that path "
            f"(its variables: {', '.join(sorted(by_path)[:5])}{', …' if len(by_path) > 5 else ''})."
        )
    vectors = []
    for variable in variables:
        given = slice_multipliers.get(variable.path)
        if given is None:
            vectors.append(None)
            continue
        shape = tuple(variable.shape)
        if len(given) != len(shape) or any(v is not None and len(v) != n for v, n in zip(given, shape)):
            lengths = [None if v is None else len(v) for v in given]
            raise ValueError(
                f"`slice_multipliers[{variable.path!r}]` must give one vector (or None) per axis of the "
                f"variable's shape {shape}, each as long as its axis; got vectors of lengths {lengths}."
            )
        vectors.append([None if v is None else np.asarray(v, "float32") for v in given])
    return vectors
