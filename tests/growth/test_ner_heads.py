"""`kwiden.grow` on a BERT or a RoFormer with a named-entity head on its
sequence output (GlobalPointer, EfficientGlobalPointer, Dense + CRF): the body
widens, the head's input axis is expanded as a Dense head's, and the head's
outputs stay exactly the small model's."""

import keras
import numpy as np
import pytest

import kwiden
from kwiden.layers import ConditionalRandomField, EfficientGlobalPointer, GlobalPointer
from kwiden.testing import RTOL, assert_exact, numpy_outputs, padded_batch, randomize_weights, tiny_config

HEADS = ["globalpointer", "efficient", "crf"]
TYPES, TAGS = 3, 7


def ner_model(family, head, padding=True, tril_mask=True, seed=0):
    """A tiny `family` body with `head` on its sequence output, every weight random and non-zero."""
    body = kwiden.build_transformer_model(tiny_config(), model=family)
    token_ids = body.inputs[0]
    mask = {"mask": keras.ops.not_equal(token_ids, 0)} if padding else {}
    x = body.output
    if head == "globalpointer":
        y = GlobalPointer(TYPES, 4, tril_mask=tril_mask, name="NER-GlobalPointer")(x, **mask)
    elif head == "efficient":
        y = EfficientGlobalPointer(TYPES, 4, tril_mask=tril_mask, name="NER-GlobalPointer")(x, **mask)
    else:
        y = ConditionalRandomField(TAGS, name="NER-CRF")(keras.layers.Dense(TAGS, name="NER-Tags")(x), **mask)
    return randomize_weights(keras.Model(body.inputs, y), seed)


def assert_real_scores_equal(small, big, inputs):
    """The scores of real spans (tokens), to float32 rounding relative to them alone:
    the -1e12 of masked ones would make any error look small next to it."""
    (expected,), (actual,) = numpy_outputs(small, inputs), numpy_outputs(big, inputs)
    real = expected > -1e11
    np.testing.assert_array_equal(actual > -1e11, real)
    np.testing.assert_array_equal(actual[~real], expected[~real])
    scale = np.abs(expected[real]).max()
    np.testing.assert_allclose(actual[real], expected[real], rtol=RTOL, atol=RTOL * scale)
    return expected, actual


@pytest.mark.backends
@pytest.mark.parametrize("family", ["bert", "roformer"])
@pytest.mark.parametrize("head", HEADS)
def test_the_head_keeps_its_outputs(family, head):
    small = ner_model(family, head)
    big = kwiden.grow(small, 2)
    inputs = padded_batch()
    assert_exact(small, big, inputs)
    assert_real_scores_equal(small, big, inputs)
    assert big.get_layer("Embedding-Token").output_dim == 32
    assert big.output_shape == small.output_shape


@pytest.mark.parametrize("head", ["globalpointer", "efficient"])
def test_unmasked_span_scores_grow_exactly(head):
    """No padding and no triangle: every score is a real one, so `assert_exact`'s
    relative error sees them all."""
    small = ner_model("roformer", head, padding=False, tril_mask=False, seed=1)
    big = kwiden.grow(small, 3, spread=0.5, seed=0)
    report = assert_exact(small, big, padded_batch(lengths=(9, 9, 9)))
    assert report.outputs[0].max_relative_error <= RTOL


@pytest.mark.parametrize("family, options", [("bert", {"k": 3}), ("roformer", {"k": 2, "heads": "count"})])
@pytest.mark.parametrize("head", HEADS)
def test_other_growths_keep_the_head(family, options, head):
    small = ner_model(family, head, seed=2)
    big = kwiden.grow(small, **options, spread=0.5, seed=0)
    assert_exact(small, big, padded_batch())
    assert_real_scores_equal(small, big, padded_batch())


def test_only_the_heads_input_axis_is_expanded():
    for head, name, untouched in [
        ("globalpointer", "NER-GlobalPointer", ["bias"]),
        ("efficient", "NER-GlobalPointer", ["bias", "type_kernel", "type_bias"]),
        ("crf", "NER-CRF", ["transitions"]),
    ]:
        small = ner_model("bert", head)
        big = kwiden.grow(small, 2)
        small_head, big_head = small.get_layer(name), big.get_layer(name)
        assert big_head.get_config() == small_head.get_config()
        for s, b in zip(small_head.weights, big_head.weights):
            if s.name in untouched:
                np.testing.assert_array_equal(np.asarray(b), np.asarray(s))
            else:
                assert tuple(b.shape) == (2 * s.shape[0], *s.shape[1:])
    assert tuple(big.get_layer("NER-Tags").kernel.shape) == (32, TAGS)


@pytest.mark.backends
def test_the_crf_decodes_and_scores_the_same_after_growth():
    small = ner_model("roformer", "crf", seed=3)
    big = kwiden.grow(small, 2)
    inputs = padded_batch()
    crf_small, crf_big = small.get_layer("NER-CRF"), big.get_layer("NER-CRF")
    small_scores, big_scores = assert_real_scores_equal(small, big, inputs)
    np.testing.assert_array_equal(np.asarray(crf_big.decode(big_scores)), np.asarray(crf_small.decode(small_scores)))
    tags = np.asarray(crf_small.decode(small_scores))
    np.testing.assert_allclose(
        np.asarray(crf_big.negative_log_likelihood(big_scores, tags)),
        np.asarray(crf_small.negative_log_likelihood(small_scores, tags)),
        rtol=RTOL,
    )


def test_a_crf_on_the_hidden_states_is_refused():
    body = kwiden.build_transformer_model(tiny_config(), model="bert")
    model = keras.Model(body.inputs, ConditionalRandomField(16, name="bare-CRF")(body.output))
    with pytest.raises(kwiden.GrowthError, match=r"'bare-CRF' reads tag scores.*put a Dense\(num_tags\)"):
        kwiden.grow(model, 2)
