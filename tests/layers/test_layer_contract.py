"""Every exported layer meets kwiden's layer contract (`kwiden.testing`):
config and serialization round trips, .keras save/load, exact growth."""

import pathlib

import numpy as np
import pytest

from kwiden import Growth, layers, testing
from kwiden.growth.expansion import UNCHANGED

pytestmark = pytest.mark.backends

RNG_SEED = 0


def stream(seed=RNG_SEED, shape=(2, 5, 8)):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def ids(seed=RNG_SEED, vocab=20, shape=(2, 5)):
    return np.random.default_rng(seed).integers(1, vocab, shape).astype("int32")


MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)

# One or more examples per exported layer: (layer factory, inputs, check_layer options).
EXAMPLES = {
    "AdminResidual": [(lambda: layers.AdminResidual(epsilon=1e-3), lambda: [stream(0), stream(1)], {})],
    "BiasAdd": [(lambda: layers.BiasAdd(), stream, {})],
    "ConditionalRandomField": [
        # It reads tag scores, which do not grow: its input is checked unchanged.
        (lambda: layers.ConditionalRandomField(8), stream, {"input_space": UNCHANGED, "call_kwargs": {"mask": MASK}}),
        (lambda: layers.ConditionalRandomField(8, lr_multiplier=100), stream, {"input_space": UNCHANGED}),
    ],
    "EfficientGlobalPointer": [
        # Masked spans score -1e12, which would hide any error relative to them: one example masks none.
        (lambda: layers.EfficientGlobalPointer(3, 4, tril_mask=False), stream, {}),
        (lambda: layers.EfficientGlobalPointer(3, 4, use_bias=False), stream, {"call_kwargs": {"mask": MASK}, "k": 3}),
    ],
    "ExpandableDense": [
        (lambda: layers.ExpandableDense(6, activation="gelu"), stream, {}),
        (lambda: layers.ExpandableDense(6), stream, {"k": 3}),
        (lambda: layers.ExpandableDense(6, activation=layers.activations.gelu_tanh), stream, {}),
    ],
    "ExpandableEmbedding": [
        (lambda: layers.ExpandableEmbedding(20, 8), ids, {}),
        (lambda: layers.ExpandableEmbedding(20, 8, mode="position"), ids, {}),
    ],
    "ExpandableLayerNormalization": [
        (lambda: layers.ExpandableLayerNormalization(epsilon=1e-3), stream, {}),
        (lambda: layers.ExpandableLayerNormalization(epsilon=1e-3, rms=True, center=False), stream, {"k": Growth(2)}),
    ],
    "ExpandableMultiHeadAttention": [
        (lambda: layers.ExpandableMultiHeadAttention(2, 4), stream, {"call_kwargs": {"attention_mask": MASK}}),
        (
            lambda: layers.ExpandableMultiHeadAttention(4, 2, rotary_base=10000.0, key_value_heads=2),
            stream,
            {"call_kwargs": {"use_causal_mask": True}, "k": Growth(2, heads="count")},
        ),
        (lambda: layers.ExpandableMultiHeadAttention(2, 4, rotary_base=10000.0, use_bias=False), stream, {}),
        (
            lambda: layers.ExpandableMultiHeadAttention(
                4, 2, rotary_base=10000.0, key_value_heads=2, use_output_bias=False
            ),
            stream,
            {"call_kwargs": {"use_causal_mask": True}, "k": Growth(2, heads="count")},
        ),
        (lambda: layers.ExpandableMultiHeadAttention(4, 2, key_value_heads=1), stream, {"k": Growth(2, heads="count")}),
        (lambda: layers.ExpandableMultiHeadAttention(2, 3, scaled=False, use_bias=False, dropout=0.1), stream, {}),
        (lambda: layers.ExpandableMultiHeadAttention(2, 4, rotary_frequencies=[1.0, 0.1]), stream, {}),
    ],
    "FeedForward": [
        (lambda: layers.FeedForward(12, activation="gelu"), stream, {}),
        (lambda: layers.FeedForward(12, activation="silu", glu=True, use_bias=False), stream, {"k": Growth(2, ffn=3)}),
        (lambda: layers.FeedForward(12, activation="gelu_tanh"), stream, {}),
    ],
    "GlobalPointer": [
        (lambda: layers.GlobalPointer(3, 4, tril_mask=False), stream, {}),
        (lambda: layers.GlobalPointer(2, 3, rope=False), stream, {"call_kwargs": {"mask": MASK}, "k": 3}),
    ],
    "RelativePositionBias": [
        (lambda: layers.RelativePositionBias(2, num_buckets=8, max_distance=16), ids, {}),
        (lambda: layers.RelativePositionBias(2, num_buckets=8, max_distance=16), ids, {"k": Growth(2, heads="count")}),
        (lambda: layers.RelativePositionBias(heads=2, num_buckets=8, bidirectional=False), ids, {}),
    ],
    "RotaryEmbedding": [
        (lambda: layers.RotaryEmbedding(head_size=4), lambda: stream(shape=(2, 5, 3, 4)), {"growth": False}),
        (
            lambda: layers.RotaryEmbedding(head_size=4, base=500.0),
            lambda: stream(shape=(2, 5, 3, 4)),
            {"growth": False},
        ),
    ],
    "SelectToken": [(lambda: layers.SelectToken(0), stream, {})],
}

