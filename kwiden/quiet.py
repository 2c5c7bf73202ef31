"""The `kwiden` command's quiet start. TensorFlow writes notices from C++
while it is imported and first looks for devices (CUDA probed on a CPU-only
machine, oneDNN), through a logger that `TF_CPP_MIN_LOG_LEVEL` does not reach
before it is set up; the command hides what is written to the process's
standard error during those two steps alone, unless the user chose a log level."""

import contextlib
import os
import pathlib
import sys


def the_command_runs():
    """Whether this process is the `kwiden` command (its console script), not a Python program importing kwiden."""
    return pathlib.Path(sys.argv[0]).name == "kwiden"


def start_quietly():
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ or os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    with _native_stderr_hidden():
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()
        except Exception:  # shown again, with its message, when Keras imports TensorFlow
            pass


@contextlib.contextmanager
def _native_stderr_hidden():
    try:
        saved = os.dup(2)
    except OSError:  # no standard error to hide
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
