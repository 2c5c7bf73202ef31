"""Fixtures shared by the tests. Plain helpers (random weights, padded
batches, the exactness assertion, the tiny config) live in `kwiden.testing`,
where users can call them too."""

import os
from pathlib import Path

# The tests build the same tiny models again and again; JAX compiles each program once for the whole run (and
# the next) from a cache on disk that every worker and subprocess shares, rather than once a test.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).parent.parent / ".pytest_cache" / "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # before TensorFlow starts: each worker its share of the cores
    share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(share))
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(share))

import keras
import numpy as np
import pytest

import kwiden
from kwiden.testing import randomize_weights, tiny_config


@pytest.fixture
def rng():
    """A random generator seeded for each test, so data does not depend on test order."""
    return np.random.default_rng(0)


@pytest.fixture
def bert():
    """Build a tiny BERT with random non-zero weights: `bert(seed=0, with_mlm=…, **config)`."""

    def build(seed=0, **kwargs):
        flags = {key: kwargs.pop(key) for key in ("with_mlm", "with_pool") if key in kwargs}
        model = kwiden.build_transformer_model(tiny_config(**kwargs), model="bert", **flags)
        return randomize_weights(model, seed)

    return build


@pytest.fixture
def gpt():
    """Build a tiny GPT with random non-zero weights: `gpt(seed=0, **config)`."""

    def build(seed=0, **kwargs):
        return randomize_weights(kwiden.build_transformer_model(tiny_config(**kwargs), model="gpt"), seed)

    return build


@pytest.fixture(autouse=True)
def _float32_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")
