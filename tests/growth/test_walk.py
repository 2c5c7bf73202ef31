"""How `kwiden.growth.walk.walk` treats each kind of layer: Keras glue layers, heads, and what it refuses."""

import keras
import numpy as np
import pytest

import kwiden
from kwiden import GrowthError
from kwiden.layers import ExpandableDense
from kwiden.testing import RTOL, assert_exact, numpy_outputs, padded_batch


def test_glue_layers_multiply_concatenate_activation():
    x_in = keras.Input((None, 8))
    a = ExpandableDense(8, name="a")(x_in)
    b = ExpandableDense(8, activation="relu", name="b")(x_in)
    product = keras.layers.Multiply(name="product")([a, b])
    relu = keras.layers.Activation("relu", name="relu")(product)
    joined = keras.layers.Concatenate(axis=1, name="join")([relu, product])  # both at scale 1/2
    model = keras.Model(x_in, ExpandableDense(8, name="out")(joined))
    rng = np.random.default_rng(0)
    for w in model.weights:
        w.assign(rng.normal(size=w.shape).astype("float32"))
    big = kwiden.grow(model, 2)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    small_out = numpy_outputs(model, x)[0]
    big_out = numpy_outputs(big, x)[0]  # model inputs keep their width
    expected = kwiden.Space.stream(2).carry(small_out)
    np.testing.assert_allclose(big_out, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())


def test_lambda_layer_is_refused(bert):
    small = bert()
    x = keras.layers.Lambda(lambda t: t[:, 0], name="first-token")(small.output)
    model = keras.Model(small.inputs, x)
    with pytest.raises(GrowthError, match=r"'first-token' is a Lambda layer.*SelectToken.*kwiden.layers.Expandable"):
        kwiden.grow(model, 2)


def test_unknown_layer_on_grown_tensor_is_refused(bert):
    small = bert()
    x = keras.layers.LayerNormalization(name="keras-norm")(small.output)
    model = keras.Model(small.inputs, x)
    with pytest.raises(
        GrowthError,
        match=r"cannot grow layer 'keras-norm' \(LayerNormalization\).*implement `get_expanded_weight_axes`",
    ):
        kwiden.grow(model, 2)


def test_non_homogeneous_activation_on_stream_is_refused(bert):
    small = bert()
    x = keras.layers.Activation("gelu", name="late-gelu")(small.output)
    with pytest.raises(
        GrowthError, match=r"'late-gelu' applies 'gelu' to a tensor in the space ×2 copies at scale 0.707107"
    ):
        kwiden.grow(keras.Model(small.inputs, x), 2)


def test_adding_tensors_of_different_scales_is_refused():
    x_in = keras.Input((None, 8))
    a = ExpandableDense(8, activation="gelu")(x_in)  # pure copy
    b = ExpandableDense(8)(x_in)  # stream
    model = keras.Model(x_in, keras.layers.Add(name="mixed-add")([a, b]))
    with pytest.raises(GrowthError, match=r"'mixed-add' \(Add\) combines tensors in different spaces"):
        kwiden.grow(model, 2)


def test_concatenating_features_is_refused(bert):
    small = bert()
    joined = keras.layers.Concatenate(name="feature-join")([small.output, small.output])
    with pytest.raises(GrowthError, match=r"'feature-join' joins grown tensors along their feature axis"):
        kwiden.grow(keras.Model(small.inputs, joined), 2)


def test_nested_model_is_refused(gpt):
    inner = gpt()
    ids = keras.Input((None,), dtype="int32")
    outer = keras.Model(ids, inner(ids))
    with pytest.raises(GrowthError, match=r"'gpt' is a nested model"):
        kwiden.grow(outer, 2)


def test_shared_layer_on_differently_grown_inputs_is_refused():
    x_in = keras.Input((None, 8))
    shared = ExpandableDense(8, name="shared")
    a = shared(ExpandableDense(8, activation="gelu")(x_in))  # pure copy input
    b = shared(ExpandableDense(8)(x_in))  # stream input
    model = keras.Model(x_in, [a, b])
    with pytest.raises(GrowthError, match=r"'shared' is shared by calls whose inputs grow differently"):
        kwiden.grow(model, 2)


@pytest.mark.parametrize("where", ["dense", "activation"])
def test_non_elementwise_activation_is_refused(where):
    x_in = keras.Input((None, 8))
    if where == "dense":
        y = ExpandableDense(6, activation="softmax", name="soft")(x_in)
        match = r"ExpandableDense 'soft' uses the activation 'softmax', which is not elementwise"
    else:
        y = ExpandableDense(6, activation="gelu")(x_in)  # a pure copy: scale 1
        y = keras.layers.Activation("softmax", name="soft")(y)
        match = r"Activation layer 'soft' uses the activation 'softmax', which is not elementwise"
    with pytest.raises(GrowthError, match=match):
        kwiden.grow(keras.Model(x_in, y), 2)


def test_multiplying_grown_and_ungrown_tensors_is_refused():
    x_in = keras.Input((None, 8))
    gate = keras.Input((None, 8), name="gate")
    y = keras.layers.Multiply(name="mixed-product")([ExpandableDense(8)(x_in), gate])
    with pytest.raises(GrowthError, match=r"Multiply layer 'mixed-product' multiplies tensors grown differently"):
        kwiden.grow(keras.Model([x_in, gate], y), 2)


def test_layer_with_inputs_in_two_spaces_is_refused():
    x_in = keras.Input((None, 8))
    stream = ExpandableDense(8)(x_in)
    copy = ExpandableDense(8, activation="gelu")(x_in)
    attention = kwiden.layers.ExpandableMultiHeadAttention(2, 4, name="cross")(stream, copy)
    with pytest.raises(
        GrowthError, match=r"'cross' \(ExpandableMultiHeadAttention\) receives tensors in different spaces"
    ):
        kwiden.grow(keras.Model(x_in, attention), 2)


def test_ungrown_keras_layers_are_copied_verbatim():
    ids = keras.Input((None,), dtype="int32")
    summary = keras.layers.LSTM(4, name="lstm")(keras.layers.Embedding(20, 3, name="keras-embedding")(ids))
    tokens = kwiden.layers.ExpandableEmbedding(20, 8, name="tokens")(ids)
    model = keras.Model(ids, [tokens, summary])
    big = kwiden.grow(model, 2)
    for name in ("lstm", "keras-embedding"):
        assert big.get_layer(name).get_config() == model.get_layer(name).get_config()
    x = np.array([[1, 2, 3], [4, 5, 0]])
    assert kwiden.verify(model, big, x).ok


def test_user_head_on_top_grows_with_output_width_kept(bert):
    small = bert(with_pool=True)
    sequence, pooled = small.outputs
    probs = keras.layers.Dense(3, activation="softmax", name="Classifier")(pooled)
    classifier = keras.Model(small.inputs, probs)
    keras.utils.set_random_seed(0)
    classifier.get_layer("Classifier").set_weights(
        [np.random.normal(size=(16, 3)).astype("float32"), np.random.normal(size=3).astype("float32")]
    )
    big = kwiden.grow(classifier, 2)
    assert big.output_shape == (None, 3)
    assert_exact(classifier, big, padded_batch())
