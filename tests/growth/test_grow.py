"""`kwiden.grow` on whole models: exact, new, trainable, saveable, and loud on bad input."""

import re

import keras
import numpy as np
import pytest

import kwiden
from kwiden import GrowthError
from kwiden.layers import ExpandableDense
from kwiden.testing import NOTICEABLE_EPSILON as EPS
from kwiden.testing import RTOL, assert_exact, numpy_outputs, padded_batch, randomize_weights, tiny_config


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


# Errors, by type and message.


@pytest.mark.parametrize("k", [0, -2, 0.5, "2", True])
def test_bad_factor(gpt, k):
    with pytest.raises(
        ValueError,
        match=r"`k` must be a number of at least 1 such as 2, 1\.5 or 4/3, or None \(width factor k .*got k=",
    ):
        kwiden.grow(gpt(), k)


def test_a_factor_that_is_no_simple_ratio_is_refused(gpt):
    with pytest.raises(
        ValueError, match=r"got k=1\.0000001, which is no simple ratio: pass a Fraction, or target sizes"
    ):
        kwiden.grow(gpt(), 1.0000001)


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


def test_check_raises_when_the_grown_model_is_not_exact(bert, monkeypatch):
    from kwiden.layers import ExpandableLayerNormalization

    original = ExpandableLayerNormalization.get_expanded_config

    def seed_article_epsilon(self, k, input_space=None):  # the seed's error: ε kept
        return {**original(self, k, input_space), "epsilon": self.epsilon}

    monkeypatch.setattr(ExpandableLayerNormalization, "get_expanded_config", seed_article_epsilon)
    with pytest.raises(GrowthError, match=r"not exact(.|\n)*first layer beyond rtol: 'Embedding-Norm'"):
        kwiden.grow(bert(), 2, check=padded_batch())


def test_grown_layers_keep_their_initializers(bert):
    small = bert(with_mlm=True)
    big = kwiden.grow(small, 2)
    for name in ("Transformer-0-MultiHeadSelfAttention", "Transformer-0-FeedForward", "Embedding-Token"):
        assert big.get_layer(name).get_config() == {
            **small.get_layer(name).get_config(),
            **{
                key: value for key, value in big.get_layer(name).get_config().items() if not key.endswith("initializer")
            },
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
    with pytest.raises(
        ValueError, match=r"`heads` must be one of size, count \(grow head size or head count\), got heads='both'"
    ):
        kwiden.grow(gpt(), 2, heads="both")
    with pytest.raises(ValueError, match=r"`ffn_factor` must be a number of at least 1 .*got ffn_factor=0"):
        kwiden.grow(gpt(), 2, ffn_factor=0)


def test_bfloat16_check_uses_a_tolerance_for_its_rounding(gpt):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    small = gpt()
    keras.mixed_precision.set_global_policy("float32")
    kwiden.grow(small, 2, check=padded_batch(segments=False))  # default rtol: bfloat16 rounding
    with pytest.raises(GrowthError, match="not exact"):
        kwiden.grow(small, 2, check=padded_batch(segments=False), rtol=1e-5)


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
        assert (
            attention.rotary.frequencies
            == np.repeat(small.get_layer("Transformer-0-MultiHeadSelfAttention").rotary.frequencies, k).tolist()
        )
    assert_exact(small, big, padded_batch())


@pytest.mark.backends
@pytest.mark.parametrize("family", ["bert", "roformer"])
@pytest.mark.parametrize("growth", [dict(k=2), dict(depth=2), dict(k=2, depth=2)])
def test_a_unilm_model_grows_exactly_and_keeps_its_mask(family, growth):
    # Depth grows exactly for Pre-LN stacks (docs/depth.md): BERT and RoFormer built so for it.
    residual = "pre_ln" if "depth" in growth else None
    small = kwiden.build_transformer_model(tiny_config(), model=family, with_mlm=True, unilm=True, residual=residual)
    small = randomize_weights(small)
    big = kwiden.grow(small, **growth, **({"heads": "count"} if family == "roformer" else {}))
    inputs = padded_batch()
    assert_exact(small, big, inputs)
    edited = inputs[0].copy()
    edited[2, 7] = edited[2, 7] % 96 + 1  # a target token of the longest row (9 tokens, the target from 4)
    before, after = numpy_outputs(big, inputs)[0], numpy_outputs(big, [edited, inputs[1]])[0]
    np.testing.assert_allclose(
        after[2, :7], before[2, :7], rtol=1e-6, atol=1e-6
    )  # the grown model's past is blind to it


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
    with pytest.raises(
        ValueError, match=r"`rope` must be one of exact, standard \(rotary frequencies when heads grow\), got rope="
    ):
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


@pytest.mark.parametrize(
    "growths",
    [
        [dict(k=2)],
        [dict(depth=2, allow_approximate=True)],
        [dict(k=2, heads="count")],
        [dict(k=2), dict(depth=2, new_blocks="fresh", allow_approximate=True)],
    ],
    ids=["wider", "deeper", "more heads", "wider then deeper"],
)
@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_a_skeleton_has_the_shapes_grow_gives(family, growths):
    from kwiden.growth.pipeline import grown_skeleton

    real = skeleton = kwiden.build_transformer_model(tiny_config(), model=family)
    for arguments in growths:
        real, skeleton = kwiden.grow(real, seed=0, **arguments), grown_skeleton(skeleton, **arguments)
    assert [(w.path, tuple(w.shape)) for w in skeleton.weights] == [(w.path, tuple(w.shape)) for w in real.weights]
    assert skeleton.count_params() == real.count_params()


def test_a_skeleton_refuses_what_grow_refuses():
    from kwiden.growth.pipeline import grown_skeleton

    rotary = kwiden.build_transformer_model(tiny_config(), model="llama")
    refusals = [
        (dict(k=2, rope="standard"), r"rope='standard'.*allow_approximate=True"),
        (dict(k=0), r"k=0"),
        (dict(depth=2, num_layers=4), r"Give `depth` \(a factor\) or `num_layers` \(a total\), not both"),
    ]
    for refused, message in refusals:
        with pytest.raises(ValueError, match=message) as real:
            kwiden.grow(rotary, **refused)
        with pytest.raises(ValueError, match=re.escape(str(real.value))):  # the same words
            grown_skeleton(rotary, **refused)
