import keras

from kwiden.layers.expandable import Expandable, default_space


@keras.saving.register_keras_serializable(package="kwiden")
class SelectToken(Expandable, keras.layers.Layer):
    """Takes one position of a sequence: `x[:, index]` (BERT's pooler input).

    Example:

    >>> import numpy as np
    >>> tuple(SelectToken(0)(np.zeros((2, 5, 8), "float32")).shape)
    (2, 8)
    """

    def __init__(self, index=0, **kwargs):
        super().__init__(**kwargs)
        self.index = index

    def call(self, inputs):
        return inputs[:, self.index]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *input_shape[2:])

    def get_config(self):
        return {**super().get_config(), "index": self.index}

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        return default_space(k, input_space)

    def get_expanded_weight_axes(self, k, input_space):
        return {}
