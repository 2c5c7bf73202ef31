"""`kwiden.grow` on KerasHub models: the same class back, wider, computing the same function."""

from fractions import Fraction

import keras
import numpy as np
import pytest

import kwiden
from kwiden import GrowthError, Space
from kwiden.testing import RTOL, randomize_weights

keras_hub = pytest.importorskip("keras_hub", reason="needs the `hub` extra: pip install -e .[hub]")

SIZES = dict(vocabulary_size=61, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=24, max_sequence_length=32)


def inputs(segments=True, seed=0):
    ids = np.random.default_rng(seed).integers(1, 61, (3, 9)).astype("int32")
    mask = np.ones_like(ids, dtype=bool)
    mask[1, 5:] = False
    ids[~mask] = 0
    batch = {"token_ids": ids, "padding_mask": mask}
    if segments:
        batch["segment_ids"] = (np.arange(9) >= 4).astype("int32")[None].repeat(3, 0)
    return batch


def assert_close(expected, value):
    assert np.max(np.abs(expected - value)) <= RTOL * np.max(np.abs(expected)), np.max(np.abs(expected - value))


@pytest.mark.parametrize("name", ["BertBackbone", "RobertaBackbone", "GPT2Backbone"])
@pytest.mark.parametrize("k,heads", [(2, "size"), (3, "count"), (2, "count")])
def test_backbones_grow_exactly(name, k, heads):
    small = randomize_weights(getattr(keras_hub.models, name)(**SIZES, dropout=0.0))
    big = kwiden.grow(small, k, heads=heads, spread=1.0, seed=0)
    assert type(big) is type(small)
    config = big.get_config()
    assert config["hidden_dim"] == 16 * k and config["intermediate_dim"] == 24 * k
    assert config["num_heads"] == (2 * k if heads == "count" else 2)
    batch = inputs(segments=name == "BertBackbone")
    small_out, big_out = small(batch), big(batch)
    if name != "BertBackbone":  # the others return the sequence alone
        small_out, big_out = {"sequence_output": small_out}, {"sequence_output": big_out}
    assert_close(
        Space.stream(k).carry(keras.ops.convert_to_numpy(small_out["sequence_output"])),
        keras.ops.convert_to_numpy(big_out["sequence_output"]),
    )
    if name == "BertBackbone":
        assert_close(
            Space.copy(k).carry(keras.ops.convert_to_numpy(small_out["pooled_output"])),
            keras.ops.convert_to_numpy(big_out["pooled_output"]),
        )
    kwiden.grow(small, k, heads=heads, check=batch)  # the same comparison, inside grow


def test_gpt2_causal_lm_grows_with_tied_logits():
    backbone = randomize_weights(keras_hub.models.GPT2Backbone(**SIZES, dropout=0.0))
    small = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    big = kwiden.grow(small, 2, spread=1.0, seed=0)
    assert isinstance(big, keras_hub.models.GPT2CausalLM) and big.backbone.get_config()["hidden_dim"] == 32
    batch = inputs(segments=False)
    assert_close(keras.ops.convert_to_numpy(small(batch)), keras.ops.convert_to_numpy(big(batch)))


@pytest.mark.parametrize("heads", ["size", "count"])
def test_bert_masked_lm_grows_with_its_head(heads):
    backbone = randomize_weights(keras_hub.models.BertBackbone(**SIZES, dropout=0.0))
    small = randomize_weights(keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None), seed=1)
    big = kwiden.grow(small, 2, heads=heads, spread=1.0, seed=0)
    assert isinstance(big, keras_hub.models.BertMaskedLM)
    batch = {**inputs(), "mask_positions": np.array([[1, 3], [0, 4], [2, 8]], "int32")}
    assert_close(keras.ops.convert_to_numpy(small(batch)), keras.ops.convert_to_numpy(big(batch)))
    head_norm = next(layer for layer in big._flatten_layers() if layer.name == "intermediate_layer_norm")
    assert head_norm.epsilon == 1e-5  # after the GeLU dense: a pure copy, ε stays


def test_target_sizes_and_refusals():
    small = randomize_weights(keras_hub.models.GPT2Backbone(**SIZES, dropout=0.0))
    big = kwiden.grow(small, intermediate_size=40)
    assert big.get_config()["intermediate_dim"] == 40 and big.get_config()["hidden_dim"] == 16
    with pytest.raises(GrowthError, match=r"LayerNorm under the non-integer factor 3/2 is approximate"):
        kwiden.grow(small, Fraction(3, 2), heads="count")
    with pytest.raises(GrowthError, match=r"approximate .*pass `check=` inputs to measure it"):
        kwiden.grow(small, Fraction(3, 2), heads="count", allow_approximate=True)
    with pytest.warns(UserWarning, match="approximate"):
        approximate = kwiden.grow(
            small, Fraction(3, 2), heads="count", allow_approximate=True, check=inputs(segments=False)
        )
    report = approximate.growth_report
    assert isinstance(report, kwiden.VerifyReport) and not report.ok
    assert 1e-4 < report.outputs[0].max_relative_error < 0.5
    with pytest.raises(GrowthError, match=r"does not support optimizer, depth yet"):
        kwiden.grow(small, 2, optimizer=keras.optimizers.Adam(), depth=2)
    classifier = keras_hub.models.BertTextClassifier(
        backbone=keras_hub.models.BertBackbone(**SIZES), num_classes=3, preprocessor=None
    )
    with pytest.raises(GrowthError, match=r"not BertTextClassifier.*grow its backbone"):
        kwiden.grow(classifier, 2)


def test_verify_points_keras_hub_models_to_the_growth_check():
    small = randomize_weights(keras_hub.models.GPT2Backbone(**SIZES, dropout=0.0))
    big = kwiden.grow(small, 2, check=inputs(segments=False))
    assert big.growth_report.ok and not big.growth_report.layers_compared
    with pytest.raises(ValueError, match=r"not KerasHub's GPT2Backbone.*check=inputs"):
        kwiden.verify(small, big, inputs(segments=False))
