"""`kwiden.grow` on whole models: exact, new, trainable, saveable, and loud on bad input."""

import keras
import numpy as np
import pytest
from kwiden.testing import NOTICEABLE_EPSILON as EPS, RTOL, assert_exact, numpy_outputs, padded_batch, randomize_weights, tiny_config

import kwiden
from kwiden import GrowthError
from kwiden.layers import ExpandableDense


@pytest.mark.backends
@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_bert_with_mlm_and_pooler_is_exact(bert, k, act):
    small = bert(hidden_act=act, with_mlm=True, with_pool=True)
    big = kwiden.grow(small, k)
    report = assert_exact(small, big, padded_batch())
    assert [o.name for o in report.outputs] == ["Transformer-1-FeedForward-Norm", "Pooler-Dense", "MLM-Bias"]


@pytest.mark.backends
@pytest.mark.parametrize("k", [2, 3, 4])
def test_gpt_is_exact(gpt, k):
    small = gpt()
    big = kwiden.grow(small, k)
    assert_exact(small, big, padded_batch(segments=False))


def test_mlm_logits_equal_the_small_models_exactly(bert):
    small = bert(with_mlm=True)
    big = kwiden.grow(small, 2)
    inputs = padded_batch()
    (_, small_logits), (_, big_logits) = numpy_outputs(small, inputs), numpy_outputs(big, inputs)
    np.testing.assert_allclose(big_logits, small_logits, rtol=RTOL, atol=RTOL * np.abs(small_logits).max())


def test_grown_sizes_and_config(bert):
    small = bert(with_mlm=True)
    big = kwiden.grow(small, 3)
    assert big.get_layer("Embedding-Token").output_dim == 48
    assert big.get_layer("Embedding-Token").input_dim == 97
    attention = big.get_layer("Transformer-0-MultiHeadSelfAttention")
    assert (attention.heads, attention.head_size) == (2, 24)
    assert big.get_layer("Transformer-1-FeedForward").intermediate_size == 72
    assert big.get_layer("MLM-Dense").units == 48
    assert big.get_layer("Embedding-Norm").epsilon == pytest.approx(EPS / 3)
    assert big.get_layer("MLM-Norm").epsilon == pytest.approx(EPS)  # its input is a pure copy
    assert [layer.name for layer in big.layers] == [layer.name for layer in small.layers]
    assert big.output_shape[0] == (None, None, 48)


def test_source_model_is_unchanged(bert):
    small = bert(with_mlm=True)
    before = [w.numpy().copy() for w in small.weights]
    config = small.get_config()
    inputs = padded_batch()
    expected = numpy_outputs(small, inputs)
    kwiden.grow(small, 2)
    for a, b in zip(before, small.weights):
        np.testing.assert_array_equal(a, b.numpy())
    assert small.get_config() == config
    for a, b in zip(expected, numpy_outputs(small, inputs)):
        np.testing.assert_array_equal(a, b)


def test_k_1_returns_an_equal_copy(bert):
    small = bert(with_mlm=True)
    copy = kwiden.grow(small, 1)
    assert copy is not small
    for a, b in zip(small.weights, copy.weights):
        assert a is not b
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    inputs = padded_batch()
    for a, b in zip(numpy_outputs(small, inputs), numpy_outputs(copy, inputs)):
        np.testing.assert_array_equal(a, b)


def test_grown_model_trains(gpt):
    small = gpt()
    big = kwiden.grow(small, 2)
    ids = padded_batch(segments=False, lengths=(9,) * 8, seed=3)
    x, y = ids[:, :-1], ids[:, 1:]
    big.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = big.evaluate(x, y, verbose=0)
    big.fit(x, y, epochs=5, batch_size=8, verbose=0)
    assert big.evaluate(x, y, verbose=0) < before


def test_save_and_load_round_trip(bert, tmp_path):
    big = kwiden.grow(bert(with_mlm=True, with_pool=True), 2)
    path = tmp_path / "big.keras"
    big.save(path)
    loaded = keras.saving.load_model(path)
    inputs = padded_batch()
    for a, b in zip(numpy_outputs(big, inputs), numpy_outputs(loaded, inputs)):
        np.testing.assert_array_equal(a, b)
    assert kwiden.verify(big, kwiden.grow(loaded, 1), inputs, k=1).ok


def test_grows_a_loaded_model_and_a_grown_model(gpt):
    small = gpt()
    twice = kwiden.grow(kwiden.grow(small, 2), 2)
    assert twice.get_layer("Embedding-Token").output_dim == 64
    assert_exact(small, twice, padded_batch(segments=False))


def test_check_passes_for_exact_growth(gpt):
    small = gpt()
    big = kwiden.grow(small, 2, check=padded_batch(segments=False))
    assert big.get_layer("Output-Norm").epsilon == pytest.approx(EPS / 2)


