"""Targets a loss or a metric cannot read (a tag id out of range, a label
that is not 0 or 1) said loudly rather than turned into a finite, wrong
number. Where the values are known to Python (numpy, eager tensors) a
`ValueError` names the first bad value and its index; inside a compiled
graph (`fit`'s train step, `tf.function`, `jax.jit`), where they are not,
the rows holding one get NaN, which stops kwiden's training and shows as
`nan` in Keras' logs.

>>> import numpy as np
>>> binary_labels(np.array([[0.0, 1.0], [2.0, 0.0]]), "my_loss")
Traceback (most recent call last):
...
ValueError: my_loss: label 2 at [1, 0] is not 0 or 1 (y_true marks a positive 1, a negative 0).
"""

import keras
import numpy as np
from keras import ops


def concrete(x):
    """`x` as a numpy array where its values are known now; None for a
    symbolic Keras tensor or a tensor traced into a graph."""
    if isinstance(x, keras.KerasTensor):
        return None
    try:
        return keras.ops.convert_to_numpy(x)
    except (TypeError, RuntimeError):  # JAX's tracers (a TypeError), TensorFlow's graph tensors (NotImplementedError)
        return None


def refuse_where_concrete(values, good, message):
    """Raise `ValueError(message(value, index))` for the first of `values`
    where `good` is False, when both are concrete; inside a graph nothing
    (the caller's NaN says it there)."""
    good = concrete(good)
    if good is None or good.all():
        return
    index = tuple(int(i) for i in np.argwhere(~good)[0])
    raise ValueError(message(concrete(values)[index], list(index)))


def binary_labels(labels, name):
    """`labels` in float32 with 0 where one is not 0 or 1, and where each is:
    the caller makes those rows NaN (`nan_unless`). Where concrete, the first
    that is not is a `ValueError` naming `name` (the loss or metric)."""
    labels = ops.cast(labels, "float32")
    good = ops.logical_or(ops.equal(labels, 0), ops.equal(labels, 1))
    refuse_where_concrete(labels, good, lambda value, index: (
        f"{name}: label {value:g} at {index} is not 0 or 1 (y_true marks a positive 1, a negative 0)."
    ))  # fmt: skip
    return ops.where(good, labels, 0.0), good


def nan_unless(good, values):
    """`values`, NaN where `good` is False. A `where`, not arithmetic: the
    gradient of the kept values stays finite."""
    return ops.where(good, values, ops.cast(float("nan"), values.dtype))
