"""What every kwiden layer tells the growth walker (docs/extending.md)."""

import keras
import numpy as np

from kwiden.growth.expansion import Growth, GrowthError, Space, expand


class Expandable:
    """Mixin for layers that know how to grow themselves by a factor `k`.

    The walker (`kwiden.grow`) hands each layer the `Space` its input lives in
    and asks three questions; a layer answers them and does no math of its
    own (`kwiden.growth.expansion` does; docs/extending.md has a worked example):

    - `get_expanded_config(k, input_space)`: the config of the bigger layer.
    - `get_expanded_output_space(k, input_space, **call_kwargs)`: the space
      its output lives in once grown.
    - `get_expanded_weight_axes(k, input_space)`: for each weight, by name
      (by its path inside the layer, `"up/kernel"`, where names repeat),
      which axis reads from which space (`IN`) and which writes into which
      (`OUT`).

    `k` is the width factor, or a `kwiden.Growth` with separate factors and
    modes; layers accept both. `input_space` defaults to the residual stream
    (`Space.stream(k)`), so a layer can also be grown on its own with
    `layer.expanded(k)`. A layer whose output ends a residual branch names, in
    `residual_output_weights`, the weights that make its output zero when
    zeroed: depth growth starts new blocks as identities that way.
    """

    # Weights that, at zero, make the layer output zeros (none by default).
    residual_output_weights = ()

    def get_expanded_config(self, k, input_space=None):
        """The config of the grown layer: by default the layer's own."""
        return self.get_config()

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        """The `Space` of the grown layer's output, given its input's.

        `call_kwargs` are the call's non-tensor keyword arguments (e.g. an
        embedding's `reverse=True`). By default the stream: a layer that takes
        the stream and gives the stream needs nothing else.
        """
        return Space.stream(Growth.of(k).k)

    def get_expanded_weight_axes(self, k, input_space):
        """`{weight name: axes}` for every weight of the layer.

        `axes` has one entry per axis of the weight: `None` (left as it is)
        or `(space, IN)` / `(space, OUT)`, as `kwiden.growth.expansion.expand` takes
        them. A Dense kernel reading the stream and writing a pure copy is
        `{"kernel": [(input_space, IN), (Space.copy(k), OUT)]}`.
        """
        raise NotImplementedError(
            f"{type(self).__name__} subclasses kwiden.layers.Expandable but does not implement "
            "`get_expanded_weight_axes(k, input_space)`, which says how each of its weights grows "
            "(docs/extending.md)."
        )

    def get_expanded_weights(self, k, input_space=None, spread=0.0, seed=None):
        """The grown weights, in the order of the grown layer's `weights`;
        `spread > 0` splits inputs unequally (docs/symmetry.md)."""
        input_space = default_space(k, input_space)
        axes = axes_in_order(self, self.get_expanded_weight_axes(k, input_space))
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


def weight_keys(layer):
    """How `get_expanded_weight_axes` names each of `layer.weights`: by its
    name (`"kernel"`), or, where names repeat (a layer made of sublayers),
    by its path inside the layer (`"up/kernel"`)."""
    names = [w.name for w in layer.weights]
    prefix = f"{layer.path}/"
    return [
        name if names.count(name) == 1 else w.path[len(prefix) :] if w.path.startswith(prefix) else w.path
        for name, w in zip(names, layer.weights)
    ]


def axes_in_order(layer, axes_by_name):
    """The axes of each of `layer.weights`, in order, from `{weight key: axes}`
    (`weight_keys`); a `GrowthError` naming the layer if a weight is missing,
    unknown, or has axes for the wrong number of dimensions."""
    keys = weight_keys(layer)
    where = f"{type(layer).__name__} '{layer.name}'.get_expanded_weight_axes"
    if not isinstance(axes_by_name, dict):
        raise GrowthError(f"{where} must return {{weight name: axes}}, got {type(axes_by_name).__name__}.")
    missing = [key for key in keys if key not in axes_by_name]
    unknown = [key for key in axes_by_name if key not in keys]
    if missing or unknown or len(set(keys)) != len(keys):
        raise GrowthError(
            f"{where} names the weights {sorted(axes_by_name)}; the layer has {keys}"
            + (f" (no axes for {missing})" if missing else "")
            + (f" (no weight {unknown})" if unknown else "")
            + ". Give one entry per weight, keyed by the weight's name (by its path inside the layer, "
            "'up/kernel', where names repeat)."
        )
    for key, weight in zip(keys, layer.weights):
        if len(axes_by_name[key]) != len(weight.shape):
            raise GrowthError(
                f"{where}: weight '{key}' has shape {tuple(weight.shape)} but axes "
                f"{axes_by_name[key]!r}: give one entry (None or (space, IN/OUT)) per axis."
            )
    return [axes_by_name[key] for key in keys]


def expand_weights(variables, axes, spread=0.0, rng=None):
    """`expand` each variable by its axes (a list in the variables' order)."""
    return [expand(keras.ops.convert_to_numpy(w), a, spread, rng) for w, a in zip(variables, axes)]
