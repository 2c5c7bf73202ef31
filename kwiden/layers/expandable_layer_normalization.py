import keras
from keras import ops

from kwiden.growth.expansion import ISOMETRY, OUT, Growth, GrowthError, Space
from kwiden.layers.expandable import Expandable, default_space


@keras.saving.register_keras_serializable(package="kwiden")
class ExpandableLayerNormalization(Expandable, keras.layers.Layer):
    """LayerNorm over the last axis, or RMSNorm with `rms=True, center=False`.

    `y = γ ⊙ (x − mean(x)) / sqrt(var(x) + ε) + β`; with `rms=True` the mean is
    not subtracted and the mean square replaces the variance. Statistics are
    computed in float32 whatever the dtype policy.

    Growth (docs/widening.md#layernorm-and-rmsnorm): copies keep the mean and variance, and an input at
    scale `s` scales both, so the grown layer uses `ε·s²` and stays exact; γ
    and β are copied at the stream scale.

    Args:
        epsilon: added to the variance (or mean square).
        center: whether to add the offset β.
        scale: whether to multiply by γ.
        rms: RMSNorm: do not subtract the mean.
        gamma_initializer, beta_initializer: initializers of γ and β.

    Example:

    >>> import numpy as np
    >>> norm = ExpandableLayerNormalization(epsilon=1e-3)
    >>> tuple(norm(np.random.rand(2, 5, 8).astype("float32")).shape)
    (2, 5, 8)
    """

    def __init__(
        self,
        epsilon=1e-12,
        center=True,
        scale=True,
        rms=False,
        gamma_initializer="ones",
        beta_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)
        self.center = center
        self.scale = scale
        self.rms = rms
        self.gamma_initializer = keras.initializers.get(gamma_initializer)
        self.beta_initializer = keras.initializers.get(beta_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        dim = input_shape[-1]
        if self.scale:
            self.gamma = self.add_weight(shape=(dim,), initializer=self.gamma_initializer, name="gamma")
        if self.center:
            self.beta = self.add_weight(shape=(dim,), initializer=self.beta_initializer, name="beta")

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        if not self.rms:
            x = x - ops.mean(x, axis=-1, keepdims=True)
        x = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        if self.scale:
            x = x * ops.cast(self.gamma, "float32")
        if self.center:
            x = x + ops.cast(self.beta, "float32")
        return ops.cast(x, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
            "rms": self.rms,
            "gamma_initializer": keras.initializers.serialize(self.gamma_initializer),
            "beta_initializer": keras.initializers.serialize(self.beta_initializer),
        }

    def get_expanded_config(self, k, input_space=None):
        input_space = default_space(k, input_space)
        self._check_exact(Growth.of(k), input_space)
        return {**self.get_config(), "epsilon": self.epsilon * input_space.mean_square_scale}

    def _check_exact(self, growth, input_space):
        """Under unequal copy counts only RMSNorm on the stream stays exact
        (docs/non-integer.md): the mean of the grown vector weighs coordinates by
        their number of copies."""
        if input_space.even:
            return
        what = f"ExpandableLayerNormalization '{self.name}'"
        if self.rms and input_space.scale != ISOMETRY:
            growth.refuse_approximation(
                what,
                f"its input is {input_space}, and the mean square over unequal copies is not the small model's.",
                "grow by an integer factor",
            )
        if not self.rms:
            growth.refuse_approximation(
                what,
                f"a LayerNorm under the non-integer factor {growth.k} is approximate: the mean over "
                "unequal copies is not the small model's.",
                "grow by an integer factor (RMSNorm models grow exactly by any ratio)",
            )
        if not self.scale:
            raise GrowthError(
                f"{what} has no γ (scale=False); under the non-integer factor {growth.k} its output "
                "would carry a different scale per copy. Grow by an integer factor."
            )

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        input_space = default_space(k, input_space)
        # Without γ the output is the normalised input: a pure copy.
        if self.scale:
            return Space.stream(input_space.factor)
        return Space.copy(input_space.factor)

    def get_expanded_weight_axes(self, k, input_space):
        out = self.get_expanded_output_space(k, input_space)
        gamma = out
        if input_space.scale == ISOMETRY:
            # The normalised input already carries 1/√c_i·√(n'/n) per copy;
            # γ adds the uniform √(n/n') (docs/widening.md#layernorm-and-rmsnorm, docs/non-integer.md).
            gamma = Space(input_space.factor, float(input_space.factor) ** -0.5)
        axes = {"gamma": [(gamma, OUT)]} if self.scale else {}
        if self.center:
            axes["beta"] = [(out, OUT)]
        return axes
