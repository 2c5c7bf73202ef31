"""Test helpers: kwiden's layer contract for your own layers
(docs/extending.md), and what its growth tests rest on — random non-zero
weights, a LayerNorm ε large enough to notice, padded batches, and an
exactness assertion.

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

from kwiden.growth.expansion import UNCHANGED, Growth, Space
from kwiden.growth.verify import verify
from kwiden.layers.expandable import Expandable, axes_in_order

# Growth is exact when it is within float32 rounding.
RTOL = 1e-5
# A LayerNorm ε large enough that a wrong grown ε shows (docs/widening.md#layernorm-and-rmsnorm);
# 1e-12 would hide it.
NOTICEABLE_EPSILON = 1e-3


def tiny_config(**overrides):
    """A BERT-style config for a tiny model whose growth errors cannot hide:
    hidden 16, 2 blocks, 2 heads, FFN 24, ε = 1e-3, no dropout."""
    config = dict(
        vocab_size=97,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=32,
        type_vocab_size=2,
        layer_norm_eps=NOTICEABLE_EPSILON,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return {**config, **overrides}


def randomize_weights(model, seed=0, std=0.5):
    """Random non-zero values in every weight of a model or layer (biases, γ
    and β included: zeros there hide growth errors); returns it."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0.0, std, weight.shape).astype(weight.dtype))
    return model


def padded_batch(vocab_size=97, lengths=(7, 4, 9), seed=1, segments=True):
    """Token ids padded with 0 (kwiden's padding id) to the longest of
    `lengths`, and, with `segments`, segment ids (the second half of each
    row is segment 1)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), max(lengths)), "int32")
    segment = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1, vocab_size, n)
        segment[row, n // 2 : n] = 1
    return [ids, segment] if segments else ids


def numpy_outputs(model, inputs):
    """`model`'s outputs on `inputs`, flattened, as numpy arrays."""
    return [np.asarray(keras.ops.convert_to_numpy(o)) for o in tree.flatten(model(inputs))]


def assert_exact(small, big, inputs, rtol=RTOL):
    """Assert that `big` computes `small`'s function on `inputs`: every output
    and every layer within `rtol`, logits picking the same classes. Returns
    the `VerifyReport`."""
    report = verify(small, big, inputs, rtol=rtol)
    assert report.ok, str(report)
    assert report.first_departure is None, str(report)
    for output in report.outputs:
        assert output.max_relative_error <= rtol, str(report)
        if output.argmax_agreement is not None:
            assert output.argmax_agreement == 1.0, str(report)
    return report


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


def check_layer(layer, inputs, k=2, call_kwargs=None, input_space=None, rtol=RTOL, seed=0, growth=True):
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
        growth: whether the layer must grow (subclass `Expandable`); False
            for a layer that only lives inside others (a rotary embedding).

    Returns:
        A `LayerReport`; `report.ok` is True when every check passed, and
        `str(report)` names what failed. Raises nothing for a failed check;
        the layer keeps its own weights.
    """
    call_kwargs = dict(call_kwargs or {})
    _call(layer, inputs, call_kwargs)  # builds the layer
    own_weights = layer.get_weights()
    try:
        return _checks(layer, inputs, call_kwargs, k, input_space, rtol, seed, growth)
    finally:
        layer.set_weights(own_weights)


def _checks(layer, inputs, call_kwargs, k, input_space, rtol, seed, growth):
    randomize_weights(layer, seed)
    outputs = _call(layer, inputs, call_kwargs)
    problems = {
        "config": _run(_check_config, layer),
        "serialization": _run(_check_serialization, layer),
        "save/load": _run(_check_save_load, layer, inputs, call_kwargs, outputs),
    }
    if isinstance(layer, Expandable):
        problems["growth"] = _run(_check_growth, layer, inputs, call_kwargs, outputs, k, input_space, rtol, seed)
    elif growth:
        problems["growth"] = (
            "not a kwiden.layers.Expandable: kwiden.grow refuses it wherever grown tensors reach it "
            "(docs/extending.md); pass growth=False for a layer that only lives inside others"
        )
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
    _, problem = grow_layer(layer, inputs, growth, space, call_kwargs, spread=1.0, seed=seed, rtol=rtol)
    return problem


def grow_layer(layer, inputs, k=2, input_space=None, call_kwargs=None, spread=0.0, seed=0, rtol=RTOL):
    """Grow a built `layer` on its own and run it on `inputs` carried into
    `input_space` (default the stream; integer inputs stay). Returns
    `(grown layer, problem)`: `problem` is None when its output is the small
    layer's output carried into the declared output space, to `rtol`, and
    says by how much it departs otherwise."""
    call_kwargs = dict(call_kwargs or {})
    growth = Growth.of(k)
    space = Space.stream(growth.k) if input_space is None else input_space
    outputs = _call(layer, inputs, call_kwargs)
    static = {key: value for key, value in call_kwargs.items() if not isinstance(value, np.ndarray)}
    out_space = layer.get_expanded_output_space(growth, space, **static)
    big = type(layer).from_config(layer.get_expanded_config(growth, space))
    weights = layer.get_expanded_weights(growth, space, spread=spread, seed=seed)
    grown_inputs = tree.map_structure(lambda x: _carry(space, x), inputs)
    _call(big, grown_inputs, call_kwargs)
    big.set_weights(weights)
    for small_value, big_value in zip(outputs, _call(big, grown_inputs, call_kwargs)):
        expected = out_space.carry(small_value)
        if expected.shape != big_value.shape:
            return (
                big,
                f"the grown output has shape {big_value.shape}; carried into {out_space} it should be {expected.shape}",
            )
        error = np.max(np.abs(expected - big_value)) / max(np.max(np.abs(expected)), 1e-30)
        if error > rtol:
            return big, f"the grown layer departs from the small one by {error:.3e} (relative; rtol {rtol:g})"
    return big, None


def assert_grows_exactly(layer, inputs, k=2, input_space=None, call_kwargs=None, spread=0.0, rtol=RTOL):
    """`grow_layer`, raising `AssertionError` when the growth is not exact;
    returns the grown layer."""
    big, problem = grow_layer(layer, inputs, k, input_space, call_kwargs, spread, rtol=rtol)
    assert problem is None, f"{type(layer).__name__} '{layer.name}': {problem}"
    return big


def _carry(space, x):
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating) or space == UNCHANGED:
        return x
    return space.carry(x).astype(x.dtype)
