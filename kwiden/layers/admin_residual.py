import keras
from keras import ops

from kwiden.growth.expansion import OUT, Space
from kwiden.layers.expandable_layer_normalization import ExpandableLayerNormalization


@keras.saving.register_keras_serializable(package="kwiden")
class AdminResidual(ExpandableLayerNormalization):
    """A Post-LN residual connection with Admin's per-channel weight ω
    (Liu et al., 2020): `LN(ω ⊙ x + f(x))`.

    Called on `[x, f(x)]`: the stream and its residual branch's output. With
    ω = 1 it is Post-LN's `LN(x + f(x))`; `kwiden.training.admin.initialize` sets ω
    from one profiled batch so that no layer leans too hard on its branch,
    and `kwiden.training.admin.fold` turns a trained Admin model back into plain
    Post-LN. The normalisation is `ExpandableLayerNormalization`'s, with all
    its arguments.

    Growth (docs/admin.md): x and f(x) arrive at the same scale, so copying ω
    (`ω̃ = P ω`, scale 1) keeps the layer exact; the normalisation grows as
    LayerNorm does.

    Args:
        omega_trainable: whether ω is trained with the model (the paper trains
            it); False keeps the profiled values.
        omega_initializer: initializer of ω (ones: plain Post-LN).
        **kwargs: `ExpandableLayerNormalization`'s arguments (`epsilon`,
            `center`, `scale`, `rms`, initializers) and the base layer's.

    Example:

    >>> import numpy as np
    >>> residual = AdminResidual(epsilon=1e-3)
    >>> x = np.random.rand(2, 5, 8).astype("float32")
    >>> tuple(residual([x, x]).shape)
    (2, 5, 8)
    >>> tuple(residual.omega.shape)
    (8,)
    """

    def __init__(self, omega_trainable=True, omega_initializer="ones", **kwargs):
        super().__init__(**kwargs)
        self.omega_trainable = omega_trainable
        self.omega_initializer = keras.initializers.get(omega_initializer)

    def build(self, input_shape):
        stream_shape = input_shape[0]
        super().build(stream_shape)
        self.omega = self.add_weight(
            shape=(stream_shape[-1],),
            initializer=self.omega_initializer,
            trainable=self.omega_trainable,
            name="omega",
        )

    def call(self, inputs):
        stream, branch = inputs
        return super().call(ops.cast(self.omega, stream.dtype) * stream + branch)

    def compute_mask(self, inputs, mask=None):
        return mask[0] if isinstance(mask, (list, tuple)) else mask

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def get_config(self):
        return {
            **super().get_config(),
            "omega_trainable": self.omega_trainable,
            "omega_initializer": keras.initializers.serialize(self.omega_initializer),
        }

    def get_expanded_weight_axes(self, k, input_space):
        # ω multiplies a tensor already at the stream scale: a pure copy.
        return {**super().get_expanded_weight_axes(k, input_space), "omega": [(Space.copy(input_space.factor), OUT)]}
