"""Check a layer against kwiden's contract: the checks kwiden runs on its own
layers, for yours (docs/extending.md).

>>> import numpy as np, kwiden
>>> x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
>>> report = kwiden.testing.check_layer(kwiden.layers.ExpandableDense(6, activation="gelu"), x)
>>> report.ok
True
"""

import dataclasses
import os
import tempfile

import keras
import numpy as np
from keras import tree

from kwiden.expansion import UNCHANGED, Growth, Space
from kwiden.layers.expandable import Expandable, axes_in_order

# Growth is exact when it is within float32 rounding.
RTOL = 1e-5


@dataclasses.dataclass
class LayerReport:
    """What `check_layer` found: each check's name and its problem (None if it passed)."""

    layer: str
    problems: dict

    @property
    def ok(self):
        return not any(self.problems.values())

    def __str__(self):
        lines = [f"kwiden.testing.check_layer('{self.layer}'): {'OK' if self.ok else 'FAILED'}"]
        lines += [f"  {name:<14}{problem or 'ok'}" for name, problem in self.problems.items()]
        return "\n".join(lines)


def check_layer(layer, inputs, k=2, call_kwargs=None, input_space=None, rtol=RTOL, seed=0):
    """Run kwiden's layer contract on `layer`, called on `inputs`.

    The checks: every weight gets random non-zero values (biases and norms
    too); `get_config` round-trips through `from_config` and Keras
    serialization; a model holding the layer saves as `.keras` and loads
    with the same outputs; and, for an `Expandable` layer, growth by `k` is
    exact: the grown layer on the grown inputs gives the small layer's output
    carried into its space, to `rtol`, and every weight has axes.

    Args:
        layer: an unbuilt or built Keras layer.
        inputs: a numpy array, or a list of them, as the layer is called on.
            Float inputs are taken to live in `input_space`; integer inputs
            (ids, masks) are not grown.
        k: the factor, or a `kwiden.Growth` (e.g. `Growth(2, heads="count")`).
        call_kwargs: non-tensor or tensor keyword arguments of the call
            (`attention_mask=...`); tensors among them are not grown.
        input_space: the `Space` float inputs live in (default the stream).
        rtol: the relative error growth may show.
        seed: seed of the random weights.

    Returns:
        A `LayerReport`; `report.ok` is True when every check passed, and
        `str(report)` names what failed. Raises nothing for a failed check.
    """
    call_kwargs = dict(call_kwargs or {})
    outputs = _call(layer, inputs, call_kwargs)
    _randomize(layer, seed)
    outputs = _call(layer, inputs, call_kwargs)
    problems = {
        "config": _run(_check_config, layer),
        "serialization": _run(_check_serialization, layer),
        "save/load": _run(_check_save_load, layer, inputs, call_kwargs, outputs),
    }
    if isinstance(layer, Expandable):
        problems["growth"] = _run(_check_growth, layer, inputs, call_kwargs, outputs, k, input_space, rtol, seed)
    return LayerReport(layer.name, problems)


def _run(check, *args):
    """A check's problem, or the error it raised, as one line."""
    try:
        return check(*args)
    except Exception as error:  # noqa: BLE001 - a failed check is reported, not raised
        return f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"


def assert_layer_contract(layer, inputs, **options):
    """`check_layer`, raising `AssertionError` with its report on failure (for tests)."""
    report = check_layer(layer, inputs, **options)
    assert report.ok, str(report)
    return report


def _call(layer, inputs, call_kwargs):
    values = layer(inputs, **call_kwargs)
    return [np.asarray(keras.ops.convert_to_numpy(v), np.float64) for v in tree.flatten(values)]


def _randomize(layer, seed):
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape).astype(weight.dtype))


def _check_config(layer):
    config = layer.get_config()
    again = type(layer).from_config(config).get_config()
    if again != config:
        different = sorted(key for key in set(config) | set(again) if config.get(key) != again.get(key))
        return f"from_config(get_config()) changes {different}: every __init__ argument belongs in get_config"
    return None


REGISTER = "register the class with @keras.saving.register_keras_serializable"


def _check_serialization(layer):
    try:
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    except TypeError as error:
        return f"Keras cannot deserialize it ({str(error).splitlines()[0][:120]}…): {REGISTER}"
    if type(restored) is not type(layer) or restored.get_config() != layer.get_config():
        return f"Keras deserializes it as {type(restored).__name__} with another config: {REGISTER}"
    return None


def _check_save_load(layer, inputs, call_kwargs, outputs):
    tensors = {key: value for key, value in call_kwargs.items() if isinstance(value, np.ndarray)}
    static = {key: value for key, value in call_kwargs.items() if key not in tensors}
    values = tree.flatten(inputs) + list(tensors.values())
    symbolic = [keras.Input(batch_shape=(None, *np.shape(v)[1:]), dtype=str(np.asarray(v).dtype)) for v in values]
    count = len(values) - len(tensors)
    layer_inputs = tree.pack_sequence_as(inputs, symbolic[:count])
    model = keras.Model(symbolic, layer(layer_inputs, **dict(zip(tensors, symbolic[count:])), **static))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "layer.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    again = [np.asarray(keras.ops.convert_to_numpy(v), np.float64) for v in tree.flatten(loaded(values))]
    if any(a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(outputs, again)):
        return "a model holding the layer gives other outputs after .keras save and load"
    return None


def _check_growth(layer, inputs, call_kwargs, outputs, k, input_space, rtol, seed):
    growth = Growth.of(k)
    space = Space.stream(growth.k) if input_space is None else input_space
    try:
        axes_in_order(layer, layer.get_expanded_weight_axes(growth, space))
    except ValueError as error:
        return str(error)
    static = {key: value for key, value in call_kwargs.items() if not isinstance(value, np.ndarray)}
    out_space = layer.get_expanded_output_space(growth, space, **static)
    config = layer.get_expanded_config(growth, space)
    big = type(layer).from_config(config)
    weights = layer.get_expanded_weights(growth, space, spread=1.0, seed=seed)
    grown_inputs = tree.map_structure(lambda x: _carry(space, x), inputs)
    _call(big, grown_inputs, call_kwargs)
    big.set_weights(weights)
    grown = _call(big, grown_inputs, call_kwargs)
    for small_value, big_value in zip(outputs, grown):
        expected = out_space.carry(small_value)
        if expected.shape != big_value.shape:
            return f"the grown output has shape {big_value.shape}; carried into {out_space} it should be {expected.shape}"
        error = np.max(np.abs(expected - big_value)) / max(np.max(np.abs(expected)), 1e-30)
        if error > rtol:
            return f"the grown layer departs from the small one by {error:.3e} (relative; rtol {rtol:g})"
    return None


def _carry(space, x):
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating) or space == UNCHANGED:
        return x
    return space.carry(x).astype(x.dtype)
