import keras
from keras import ops

from kwiden.keras_internals import variable_index
from kwiden.optimizers import arguments
from kwiden.optimizers.accumulating import AccumulatingOptimizer


@keras.saving.register_keras_serializable(package="kwiden")
class SGDM(AccumulatingOptimizer):
    """SGD with momentum, accumulating `accum_steps` micro-batches in the momentum.

    Each cycle of `accum_steps` micro-steps: `m ← β·m + mean(g)`, built up as
    `m ← β·m + g₁/k`, then `m ← m + gᵢ/k`; on the last micro-step
    `θ ← θ − lr·m`. With `accum_steps=1` this is `keras.optimizers.SGD(lr,
    momentum=β)` (Keras keeps `−lr·m` in its slot; with a constant rate the two
    are the same). docs/accumulation.md writes the moment as an average, `(1 − β)/k · g`;
    that is this optimizer with `lr·(1 − β)`. No buffer beyond the momentum.

    Args:
        learning_rate: float, schedule (counted in updates) or callable.
        momentum: β in [0, 1).
        nesterov: Nesterov momentum, `θ ← θ − lr·(g + β·m)`; only with
            `accum_steps=1`, since it needs the cycle's mean gradient, which
            accumulation does not keep.
        accum_steps, weight_decay, exclude_from_weight_decay, lr_multipliers,
        **kwargs: see `AccumulatingOptimizer`.

    Example:

    >>> import keras, kwiden
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    >>> model.compile(kwiden.optimizers.SGDM(0.01, accum_steps=4), "mse")
    """

    def __init__(self, learning_rate=0.01, momentum=0.9, nesterov=False, accum_steps=1, name="sgdm", **kwargs):
        momentum = arguments.number(momentum, "momentum", at_least=0, below=1)
        super().__init__(learning_rate, accum_steps=accum_steps, name=name, **kwargs)
        if nesterov and self.accum_steps > 1:
            raise ValueError(
                "SGDM(nesterov=True) needs each update's mean gradient, which accumulation "
                "inside the momentum does not keep; use nesterov=False with accum_steps > 1."
            )
        self.momentum = momentum
        self.nesterov = nesterov

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum")

    def update_step(self, gradient, variable, learning_rate):
        gradient = ops.cast(gradient, variable.dtype)
        m = self.momentums[variable_index(self, variable)]
        self.accumulate(m, gradient, 1.0, self.momentum, variable.dtype)
        step = ops.add(gradient, ops.multiply(m, self.momentum)) if self.nesterov else m
        self.move(variable, step, learning_rate)

    def step_scale(self, variable):
        # The grown gradient is g/(c·K) and SGD's step is lr·g: c²·K brings it
        # back to c times the small model's step.
        c, copies = self.growth_of(variable)
        return c * c * copies

    def relaxed_growth(self, c, copies, relaxed):
        # The step multiplier is c²·K: relax it, keep K (SGDM has no ε).
        moved = c * c * copies + (1.0 - c * c * copies) * relaxed
        return (moved / copies) ** 0.5, copies

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}
