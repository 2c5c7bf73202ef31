"""The multi-label categorical cross-entropy and its GlobalPointer form
against numpy loops; the span F1 metric against counting by hand."""

import keras
import numpy as np
import pytest
from graph_mode import compiled

from kwiden import layers
from kwiden.layers.spans import MASKED
from kwiden.ner import losses, metrics
from kwiden.testing import RTOL


def loop_loss(y_true, y_pred):
    """Row by row: log(1 + Σ_neg e^s) + log(1 + Σ_pos e^−s)."""
    out = []
    for labels, scores in zip(y_true, y_pred.astype(np.float64)):
        negative = 1.0 + sum(np.exp(s) for label, s in zip(labels, scores) if not label)
        positive = 1.0 + sum(np.exp(-s) for label, s in zip(labels, scores) if label)
        out.append(np.log(negative) + np.log(positive))
    return np.array(out)


def labels_and_scores(rng, shape):
    y_true = (rng.random(shape) < 0.2).astype("float32")
    return y_true, rng.normal(0, 3, shape).astype("float32")


@pytest.mark.backends
def test_multilabel_crossentropy_is_the_loop(rng):
    y_true, y_pred = labels_and_scores(rng, (6, 10))
    y_true[0] = 0  # no positive
    y_true[1] = 1  # no negative
    y_pred[2, :3] = MASKED  # masked classes count for nothing
    y_true[2, :3] = 0
    actual = np.asarray(keras.ops.convert_to_numpy(losses.multilabel_categorical_crossentropy(y_true, y_pred)))
    np.testing.assert_allclose(actual, loop_loss(y_true, y_pred), rtol=RTOL)


def test_a_confident_right_answer_costs_almost_nothing_and_a_wrong_one_much():
    y_true = np.array([[0.0, 1.0, 1.0, 0.0]])
    right = np.array([[-9.0, 9.0, 9.0, -9.0]], "float32")
    assert float(losses.multilabel_categorical_crossentropy(y_true, right)[0]) < 1e-3
    assert float(losses.multilabel_categorical_crossentropy(y_true, -right)[0]) > 9.0


@pytest.mark.backends
def test_global_pointer_crossentropy_is_the_mean_over_types_of_span_losses(rng):
    y_true, y_pred = labels_and_scores(rng, (3, 2, 5, 5))
    y_pred[..., np.tril_indices(5, -1)[0], np.tril_indices(5, -1)[1]] = MASKED
    y_true[..., np.tril_indices(5, -1)[0], np.tril_indices(5, -1)[1]] = 0
    expected = [
        np.mean([loop_loss(y_true[b, h].reshape(1, -1), y_pred[b, h].reshape(1, -1))[0] for h in range(2)])
        for b in range(3)
    ]
    actual = np.asarray(keras.ops.convert_to_numpy(losses.global_pointer_crossentropy(y_true, y_pred)))
    np.testing.assert_allclose(actual, expected, rtol=RTOL)


@pytest.mark.backends
def test_a_global_pointer_trains_with_it_and_its_f1_rises():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6, 8)).astype("float32")
    gold = np.zeros((32, 2, 6, 6), "float32")
    for b in range(32):
        for i in range(6):
            gold[b, int(x[b, i, 0] > 0), i, min(i + 1, 5)] = 1.0  # a span of 2 from each token, its type by a feature
    inputs = keras.Input((None, 8))
    model = keras.Model(inputs, layers.GlobalPointer(2, 8)(inputs))
    model.compile(keras.optimizers.Adam(0.02), loss=losses.global_pointer_crossentropy, metrics=[metrics.SpanF1()])
    before = metrics.span_f1_score(gold, model.predict(x, verbose=0))["f1"]
    history = model.fit(x, gold, epochs=30, batch_size=8, verbose=0).history
    after = metrics.span_f1_score(gold, model.predict(x, verbose=0))["f1"]
    assert np.isfinite(history["loss"]).all() and history["loss"][-1] < history["loss"][0] / 2
    assert after > 0.8 and after > before + 0.5
    assert history["span_f1"][-1] > history["span_f1"][0]


def count_by_hand(y_true, y_pred, threshold=0.0):
    correct = predicted = gold = 0
    for index in np.ndindex(y_true.shape):
        predicted += y_pred[index] > threshold
        gold += y_true[index] == 1
        correct += y_pred[index] > threshold and y_true[index] == 1
    return correct, predicted, gold


@pytest.mark.backends
def test_span_f1_counts_entities_across_batches(rng):
    y_true, y_pred = labels_and_scores(rng, (4, 3, 5, 5))
    correct, predicted, gold = count_by_hand(y_true, y_pred)
    assert metrics.span_counts(y_true, y_pred) == (correct, predicted, gold)
    expected = {"precision": correct / predicted, "recall": correct / gold, "f1": 2 * correct / (predicted + gold)}
    assert metrics.span_f1_score(y_true, y_pred) == pytest.approx(expected)
    for metric_class, score in [
        (metrics.SpanF1, "f1"),
        (metrics.SpanPrecision, "precision"),
        (metrics.SpanRecall, "recall"),
    ]:
        metric = metric_class()
        metric.update_state(y_true[:1], y_pred[:1])
        metric.update_state(y_true[1:], y_pred[1:])
        assert float(metric.result()) == pytest.approx(expected[score], rel=1e-6)
        assert metric.name == f"span_{score}"
        metric.reset_state()
        assert float(metric.result()) == 0.0