def test_keeps_dtype_policy_and_trainable_flags(gpt):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    small = gpt()
    keras.mixed_precision.set_global_policy("float32")
    small.get_layer("Embedding-Position").trainable = False
    big = kwiden.grow(small, 2)
    for layer in big.layers[1:]:
        assert layer.dtype_policy.name == "mixed_bfloat16", layer.name
    assert not big.get_layer("Embedding-Position").trainable
    assert big.get_layer("Embedding-Token").trainable
    report = kwiden.verify(small, big, padded_batch(segments=False), rtol=5e-2)
    assert report.ok, str(report)  # bfloat16 rounding, not growth error


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


# Errors, by type and message.


@pytest.mark.parametrize("k", [0, -2, 0.5, 1.0000001, "2", True])
def test_bad_factor(gpt, k):
    with pytest.raises(ValueError, match=r"`k` must be a number >= 1.*k="):
        kwiden.grow(gpt(), k)


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
        GrowthError, match=r"cannot grow layer 'keras-norm' \(LayerNormalization\).*implement `get_expanded_weight_axes`"
    ):
        kwiden.grow(model, 2)


def test_non_homogeneous_activation_on_stream_is_refused(bert):
    small = bert()
    x = keras.layers.Activation("gelu", name="late-gelu")(small.output)
    with pytest.raises(GrowthError, match=r"'late-gelu' applies 'gelu' to a tensor in the space ×2 copies at scale 0.707107"):
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


def test_subclassed_model_is_refused():
    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__(name="custom")
            self.dense = ExpandableDense(4)

        def call(self, x):
            return self.dense(x)

    model = Subclassed()
    model(np.zeros((1, 3), "float32"))
    with pytest.raises(GrowthError, match=r"needs a functional model.*'custom' is a Subclassed"):
        kwiden.grow(model, 2)


def test_nested_model_is_refused(gpt):
    inner = gpt()
    ids = keras.Input((None,), dtype="int32")
    outer = keras.Model(ids, inner(ids))
    with pytest.raises(GrowthError, match=r"'gpt' is a nested model"):
        kwiden.grow(outer, 2)


def test_check_raises_when_the_grown_model_is_not_exact(bert, monkeypatch):
    from kwiden.layers import ExpandableLayerNormalization

    original = ExpandableLayerNormalization.get_expanded_config

    def seed_article_epsilon(self, k, input_space=None):  # the seed's error: ε kept
        return {**original(self, k, input_space), "epsilon": self.epsilon}

    monkeypatch.setattr(ExpandableLayerNormalization, "get_expanded_config", seed_article_epsilon)
    with pytest.raises(GrowthError, match=r"not exact(.|\n)*first layer beyond rtol: 'Embedding-Norm'"):
        kwiden.grow(bert(), 2, check=padded_batch())


def test_shared_layer_on_differently_grown_inputs_is_refused():
    x_in = keras.Input((None, 8))
    shared = ExpandableDense(8, name="shared")
    a = shared(ExpandableDense(8, activation="gelu")(x_in))  # pure copy input
    b = shared(ExpandableDense(8)(x_in))  # stream input
    model = keras.Model(x_in, [a, b])
    with pytest.raises(GrowthError, match=r"'shared' is shared by calls whose inputs grow differently"):
        kwiden.grow(model, 2)


def test_builder_errors():
    with pytest.raises(ValueError, match=r"`model` must be one of \['bert', 'gpt', 'llama', 'roformer', 't5'\]"):
        kwiden.build_transformer_model(tiny_config(), model="xlnet")
    with pytest.raises(ValueError, match=r"lacks hidden_size"):
        kwiden.build_transformer_model(dict(vocab_size=10, num_hidden_layers=1, num_attention_heads=1))
    with pytest.raises(ValueError, match=r"hidden_size=10 is not a multiple of num_attention_heads=3"):
        kwiden.build_transformer_model(tiny_config(hidden_size=10, num_attention_heads=3))
    with pytest.raises(ValueError, match=r"`with_mlm` and `with_pool` apply to BERT-style models, not 'gpt'"):
        kwiden.build_transformer_model(tiny_config(), model="gpt", with_mlm=True)


def test_grown_layers_keep_their_initializers(bert):
    small = bert(with_mlm=True)
    big = kwiden.grow(small, 2)
    for name in ("Transformer-0-MultiHeadSelfAttention", "Transformer-0-FeedForward", "Embedding-Token"):
        assert big.get_layer(name).get_config() == {
            **small.get_layer(name).get_config(),
            **{key: value for key, value in big.get_layer(name).get_config().items() if not key.endswith("initializer")},
        }
    init = big.get_layer("Transformer-0-FeedForward").kernel_initializer
    assert isinstance(init, keras.initializers.TruncatedNormal) and init.stddev == pytest.approx(0.02)


