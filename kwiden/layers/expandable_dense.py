import keras

from kwiden.growth.expansion import IN, OUT, Growth, Space, check_elementwise, grown_size, is_positively_homogeneous
from kwiden.layers import activations
from kwiden.layers.expandable import Expandable


@keras.saving.register_keras_serializable(package="kwiden")
class ExpandableDense(Expandable, keras.layers.Dense):
    """A `keras.layers.Dense` whose `units` grow with the hidden size.

    Growth keeps the function exact (docs/widening.md#linear-maps): with a positively
    homogeneous activation (linear, ReLU) the output stays at the stream scale;
    with any other (GeLU, tanh) the output is a pure copy, since only a pure
    copy commutes with such an activation.

    Example:

    >>> import numpy as np
    >>> layer = ExpandableDense(4, activation="gelu")
    >>> y = layer(np.ones((2, 3), "float32"))
    >>> big, weights = layer.expanded(2)
    >>> _ = big(np.ones((2, 6), "float32"))
    >>> big.set_weights(weights)
    >>> big.units
    8
    """

    def get_expanded_config(self, k, input_space=None):
        return {
            **self.get_config(),
            "units": grown_size(self.units, Growth.of(k).k, f"ExpandableDense '{self.name}' units"),
        }

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        k = Growth.of(k).k
        activation = activations.name(self.activation)
        check_elementwise(activation, f"ExpandableDense '{self.name}'")
        if is_positively_homogeneous(activation):
            return Space.stream(k)
        return Space.copy(k)

    def get_expanded_weight_axes(self, k, input_space):
        out = self.get_expanded_output_space(k, input_space)
        axes = {"kernel": [(input_space, IN), (out, OUT)]}
        if self.use_bias:
            axes["bias"] = [(out, OUT)]
        return axes
