import keras
from keras import ops

from kwiden.keras_internals import variable_index
from kwiden.optimizers import arguments
from kwiden.optimizers.accumulating import AccumulatingOptimizer


@keras.saving.register_keras_serializable(package="kwiden")
class Adam(AccumulatingOptimizer):
    """Adam, accumulating `accum_steps` micro-batches in its moments.

    First moment: exactly Adam's on the cycle's mean gradient,
    `m ← β₁·m + (1 − β₁)·mean(g)`. Second moment: the same with `g²`, i.e.
    `v ← β₂·v + (1 − β₂)·mean(g²)`: the mean of squares, not the square of the
    mean (it is larger by the micro-batches' gradient variance; that is the
    approximation that spares the buffer). Bias corrections count updates.
    With `accum_steps=1` this is `keras.optimizers.Adam` step for step:
    `θ ← θ − lr·√(1 − β₂ᵗ)/(1 − β₁ᵗ) · m/(√v + ε)`.

    Args:
        learning_rate: float, schedule (counted in updates) or callable.
        beta_1, beta_2, epsilon: as in `keras.optimizers.Adam` (β in [0, 1),
            ε > 0).
        accum_steps, weight_decay, exclude_from_weight_decay, lr_multipliers,
        **kwargs: see `AccumulatingOptimizer`.

    Example:

    >>> import keras, kwiden
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    >>> model.compile(kwiden.optimizers.Adam(1e-3, accum_steps=8), "mse")
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-7,
        accum_steps=1,
        name="adam",
        **kwargs,
    ):
        beta_1 = arguments.number(beta_1, "beta_1", at_least=0, below=1)
        beta_2 = arguments.number(beta_2, "beta_2", at_least=0, below=1)
        epsilon = arguments.number(epsilon, "epsilon", above=0, hint="it keeps m/(√v + ε) finite where v is 0")
        super().__init__(learning_rate, accum_steps=accum_steps, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums, self.velocities = self.add_optimizer_variables(variables, ["momentum", "velocity"])

    def moments(self, gradient, variable):
        """Accumulate both moments; return them and the update number t."""
        gradient = ops.cast(gradient, variable.dtype)
        index = variable_index(self, variable)
        m, v = self.momentums[index], self.velocities[index]
        self.accumulate(m, gradient, 1.0 - self.beta_1, self.beta_1, variable.dtype)
        self.accumulate(v, ops.square(gradient), 1.0 - self.beta_2, self.beta_2, variable.dtype)
        return m, v, self.update_number()

    def update_step(self, gradient, variable, learning_rate):
        m, v, _ = self.moments(gradient, variable)
        dtype = variable.dtype
        # α = lr·√(1 − β₂ᵗ)/(1 − β₁ᵗ) as one scalar per step, as Keras does, so
        # that the tensor is multiplied once.
        alpha = self.per_step(("alpha", dtype), lambda: self.update_rate(learning_rate, dtype) * self.correction(dtype))
        step = ops.divide(m, ops.add(ops.sqrt(v), self.epsilon_of(variable)))
        self.move(variable, step, learning_rate, step_rate=alpha)

    def correction(self, dtype):
        """Adam's bias correction `√(1 − β₂ᵗ)/(1 − β₁ᵗ)`, t counted in updates."""
        t = self.update_number()
        beta_1, beta_2 = (ops.convert_to_tensor(beta, t.dtype) for beta in (self.beta_1, self.beta_2))
        correction = ops.sqrt(1.0 - ops.power(beta_2, t)) / (1.0 - ops.power(beta_1, t))
        return ops.cast(correction, dtype)

    def epsilon_of(self, variable):
        """ε, divided by c·K for a grown variable: its second moment was divided
        by (c·K)², so this keeps `m/(√v + ε)` exactly the small model's."""
        c, copies = self.growth_of(variable)
        return self.epsilon / (c * copies)

    def get_config(self):
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
        }


@keras.saving.register_keras_serializable(package="kwiden")
class AdamW(Adam):
    """Adam with decoupled weight decay (`keras.optimizers.AdamW`'s rule),
    accumulating `accum_steps` micro-batches; LayerNorm parameters and biases
    are not decayed by default.

    Args:
        weight_decay: the decay rate, ≥ 0 (Keras' default, 0.004).
        exclude_from_weight_decay: a regular expression or a list of them,
            searched in variable paths; default `("gamma", "beta", "bias")`.
            One string is one pattern.
        Others as `Adam`.

    Example: decay everything but the biases.

    >>> import keras, numpy as np, kwiden
    >>> kernel = keras.Variable(np.ones(2, "float32"), name="kernel")
    >>> bias = keras.Variable(np.ones(2, "float32"), name="bias")
    >>> optimizer = kwiden.optimizers.AdamW(0.1, weight_decay=0.5, exclude_from_weight_decay="bias")
    >>> optimizer.apply([np.zeros(2, "float32")] * 2, [kernel, bias])
    >>> print(keras.ops.convert_to_numpy(kernel), keras.ops.convert_to_numpy(bias))
    [0.95 0.95] [1. 1.]
    """

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay=0.004,
        exclude_from_weight_decay=("gamma", "beta", "bias"),
        name="adamw",
        **kwargs,
    ):
        if weight_decay is None:
            raise ValueError("AdamW needs a `weight_decay` (a float >= 0); use Adam for none.")
        super().__init__(
            learning_rate,
            weight_decay=weight_decay,
            exclude_from_weight_decay=exclude_from_weight_decay,
            name=name,
            **kwargs,
        )