@pytest.mark.backends
@pytest.mark.parametrize("k, ffn_factor", [(2, 3), (3, 1), (1, 2)])
def test_separate_ffn_factor_is_exact(bert, k, ffn_factor):
    small = bert(with_mlm=True)
    big = kwiden.grow(small, k, ffn_factor=ffn_factor)
    assert big.get_layer("Transformer-0-FeedForward").intermediate_size == 24 * ffn_factor
    assert big.get_layer("Embedding-Token").output_dim == 16 * k
    assert_exact(small, big, padded_batch())


@pytest.mark.backends
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("family", ["bert", "gpt"])
def test_head_count_growth_is_exact(bert, gpt, k, family):
    small = bert(with_mlm=True) if family == "bert" else gpt()
    big = kwiden.grow(small, k, heads="count")
    attention = big.get_layer("Transformer-1-MultiHeadSelfAttention")
    assert (attention.heads, attention.head_size) == (2 * k, 8)
    assert_exact(small, big, padded_batch(segments=family == "bert"))


def test_bad_growth_options(gpt):
    with pytest.raises(ValueError, match=r"`heads` must be one of \('size', 'count'\), got heads='both'"):
        kwiden.grow(gpt(), 2, heads="both")
    with pytest.raises(ValueError, match=r"`ffn_factor` must be a number >= 1.*ffn_factor=0"):
        kwiden.grow(gpt(), 2, ffn_factor=0)


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
    with pytest.raises(GrowthError, match=r"'cross' \(ExpandableMultiHeadAttention\) receives tensors in different spaces"):
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


def test_bfloat16_check_uses_a_tolerance_for_its_rounding(gpt):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    small = gpt()
    keras.mixed_precision.set_global_policy("float32")
    kwiden.grow(small, 2, check=padded_batch(segments=False))  # default rtol: bfloat16 rounding
    with pytest.raises(GrowthError, match="not exact"):
        kwiden.grow(small, 2, check=padded_batch(segments=False), rtol=1e-5)


@pytest.mark.backends
@pytest.mark.parametrize("k, depth, num_layers", [(1, 2, None), (2, 2, None), (2, None, 3), (1, None, 5)])
def test_pre_ln_depth_growth_is_exact(gpt, k, depth, num_layers):
    small = gpt()
    big = kwiden.grow(small, k, depth=depth, num_layers=num_layers, spread=0.5, seed=1)
    blocks = num_layers or 2 * depth
    names = [layer.name for layer in big.layers]
    assert [f"Transformer-{i}-FeedForward" in names for i in range(blocks + 1)] == [True] * blocks + [False]
    assert_exact(small, big, padded_batch(segments=False))


def test_new_blocks_are_copies_with_zero_output_projections(gpt):
    small = gpt()
    big = kwiden.grow(small, 1, depth=2)
    copy, source = big.get_layer("Transformer-1-FeedForward"), small.get_layer("Transformer-0-FeedForward")
    np.testing.assert_array_equal(copy.inner_kernel.numpy(), source.inner_kernel.numpy())
    assert not np.any(copy.output_kernel.numpy()) and not np.any(copy.output_bias.numpy())
    np.testing.assert_array_equal(
        big.get_layer("Transformer-2-FeedForward").output_kernel.numpy(),
        small.get_layer("Transformer-1-FeedForward").output_kernel.numpy(),
    )


def test_post_ln_depth_growth_is_approximate_and_says_so(bert):
    small = bert(with_mlm=True)
    with pytest.raises(GrowthError, match=r"Transformer blocks \[0, 1\] are not Pre-LN.*allow_approximate=True"):
        kwiden.grow(small, 2, depth=2)
    with pytest.warns(UserWarning, match="the grown model is approximate"):
        big = kwiden.grow(small, 2, depth=2, allow_approximate=True, check=padded_batch())
    report = big.growth_report
    assert not report.ok  # LayerNorm on the stream: no exact identity block
    deviation = max(o.max_relative_error for o in report.outputs)
    assert 1e-4 < deviation < 2.0, str(report)


def test_depth_argument_errors(gpt):
    with pytest.raises(ValueError, match=r"`depth` \(a factor\) or `num_layers` \(a total\), not both"):
        kwiden.grow(gpt(), 2, depth=2, num_layers=4)
    with pytest.raises(ValueError, match=r"`num_layers` must be an integer >= the model's 2 blocks"):
        kwiden.grow(gpt(), 2, num_layers=1)
    with pytest.raises(ValueError, match=r"`depth` must be a positive integer"):
        kwiden.grow(gpt(), 2, depth=0)
    x_in = keras.Input((None, 8))
    with pytest.raises(GrowthError, match=r"Depth growth needs residual blocks"):
        kwiden.grow(keras.Model(x_in, ExpandableDense(8)(x_in)), 2, depth=2)


