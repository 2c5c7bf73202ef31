"""Entity-level precision, recall and F1 of span heads (GlobalPointer):
a predicted entity is a span `[type, start, end]` scored above a threshold
(0, the multi-label cross-entropy's), and it counts when the gold span
matrix has that very span.

>>> import numpy as np
>>> gold = np.zeros((1, 2, 4, 4)); gold[0, 0, 1, 2] = gold[0, 1, 0, 0] = 1
>>> scores = np.full((1, 2, 4, 4), -3.0); scores[0, 0, 1, 2] = scores[0, 0, 3, 3] = 2.0
>>> span_f1_score(gold, scores)
{'precision': 0.5, 'recall': 0.5, 'f1': 0.5}
>>> metric = SpanF1()
>>> metric.update_state(gold, scores)
>>> round(float(metric.result()), 4)
0.5
"""

import keras
import numpy as np
from keras import ops

from kwiden.ner.targets import binary_labels, nan_unless


def span_counts(y_true, y_pred, threshold=0.0):
    """`(correct, predicted, gold)` entity counts, in numpy: `y_pred > threshold`
    against `y_true == 1`, both `(batch, heads, seq, seq)`; a label that is
    neither 0 nor 1 is refused."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if y_true.shape != y_pred.shape:
        raise ValueError(
            f"span_counts: y_true has shape {y_true.shape} but y_pred has {y_pred.shape}; give both as (batch, heads, seq, seq)."
        )
    binary_labels(y_true, "span_counts")
    gold, predicted = y_true > 0.5, y_pred > threshold
    return int(np.sum(gold & predicted)), int(np.sum(predicted)), int(np.sum(gold))


def scores_from_counts(correct, predicted, gold):
    """`{"precision", "recall", "f1"}` from entity counts; a ratio of 0/0 is 0
    (conlleval's convention: predicting nothing earns nothing)."""
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * correct / (predicted + gold) if predicted + gold else 0.0
    return {"precision": float(precision), "recall": float(recall), "f1": float(f1)}


def span_f1_score(y_true, y_pred, threshold=0.0):
    """Entity-level `{"precision", "recall", "f1"}` of span scores `y_pred`
    against the gold span matrix `y_true`, in numpy (for evaluation loops)."""
    return scores_from_counts(*span_counts(y_true, y_pred, threshold))


@keras.saving.register_keras_serializable(package="kwiden")
class SpanF1(keras.metrics.Metric):
    """Entity-level F1 of span scores over all batches seen, as a Keras metric
    (`model.compile(metrics=[kwiden.ner.metrics.SpanF1()])`): it keeps the counts
    of correct, predicted and gold entities, so the F1 is the corpus's, not
    a mean of batches'. `SpanPrecision` and `SpanRecall` keep the same counts.
    `sample_weight` `(batch,)` weighs each example's counts. A label that is
    neither 0 nor 1 is refused: a `ValueError` where concrete, NaN counts
    (so a NaN result) in a compiled step."""

    score = "f1"

    def __init__(self, threshold=0.0, name=None, dtype=None):
        super().__init__(name=name or f"span_{self.score}", dtype=dtype)
        self.threshold = float(threshold)
        self.counts = [
            self.add_variable(shape=(), initializer="zeros", name=count) for count in ("correct", "predicted", "gold")
        ]

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels, good = binary_labels(y_true, f"{type(self).__name__} '{self.name}'")
        gold = nan_unless(good, labels)
        predicted = ops.cast(ops.greater(ops.cast(y_pred, "float32"), self.threshold), "float32")
        per_example = [gold * predicted, predicted, gold]
        for variable, values in zip(self.counts, per_example):
            values = ops.sum(ops.reshape(values, (ops.shape(values)[0], -1)), axis=-1)
            if sample_weight is not None:
                values = values * ops.reshape(ops.cast(sample_weight, "float32"), (-1,))
            variable.assign_add(ops.cast(ops.sum(values), variable.dtype))

    def result(self):
        correct, predicted, gold = self.counts
        divide = ops.divide_no_nan
        return {
            "precision": divide(correct, predicted),
            "recall": divide(correct, gold),
            "f1": divide(2.0 * correct, predicted + gold),
        }[self.score]

    def reset_state(self):
        for variable in self.counts:
            variable.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "threshold": self.threshold}


@keras.saving.register_keras_serializable(package="kwiden")
class SpanPrecision(SpanF1):
    """Entity-level precision of span scores over all batches seen (see `SpanF1`)."""

    score = "precision"


@keras.saving.register_keras_serializable(package="kwiden")
class SpanRecall(SpanF1):
    """Entity-level recall of span scores over all batches seen (see `SpanF1`)."""

    score = "recall"
