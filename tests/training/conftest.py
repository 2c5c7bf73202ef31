"""The runs test_fit.py and test_loop.py both compare with or resume from, trained once a worker: building and
tracing a model is most of a training test's time."""

import types

import keras
import numpy as np
import pytest
from growing_runs import SCHEDULE, compile_for_growing, weighted_batches

import kwiden
from kwiden.testing import randomize_weights, tiny_config


def compiled_gpt():
    """The tiny GPT of the `gpt` fixture (seed 0), compiled as both modules compile it (test_fit.py's `accuracy`
    metric reads the weights, and changes none)."""
    return compile_for_growing(randomize_weights(kwiden.build_transformer_model(tiny_config(), model="gpt"), 0))


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
    """The 9 updates of SCHEDULE trained straight through, where every resumed run must end (`.model`), and its
    weights at update 5, after the first growth (`.at_update_5`): where a run of 5 updates ends, for the learning
    rate schedule does not depend on the steps asked for. Read only."""
    at_5 = _WeightsAt(5)
    model = kwiden.fit_growing(compiled_gpt(), weighted_batches(), SCHEDULE, steps=9, verbose=0, callbacks=[at_5])[0]
    return types.SimpleNamespace(model=model, at_update_5=at_5.weights)


@pytest.fixture(scope="session")
def backup_at_update_2(tmp_path_factory):
    """A `backup_dir` of SCHEDULE's run stopped at update 2 (`steps=2`), before any growth: copy it
    (shutil.copytree) before writing into it."""
    folder = tmp_path_factory.mktemp("backup_at_update_2")
    kwiden.fit_growing(compiled_gpt(), weighted_batches(), SCHEDULE, steps=2, verbose=0, backup_dir=folder)
    return folder