def roformer(**kwargs):
    model = kwiden.build_transformer_model(tiny_config(**kwargs), model="roformer", with_mlm=True)
    return randomize_weights(model)


@pytest.mark.backends
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("heads", ["size", "count"])
def test_roformer_grows_exactly(k, heads):
    small = roformer()
    assert "Embedding-Position" not in [layer.name for layer in small.layers]
    big = kwiden.grow(small, k, heads=heads, spread=0.5, seed=0)
    attention = big.get_layer("Transformer-0-MultiHeadSelfAttention")
    if heads == "size":
        assert attention.rotary.frequencies == np.repeat(
            small.get_layer("Transformer-0-MultiHeadSelfAttention").rotary.frequencies, k
        ).tolist()
    assert_exact(small, big, padded_batch())


def test_roformer_standard_rope_is_approximate_and_reported():
    small = roformer()
    with pytest.raises(GrowthError, match=r"rope='standard'.*allow_approximate=True"):
        kwiden.grow(small, 2, rope="standard")
    with pytest.warns(UserWarning, match="the grown model is approximate"):
        big = kwiden.grow(small, 2, rope="standard", allow_approximate=True, check=padded_batch())
    report = big.growth_report
    assert not report.ok
    assert report.first_departure[0] == "Transformer-0-MultiHeadSelfAttention"
    assert 1e-3 < report.first_departure[1] < 2.0, str(report)
    with pytest.raises(ValueError, match=r"`rope` must be one of \('exact', 'standard'\)"):
        kwiden.grow(small, 2, rope="linear")


def llama(tie=False):
    config = tiny_config(num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-3, tie_word_embeddings=tie)
    return randomize_weights(kwiden.build_transformer_model(config, model="llama"))


def test_llama_builder():
    model = llama()
    attention = model.get_layer("Transformer-0-MultiHeadSelfAttention")
    assert (attention.heads, attention.key_value_heads, attention.use_bias) == (4, 2, False)
    assert attention.rotary is not None and model.get_layer("Transformer-0-FeedForward").glu
    norm = model.get_layer("Output-Norm")
    assert norm.rms and not norm.center and norm.epsilon == pytest.approx(1e-3)
    assert model.get_layer("Output-Logits").units == 97
    assert "Embedding-Position" not in [layer.name for layer in model.layers]


@pytest.mark.backends
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("heads", ["size", "count"])
@pytest.mark.parametrize("tie", [False, True])
def test_llama_with_grouped_query_attention_grows_exactly(k, heads, tie):
    small = llama(tie)
    big = kwiden.grow(small, k, heads=heads, spread=0.5, seed=0)
    attention = big.get_layer("Transformer-0-MultiHeadSelfAttention")
    expected = (4 * k, 2 * k, 4) if heads == "count" else (4, 2, 4 * k)
    assert (attention.heads, attention.key_value_heads, attention.head_size) == expected
    assert_exact(small, big, padded_batch(segments=False))


def test_llama_depth_growth_is_exact():
    small = llama()
    assert_exact(small, kwiden.grow(small, 2, depth=2), padded_batch(segments=False))


def t5():
    return randomize_weights(kwiden.build_transformer_model(tiny_config(relative_attention_num_buckets=8), model="t5"))


@pytest.mark.backends
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("heads", ["size", "count"])
def test_t5_encoder_grows_exactly(k, heads):
    small = t5()
    attention = small.get_layer("Transformer-0-MultiHeadSelfAttention")
    assert not attention.scaled and not attention.use_bias
    big = kwiden.grow(small, k, heads=heads, spread=0.5, seed=0, depth=2)
    grown = big.get_layer("Transformer-0-MultiHeadSelfAttention")
    assert (grown.heads, grown.head_size) == ((2, 8 * k) if heads == "size" else (2 * k, 8))
    assert big.get_layer("Embedding-Relative-Position").heads == grown.heads
    assert_exact(small, big, padded_batch(segments=False, lengths=(12, 5, 9)))


def test_t5_grows_exactly_by_a_fraction():
    small = randomize_weights(
        kwiden.build_transformer_model(tiny_config(num_attention_heads=4, relative_attention_num_buckets=8), model="t5")
    )
    big = kwiden.grow(small, hidden_size=24, heads="count")
    assert big.get_layer("Embedding-Relative-Position").heads == 6
    assert_exact(small, big, padded_batch(segments=False, lengths=(12, 5, 9)))
