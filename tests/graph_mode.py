"""A function run where values are not known to Python, as in a compiled train step."""

import keras
import pytest


def compiled(function):
    """`function` traced into the backend's graph, where values are not known to Python (a compiled train step)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function)
    if backend == "jax":
        import jax

        return jax.jit(function)
    pytest.skip(f"{backend} runs these eagerly, where the ValueError tests cover them")
