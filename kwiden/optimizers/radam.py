import keras
from keras import ops

from kwiden.optimizers import arguments
from kwiden.optimizers.adam import Adam


@keras.saving.register_keras_serializable(package="kwiden")
class RAdam(Adam):
    """Rectified Adam (Liu et al., 2020), accumulating `accum_steps` micro-batches.

    Early in training the adaptive rate `1/√v̂` has a large variance; RAdam
    multiplies it by the rectification
    `r_t = √((ρ_t − 4)(ρ_t − 2)ρ∞ / ((ρ∞ − 4)(ρ∞ − 2)ρ_t))`, with
    `ρ∞ = 2/(1 − β₂) − 1` and `ρ_t = ρ∞ − 2t·β₂ᵗ/(1 − β₂ᵗ)`, and while `ρ_t` is
    at most `rectify_threshold` it takes the plain momentum step
    `θ ← θ − lr·m̂` instead (`m̂ = m/(1 − β₁ᵗ)`). Otherwise
    `θ ← θ − lr·r_t·m̂/(√v̂ + ε)` with `v̂ = v/(1 − β₂ᵗ)`.

    The threshold: `r_t` is real only for `ρ_t > 4` (the paper's condition), but
    just above 4 the variance estimate behind it rests on a handful of updates;
    the authors' released code uses 5, and so do we by default (with β₂ = 0.999
    the first 5 updates are momentum steps, then rectified Adam).

    Args:
        rectify_threshold: `ρ_t` above which the adaptive step is taken.
        Others as `Adam`.
    """

    def __init__(self, learning_rate=0.001, rectify_threshold=5.0, name="radam", **kwargs):
        rectify_threshold = arguments.number(
            rectify_threshold, "rectify_threshold", at_least=4, hint="the rectification is undefined below ρ_t = 4"
        )
        super().__init__(learning_rate, name=name, **kwargs)
        self.rectify_threshold = rectify_threshold

    def update_step(self, gradient, variable, learning_rate):
        m, v, t = self.moments(gradient, variable)
        dtype = variable.dtype
        rectify, rectification, m_scale, v_scale = self.per_step(("radam", dtype), lambda: self._scalars(t, dtype))
        m_hat = m * m_scale
        adaptive = rectification * m_hat / (ops.sqrt(v * v_scale) + self.epsilon_of(variable))
        # After growth the adaptive step shrinks with the tensor (c) and the
        # momentum step like SGD's (c²·K); see `step_scale`.
        c, copies = self.growth_of(variable)
        step = ops.where(rectify, adaptive * self.relax(c, dtype), m_hat * self.relax(c * c * copies, dtype))
        self.move(variable, step, learning_rate)

    def _scalars(self, t, dtype):
        """Whether to rectify, r_t, 1/(1 − β₁ᵗ) and 1/(1 − β₂ᵗ): step-only
        scalars, made once per step."""
        rho_inf = 2.0 / (1.0 - self.beta_2) - 1.0
        beta_2_t = ops.power(ops.convert_to_tensor(self.beta_2, t.dtype), t)
        rho_t = rho_inf - 2.0 * t * beta_2_t / (1.0 - beta_2_t)
        rectification = ops.sqrt(
            ops.maximum((rho_t - 4.0) * (rho_t - 2.0), 0.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t)
        )
        m_scale = 1.0 / (1.0 - ops.power(ops.convert_to_tensor(self.beta_1, t.dtype), t))
        v_scale = 1.0 / (1.0 - beta_2_t)
        return (
            rho_t > self.rectify_threshold,
            ops.cast(rectification, dtype),
            ops.cast(m_scale, dtype),
            ops.cast(v_scale, dtype),
        )

    def step_scale(self, variable):
        return 1.0  # applied per branch in update_step

    def relaxed_growth(self, c, copies, relaxed):
        # Both branches relaxed: the adaptive one's c and the momentum one's c²·K.
        moved = c + (1.0 - c) * relaxed
        momentum = c * c * copies + (1.0 - c * c * copies) * relaxed
        return moved, momentum / (moved * moved)

    def get_config(self):
        return {**super().get_config(), "rectify_threshold": self.rectify_threshold}