def test_span_f1_thresholds_weights_and_empty_counts(rng):
    y_true, y_pred = labels_and_scores(rng, (2, 1, 4, 4))
    assert metrics.span_counts(y_true, y_pred, threshold=1.0) == count_by_hand(y_true, y_pred, 1.0)
    weighted = metrics.SpanF1(threshold=1.0)
    weighted.update_state(y_true, y_pred, sample_weight=np.array([0.0, 1.0]))
    assert float(weighted.result()) == pytest.approx(metrics.span_f1_score(y_true[1:], y_pred[1:], 1.0)["f1"])
    nothing = np.zeros((1, 1, 3, 3))
    assert metrics.span_f1_score(nothing, nothing - 1) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    config = metrics.SpanRecall(threshold=0.5, name="recall").get_config()
    assert (config["threshold"], config["name"]) == (0.5, "recall")


def test_span_counts_refuse_shapes_that_differ():
    with pytest.raises(ValueError, match=r"span_counts: y_true has shape \(1, 2, 3, 3\) but y_pred has \(1, 2, 4, 4\)"):
        metrics.span_counts(np.zeros((1, 2, 3, 3)), np.zeros((1, 2, 4, 4)))


@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")  # compiled, never trained
def test_a_model_compiled_with_them_saves_and_loads(tmp_path):
    inputs = keras.Input((None, 8))
    model = keras.Model(inputs, layers.EfficientGlobalPointer(2, 4)(inputs))
    model.compile("adam", loss=losses.global_pointer_crossentropy, metrics=[metrics.SpanF1(threshold=0.5)])
    model.save(tmp_path / "ner.keras")
    loaded = keras.saving.load_model(tmp_path / "ner.keras")
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))
    assert loaded.loss is losses.global_pointer_crossentropy


LOSSES = {
    "multilabel_categorical_crossentropy": (losses.multilabel_categorical_crossentropy, (3, 4), (1, 2)),
    "global_pointer_crossentropy": (losses.global_pointer_crossentropy, (3, 2, 3, 3), (1, 0, 1, 2)),
}


@pytest.mark.backends
@pytest.mark.parametrize("bad", [2.0, -1.0, 0.5])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_a_label_that_is_not_0_or_1_is_refused(name, bad):
    """The loss masks classes by `y_true * 1e12`: a 2 or a 0.5 gave a finite, meaningless number."""
    loss, shape, index = LOSSES[name]
    y_true, y_pred = np.zeros(shape, "float32"), np.zeros(shape, "float32")
    y_true[index] = bad
    where = ", ".join(map(str, index))
    with pytest.raises(ValueError, match=rf"{name}: label {bad:g} at \[{where}\] is not 0 or 1"):
        loss(y_true, y_pred)
    values = np.asarray(keras.ops.convert_to_numpy(compiled(loss)(y_true, y_pred)))
    assert np.isnan(values[1]) and np.isfinite(values[[0, 2]]).all()


@pytest.mark.backends
def test_the_span_metrics_refuse_a_label_that_is_not_0_or_1():
    """`y_true > 0.5` counted a 2 as one entity and a -1 as none."""
    y_true, y_pred = np.zeros((2, 1, 3, 3), "float32"), np.zeros((2, 1, 3, 3), "float32")
    y_true[1, 0, 1, 2] = 2.0
    with pytest.raises(ValueError, match=r"span_counts: label 2 at \[1, 0, 1, 2\] is not 0 or 1"):
        metrics.span_counts(y_true, y_pred)
    metric = metrics.SpanF1()
    with pytest.raises(ValueError, match=r"SpanF1 'span_f1': label 2 at \[1, 0, 1, 2\] is not 0 or 1"):
        metric.update_state(y_true, y_pred)


@pytest.mark.backends
def test_a_compiled_evaluation_on_a_label_that_is_not_0_or_1_shows_a_nan_span_f1():
    y_true, y_pred = np.zeros((2, 1, 3, 3), "float32"), np.ones((2, 1, 3, 3), "float32")
    y_true[1, 0, 1, 2] = 2.0
    inputs = keras.Input((1, 3, 3))
    model = keras.Model(inputs, keras.layers.Identity()(inputs))
    model.compile(loss="mse", metrics=[metrics.SpanF1()])
    if keras.backend.backend() == "torch":  # evaluates eagerly: the labels are concrete
        with pytest.raises(ValueError, match="SpanF1 'span_f1': label 2"):
            model.evaluate(y_pred, y_true, verbose=0)
    else:
        assert np.isnan(model.evaluate(y_pred, y_true, verbose=0, return_dict=True)["span_f1"])