LAYER_CLASSES = [name for name in layers.__all__ if name != "Expandable"]


def test_every_exported_layer_has_a_contract_example():
    assert sorted(EXAMPLES) == sorted(LAYER_CLASSES), "add an example for each exported layer to EXAMPLES"


@pytest.mark.parametrize(
    "make, inputs, options",
    [
        pytest.param(*example, id=f"{name}-{i}")
        for name in LAYER_CLASSES
        for i, example in enumerate(EXAMPLES.get(name, []))
    ],
)
def test_layer_contract(make, inputs, options):
    report = testing.assert_layer_contract(make(), inputs(), **options)
    assert set(report.problems) >= {"config", "serialization", "save/load"}


def test_check_layer_names_a_broken_contract():
    class Forgetful(layers.ExpandableDense):
        """Grows its units but declares no axes for its bias."""

        def get_expanded_weight_axes(self, k, input_space):
            return {"kernel": super().get_expanded_weight_axes(k, input_space)["kernel"]}

    report = testing.check_layer(Forgetful(4), stream())
    assert not report.ok
    assert "no axes for ['bias']" in report.problems["growth"]
    assert "register the class" in report.problems["serialization"]
    with pytest.raises(AssertionError, match="FAILED"):
        testing.assert_layer_contract(Forgetful(4), stream())


def test_check_layer_catches_inexact_growth():
    class WrongScale(layers.BiasAdd):
        """Claims its output stays the small one's: it does not."""

        def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
            return input_space.__class__(input_space.factor, 1.0)

    report = testing.check_layer(WrongScale(), stream())
    assert "departs from the small one" in report.problems["growth"]


def test_the_worked_example_in_the_docs_meets_the_contract():
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    blocks = [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]
    runnable = "\n".join(block for block in blocks if block.startswith("import"))
    namespace = {}
    exec(compile(runnable, "docs/extending.md", "exec"), namespace)  # noqa: S102 - the docs' own example
    assert namespace["report"].ok, str(namespace["report"])
    assert set(namespace["report"].problems) == {"config", "serialization", "save/load", "growth"}


def test_a_layer_made_of_sublayers_names_its_weights_by_path():
    import keras

    from kwiden import IN, OUT, Space

    @keras.saving.register_keras_serializable(package="kwiden_tests")
    class TwoDense(layers.Expandable, keras.layers.Layer):
        """`down(relu(up(x)))`: two Dense sublayers, so two weights named `kernel`."""

        def __init__(self, width=8, **kwargs):
            super().__init__(**kwargs)
            self.width = width
            self.up = keras.layers.Dense(6, activation="relu", name="up")
            self.down = keras.layers.Dense(width, name="down")

        def build(self, input_shape):
            self.up.build(input_shape)
            self.down.build((*input_shape[:-1], 6))

        def call(self, x):
            return self.down(self.up(x))

        def get_config(self):
            return {**super().get_config(), "width": self.width}

        def get_expanded_config(self, k, input_space=None):
            return {**self.get_config(), "width": self.width * Growth.of(k).k}  # the hidden width 6 stays

        def get_expanded_weight_axes(self, k, input_space):
            inner = Space()
            return {
                "up/kernel": [(input_space, IN), (inner, OUT)],
                "up/bias": [(inner, OUT)],
                "down/kernel": [(inner, IN), (input_space, OUT)],
                "down/bias": [(input_space, OUT)],
            }

    testing.assert_layer_contract(TwoDense(), stream())


def test_check_layer_keeps_the_layers_weights_and_wants_growable_layers():
    import keras

    layer = layers.ExpandableDense(4)
    layer(stream())
    before = [w.copy() for w in layer.get_weights()]
    assert testing.check_layer(layer, stream()).ok
    assert all((a == b).all() for a, b in zip(before, layer.get_weights()))
    report = testing.check_layer(keras.layers.Dense(4), stream())
    assert "not a kwiden.layers.Expandable" in report.problems["growth"]
