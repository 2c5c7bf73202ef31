import keras
from keras import ops

from kwiden.growth.expansion import IN, OUT, Growth, Space, check_elementwise, grown_size
from kwiden.layers import activations
from kwiden.layers.expandable import Expandable, default_space


@keras.saving.register_keras_serializable(package="kwiden")
class FeedForward(Expandable, keras.layers.Layer):
    """The Transformer's position-wise feed-forward block.

    `y = A(x W₁ + b₁) W₂ + b₂`, or with `glu=True` the gated variant
    `y = (A(x W_g + b_g) ⊙ (x W_u + b_u)) W₂ + b₂` (GeGLU, SwiGLU). The output
    has the input's width.

    Growth (docs/widening.md#feed-forward): the inner projections output pure copies, so any
    activation commutes with the copy; the output returns to the stream. The
    inner width grows by its own factor (`Growth.ffn`), `k` by default.

    Args:
        intermediate_size: width of the inner layer.
        activation: the activation `A`: a Keras activation, or `"gelu_tanh"`
            (GeLU's tanh approximation, GPT-2's `gelu_new`).
        use_bias: whether the projections have biases.
        glu: use a gate and an up projection instead of one inner projection.
        kernel_initializer, bias_initializer: initializers of the projections.

    Example:

    >>> import numpy as np
    >>> ffn = FeedForward(intermediate_size=16, activation="gelu")
    >>> tuple(ffn(np.random.rand(2, 5, 8).astype("float32")).shape)
    (2, 5, 8)
    """

    def __init__(
        self,
        intermediate_size,
        activation="gelu",
        use_bias=True,
        glu=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_size = intermediate_size
        self.activation = activations.get(activation)
        self.activation_name = activations.name(self.activation)
        self.use_bias = use_bias
        self.glu = glu
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    @property
    def inner_names(self):
        return ("gate", "up") if self.glu else ("inner",)

    def build(self, input_shape):
        dim = input_shape[-1]
        for name in self.inner_names:
            self._add_projection(name, (dim, self.intermediate_size))
        self._add_projection("output", (self.intermediate_size, dim))

    def _add_projection(self, name, shape):
        kernel = self.add_weight(shape=shape, initializer=self.kernel_initializer, name=f"{name}_kernel")
        bias = None
        if self.use_bias:
            bias = self.add_weight(shape=shape[-1:], initializer=self.bias_initializer, name=f"{name}_bias")
        setattr(self, f"{name}_kernel", kernel)
        setattr(self, f"{name}_bias", bias)

    def _project(self, name, x):
        y = ops.matmul(x, ops.cast(getattr(self, f"{name}_kernel"), self.compute_dtype))
        bias = getattr(self, f"{name}_bias")
        return y if bias is None else y + ops.cast(bias, self.compute_dtype)

    def call(self, inputs):
        if self.glu:
            hidden = self.activation(self._project("gate", inputs)) * self._project("up", inputs)
        else:
            hidden = self.activation(self._project("inner", inputs))
        return self._project("output", hidden)

    # Zero, these make the layer output zeros: a new residual branch that adds nothing.
    residual_output_weights = ("output_kernel", "output_bias")

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_size": self.intermediate_size,
            "activation": self.activation_name,
            "use_bias": self.use_bias,
            "glu": self.glu,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }

    def get_expanded_config(self, k, input_space=None):
        size = grown_size(
            self.intermediate_size, Growth.of(k).ffn_factor, f"FeedForward '{self.name}' intermediate_size"
        )
        return {**self.get_config(), "intermediate_size": size}

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        return Space.stream(default_space(k, input_space).factor)

    def get_expanded_weight_axes(self, k, input_space):
        check_elementwise(self.activation_name, f"FeedForward '{self.name}'")
        inner = Space.copy(Growth.of(k).ffn_factor)
        out = self.get_expanded_output_space(k, input_space)
        axes = {"output_kernel": [(inner, IN), (out, OUT)]}
        for name in self.inner_names:
            axes[f"{name}_kernel"] = [(input_space, IN), (inner, OUT)]
            if self.use_bias:
                axes[f"{name}_bias"] = [(inner, OUT)]
        if self.use_bias:
            axes["output_bias"] = [(out, OUT)]
        return axes
