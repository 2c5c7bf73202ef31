"""The growing run tests/training's fit and loop tests train, compare with and resume from (its session runs in
tests/training/conftest.py): one schedule, one stream of language-model batches, one way to compile."""

import keras
import numpy as np

from kwiden import optimizers
from kwiden.testing import padded_batch

SCHEDULE = {3: dict(k=2, spread=1.0), 6: dict(depth=2)}


def weighted_batches(count=20, poisoned=None):
    """`count` language-model micro-batches `(x, y, sample_weight)`, the same every time; the one at index
    `poisoned` weighted NaN, which makes its loss NaN. Weights of ones train the weights `(x, y)` train, bit for
    bit."""
    made = []
    for s in range(count):
        ids = padded_batch(lengths=(9,) * 4, seed=s, segments=False)
        weight = np.full(ids[:, 1:].shape, np.nan if s == poisoned else 1.0, "float32")
        made.append((ids[:, :-1], ids[:, 1:], weight))
    return made


def compile_for_growing(model, accum_steps=1, **compile_arguments):
    """`model` compiled as the growing run is: AdamW on a warmup-decay rate, the language model's loss."""
    schedule = optimizers.WarmupDecay(3e-3, 2, 10)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizers.AdamW(schedule, accum_steps=accum_steps), loss, **compile_arguments)
    return model
