"""The runs test_fit.py and test_loop.py both compare with or resume from, trained once a worker: building and
tracing a model is most of a training test's time."""

import types

import keras
import numpy as np
import pytest

import kwiden
from kwiden import optimizers
from kwiden.testing import padded_batch, randomize_weights, tiny_config

# The schedule both modules grow by (each names it SCHEDULE): the runs below are of it.
GROWTHS = {3: dict(k=2, spread=1.0), 6: dict(depth=2)}


def weighted_batches(count=20):
    """test_loop.py's language-model micro-batches `(x, y, sample_weight of ones)`: the weights test_fit.py's
    `(x, y)` train, bit for bit, and those test_loop.py compares exactly."""
    made = []
    for s in range(count):
        ids = padded_batch(lengths=(9,) * 4, seed=s, segments=False)
        made.append((ids[:, :-1], ids[:, 1:], np.ones(ids[:, 1:].shape, "float32")))
    return made


def compiled_gpt():
    """The tiny GPT of the `gpt` fixture (seed 0), compiled as both modules compile it (test_fit.py's `accuracy`
    metric reads the weights, and changes none)."""
    model = randomize_weights(kwiden.build_transformer_model(tiny_config(), model="gpt"), 0)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizers.AdamW(optimizers.WarmupDecay(3e-3, 2, 10)), loss)
    return model


class _WeightsAt(keras.callbacks.Callback):
    """Keeps a copy of the model's weights once the optimizer has done `updates` updates."""

    def __init__(self, updates):
        super().__init__()
        self.updates, self.weights = updates, None

    def on_train_batch_end(self, batch, logs=None):
        if self.weights is None and int(self.model.optimizer.updates_done) == self.updates:
            self.weights = [np.array(w) for w in self.model.get_weights()]


@pytest.fixture(scope="session")
def straight():
    """The 9 updates of GROWTHS trained straight through, where every resumed run must end (`.model`), and its
    weights at update 5, after the first growth (`.at_update_5`): where a run of 5 updates ends, for the learning
    rate schedule does not depend on the steps asked for. Read only."""
    at_5 = _WeightsAt(5)
    model = kwiden.fit_growing(compiled_gpt(), weighted_batches(), GROWTHS, steps=9, verbose=0, callbacks=[at_5])[0]
    return types.SimpleNamespace(model=model, at_update_5=at_5.weights)


@pytest.fixture(scope="session")
def backup_at_update_2(tmp_path_factory):
    """A `backup_dir` of GROWTHS' run stopped at update 2 (`steps=2`), before any growth: copy it
    (shutil.copytree) before writing into it."""
    folder = tmp_path_factory.mktemp("backup_at_update_2")
    kwiden.fit_growing(compiled_gpt(), weighted_batches(), GROWTHS, steps=2, verbose=0, backup_dir=folder)
    return folder
