"""What every kwiden layer tells the growth walker (docs/widening.md)."""

import keras
import numpy as np

from kwiden.expansion import Growth, Space, expand


class Expandable:
    """Mixin for layers that know how to grow themselves by a factor `k`.

    The walker (`kwiden.grow`) hands each layer the `Space` its input lives in
    and asks for the config of the bigger layer, the space of its output, and
    its weights in the order of the bigger layer's `weights`. A layer only says
    which axis of which weight lives in which space
    (`get_expanded_weight_axes`); `kwiden.expansion.expand` does the math.
    `k` is the width factor, or a `kwiden.expansion.Growth` with separate
    factors. `input_space` defaults to the residual stream (`Space.stream(k)`),
    so a layer can also be grown on its own with `layer.expanded(k)`.
    """

    def get_expanded_config(self, k, input_space=None):
        return self.get_config()

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        return Space.stream(Growth.of(k).k)

    def get_expanded_weight_axes(self, k, input_space):
        """For each of `self.weights`, its axes as `expand` takes them."""
        raise NotImplementedError

    def get_expanded_weights(self, k, input_space=None, spread=0.0, seed=None):
        """The grown weights; `spread > 0` splits inputs unequally (docs/symmetry.md)."""
        input_space = default_space(k, input_space)
        axes = self.get_expanded_weight_axes(k, input_space)
        return expand_weights(self.weights, axes, spread, np.random.default_rng(seed))

    def expanded(self, k, input_space=None):
        """A new layer of the same class and the weights it should be given.

        The layer is not built: call it on an input of the grown width, then
        `set_weights` (the walker does this for whole models).
        """
        input_space = default_space(k, input_space)
        layer = self.__class__.from_config(self.get_expanded_config(k, input_space))
        return layer, self.get_expanded_weights(k, input_space)


def default_space(k, input_space):
    return Space.stream(Growth.of(k).k) if input_space is None else input_space


def expand_weights(variables, axes, spread=0.0, rng=None):
    """`expand` each variable by its axes."""
    if len(variables) != len(axes):
        raise ValueError(
            f"{len(variables)} weights but axes for {len(axes)}: a layer's "
            "`get_expanded_weight_axes` must describe each of its weights, in order."
        )
    return [expand(keras.ops.convert_to_numpy(w), a, spread, rng) for w, a in zip(variables, axes)]
