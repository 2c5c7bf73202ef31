import keras
import numpy as np
import pytest

import kwiden
from kwiden.growth.verify import infer_factor
from kwiden.testing import padded_batch


def test_report_of_an_exact_growth(bert):
    small = bert(with_mlm=True)
    big = kwiden.grow(small, 2)
    report = kwiden.verify(small, big, padded_batch())
    assert report.ok and report.factor == 2 and report.first_departure is None
    text = str(report)
    assert "OK" in text and "MLM-Bias" in text and "100.00%" in text and "every layer within rtol" in text


@pytest.mark.backends
def test_names_the_first_layer_that_departs(bert):
    small = bert(with_mlm=True)
    big = kwiden.grow(small, 2)
    ffn = big.get_layer("Transformer-1-FeedForward")
    noise = np.random.default_rng(5).normal(0, 0.1, ffn.output_bias.shape)  # not uniform: LN would remove that
    ffn.output_bias.assign(keras.ops.convert_to_numpy(ffn.output_bias) + noise)
    report = kwiden.verify(small, big, padded_batch())
    assert not report.ok
    name, error = report.first_departure
    assert name == "Transformer-1-FeedForward" and error > 1e-3
    assert all(o.max_relative_error > 1e-5 for o in report.outputs)
    assert "NOT EXACT" in str(report) and "'Transformer-1-FeedForward'" in str(report)


def test_rtol_decides(gpt):
    small = gpt()
    big = kwiden.grow(small, 2)
    norm = big.get_layer("Output-Norm")
    norm.beta.assign(norm.beta.numpy() * (1 + 1e-4))
    inputs = padded_batch(segments=False)
    assert not kwiden.verify(small, big, inputs, rtol=1e-6).ok
    assert kwiden.verify(small, big, inputs, rtol=1e-2).ok


def test_argmax_agreement_counts_changed_predictions(gpt):
    small = gpt()
    big = kwiden.grow(small, 2)
    big.get_layer("Embedding-Token").embeddings.assign(np.random.default_rng(9).normal(size=(97, 32)))
    report = kwiden.verify(small, big, padded_batch(segments=False))
    assert report.outputs[0].argmax_agreement < 0.5


@pytest.mark.parametrize("k", [1, 2, 3])
def test_infers_the_factor(gpt, k):
    small = gpt()
    assert infer_factor(small, kwiden.grow(small, k)) == k


def test_bad_factor_is_refused(gpt):
    with pytest.raises(ValueError, match="`k` must be a number >= 1"):
        kwiden.verify(gpt(), gpt(), padded_batch(segments=False), k=0)


def test_verify_reads_the_recorded_plan(gpt):
    import gc
    import weakref

    small = gpt()
    big = kwiden.grow(small, 2, depth=2)
    record = big.growth_record
    assert record.source is small and record.growth.k == 2 and record.blocks == {0: (0, 1), 1: (2, 3)}
    assert record.renamed("Transformer-1-FeedForward") == "Transformer-2-FeedForward"
    assert kwiden.verify(small, big, padded_batch(segments=False), k=2).ok  # the plan's own k: the plan is used
    with pytest.raises(ValueError, match="another model than `small`"):
        kwiden.verify(gpt(seed=1), big, padded_batch(segments=False), plan=record)
    bigger = kwiden.grow(big, 2)
    assert bigger.growth_record.source is big
    reference = weakref.ref(small)
    del small, record
    gc.collect()
    assert reference() is None and big.growth_record.source is None  # growths do not keep their sources alive
