"""Losses for span heads: Su Jianlin's multi-label categorical cross-entropy
(as bert4keras), and its GlobalPointer form.

>>> import numpy as np
>>> y_true = np.array([[0.0, 1.0, 0.0]])
>>> y_pred = np.array([[-5.0, 5.0, -5.0]], "float32")
>>> round(float(multilabel_categorical_crossentropy(y_true, y_pred)[0]), 4)
0.0201
"""

import weakref

import keras
from keras import ops

from kwiden.ner.targets import binary_labels, nan_unless

# bert4keras's "infinity": what takes a class out of a log-sum-exp.
_OUT = 1e12


@keras.saving.register_keras_serializable(package="kwiden")
def multilabel_categorical_crossentropy(y_true, y_pred):
    """`log(1 + Σ_neg e^s) + log(1 + Σ_pos e^−s)` over the last axis.

    Softmax cross-entropy generalised to any number of positive classes:
    every positive should score above 0 and every negative below, the
    threshold 0 standing in for the one class of a softmax; no class
    imbalance to weigh (a sentence has a handful of entities among its n²
    spans). `y_true` is 1 at the positives, 0 elsewhere; `y_pred` holds
    scores (logits, not probabilities). Returns one loss per row, computed in
    float32; classes scored -1e12 or -inf (masked spans) count for nothing.
    A label that is neither 0 nor 1 is refused (`kwiden.ner.targets`: a
    `ValueError` where concrete, a NaN row in a compiled step).
    """
    y_true, good = binary_labels(y_true, "multilabel_categorical_crossentropy")
    return nan_unless(ops.all(good, axis=-1), _crossentropy(y_true, y_pred))


def _crossentropy(y_true, y_pred):
    """`multilabel_categorical_crossentropy` of 0/1 labels."""
    y_pred = ops.cast(y_pred, "float32")
    y_pred = (1.0 - 2.0 * y_true) * y_pred  # positives' scores negated
    negatives = y_pred - y_true * _OUT
    positives = y_pred - (1.0 - y_true) * _OUT
    zeros = ops.zeros_like(y_pred[..., :1])  # the "1 +": the threshold's own e^0
    negative = ops.logsumexp(ops.concatenate([negatives, zeros], axis=-1), axis=-1)
    positive = ops.logsumexp(ops.concatenate([positives, zeros], axis=-1), axis=-1)
    return negative + positive


@keras.saving.register_keras_serializable(package="kwiden")
def global_pointer_crossentropy(y_true, y_pred):
    """The loss of a `GlobalPointer` head: each entity type's `seq × seq`
    span scores `(batch, heads, seq, seq)` as one multi-label problem, the
    gold span matrix `y_true` (1 at `[b, type, start, end]`) its positives;
    the mean over types, one loss per example `(batch,)` (bert4keras takes the
    mean over batch and types, which is the same once Keras averages the batch).
    A label that is neither 0 nor 1 is refused, as by
    `multilabel_categorical_crossentropy`."""
    y_true, good = binary_labels(y_true, "global_pointer_crossentropy")
    shape = ops.shape(y_pred)
    flat = (shape[0], shape[1], -1)
    losses = _crossentropy(ops.reshape(y_true, flat), ops.reshape(y_pred, flat))
    return nan_unless(ops.all(ops.reshape(good, (shape[0], -1)), axis=-1), ops.mean(losses, axis=-1))


@keras.saving.register_keras_serializable(package="kwiden")
class ConditionalRandomFieldLoss(keras.losses.Loss):
    """The negative log-likelihood of a `ConditionalRandomField` as a Keras loss:
    what its `loss` property gives, for `model.compile(loss=crf.loss)` on a
    model whose output is the CRF's. `y_true` holds tag ids `(batch, seq)`
    (or `(batch, seq, 1)`); padding is read from the CRF's marks in `y_pred`.

    The loss needs the layer's transitions, which a saved file cannot hold in
    a loss: a model loaded with its compile state gets a loss that names its
    layer and, called, asks to be compiled again with
    `loss=model.get_layer(name).loss` (predicting needs nothing).
    """

    def __init__(self, crf=None, layer_name=None, name="crf_loss", reduction="sum_over_batch_size", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        # Held weakly: Keras' saving walks every attribute, and the layer holds this loss.
        self.layer = (lambda: None) if crf is None else weakref.ref(crf)
        self.layer_name = crf.name if crf is not None else layer_name

    def call(self, y_true, y_pred):
        crf = self.layer()
        if crf is None:
            raise ValueError(
                f"This CRF loss was loaded from a file without its ConditionalRandomField '{self.layer_name}': "
                f"compile the loaded model again with loss=model.get_layer('{self.layer_name}').loss."
            )
        tags = ops.reshape(y_true, ops.shape(y_pred)[:-1])
        return crf.negative_log_likelihood(y_pred, tags)

    def get_config(self):
        return {**super().get_config(), "layer_name": self.layer_name}
