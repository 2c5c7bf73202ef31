import keras
from keras import ops

from kwiden.growth.expansion import OUT
from kwiden.layers.expandable import Expandable, default_space


@keras.saving.register_keras_serializable(package="kwiden")
class BiasAdd(Expandable, keras.layers.Layer):
    """Adds a learned bias over the last axis (the MLM head's output bias).

    Growth: the bias lives in its input's space, `b̃ = s · P b`; on logits,
    whose space is unchanged, it is copied as it is.

    Example:

    >>> import numpy as np
    >>> tuple(BiasAdd()(np.zeros((2, 3), "float32")).shape)
    (2, 3)
    """

    def __init__(self, bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(input_shape[-1],), initializer=self.bias_initializer, name="bias")

    def call(self, inputs):
        return inputs + ops.cast(self.bias, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        return default_space(k, input_space)

    def get_expanded_weight_axes(self, k, input_space):
        return {"bias": [(input_space, OUT)]}
