"""A stretch of training: what the loop (`kwiden.training.loop`) runs between
its growths, evaluations and backups, `steps_per_execution` batches a call
with nothing in between; one function for both front ends, with TensorFlow's
fast path behind it."""

import itertools

import keras
import numpy as np

from kwiden.keras_internals import build_for_training


def run_stretch(model, batches, steps, after_call, fit_arguments=None):
    """`(batches trained on, the last logs, the fit's history)`: `model` trained on the next `steps` batches of the
    iterator `batches`, in order, `model.steps_per_execution` a call; after each call `after_call(batches trained
    on, logs)` (the logs' loss the mean over the stretch so far; `after_call` may change them) says whether to stop
    there.

    With `fit_arguments` (`callbacks`, `verbose`, `initial_epoch`, `epochs`: `fit_growing`'s) the stretch is one
    epoch of `model.fit`, whose callbacks may stop it too (Keras checks `model.stop_training` after each call), and
    the history is its. Without, on TensorFlow, each call is one run of Keras' train function on the call's batches
    (`_one_call`), as `fit` runs it but without `fit`'s `tf.data` pipeline started anew each stretch, whose threads
    cost a stretch of a few updates more than they save (measured by benchmarks/loop_speed.py); the history is then
    empty. Elsewhere `fit`, which keeps the state where it trains.
    """
    if keras.backend.backend() == "tensorflow":
        batches = _built_for(model, batches)
        if fit_arguments is None:
            return _compiled_calls(model, batches, steps, after_call)
    fit_arguments = dict(fit_arguments or {})
    watch = _AfterCall(steps, after_call)
    fitted = model.fit(
        batches,
        steps_per_epoch=steps,
        shuffle=False,
        callbacks=[*fit_arguments.pop("callbacks", ()), watch],
        verbose=fit_arguments.pop("verbose", 0),
        **fit_arguments,
    )
    return watch.steps, watch.logs, fitted.history


def _built_for(model, batches):
    """`batches` as they were, once `model` is built for training from the first one: its train step, traced once
    instead of twice, compiles in half the time after each growth."""
    batches = iter(batches)
    first = next(batches, None)
    if first is None:
        return iter(())
    if all(hasattr(part, "shape") for part in keras.tree.flatten(first)):  # else Keras' own refusal, at its trace
        build_for_training(model, first)
    return (batch for batch in itertools.chain([first], batches))  # a generator: Keras' fit takes no other iterator


def _compiled_calls(model, batches, steps, after_call):
    model.reset_metrics()
    model.make_train_function()
    trained, logs = 0, {}
    while trained < steps:
        count = min(model.steps_per_execution, steps - trained)
        logs = model.train_function(_one_call(list(itertools.islice(batches, count))))
        trained += count
        logs = {name: float(keras.ops.convert_to_numpy(value)) for name, value in logs.items()}
        if after_call(trained, logs):
            break
    return trained, logs, {}


def _one_call(batches):
    """A call's batches `(x, y)` as Keras' TensorFlow train function runs them fastest: stacked into one `tf.data`
    iterator when they have the same shapes and no None, which it runs in one loop inside its graph, as `fit` does
    (given a Python iterator, it calls its one-batch graph once a batch from the host); else one by one."""
    import tensorflow as tf  # TensorFlow's fast path alone

    parts = [keras.tree.flatten(batch) for batch in batches]
    if any(part is None for flat in parts for part in flat):  # a target without a loss: tf.data holds no None
        return ((x, y, None) for x, y in batches)
    shapes = {tuple((np.shape(part), np.asarray(part).dtype) for part in flat) for flat in parts}
    if len(shapes) != 1:
        return ((x, y, None) for x, y in batches)
    stacked = keras.tree.pack_sequence_as(batches[0], [np.stack(column) for column in zip(*parts)])
    return iter(tf.data.Dataset.from_tensor_slices(stacked))


class _AfterCall(keras.callbacks.Callback):
    """How many batches a `fit` of `planned` batches an epoch trained on, and its last logs; `after_call` asked
    after each call. Not the optimizer's iterations: a step that loss scaling skips (mixed_float16) leaves those
    as they were."""

    def __init__(self, planned, after_call):
        super().__init__()
        self.planned, self.steps, self.after_call, self.logs = planned, 0, after_call, {}

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the last of the steps just run; Keras names a short last call of an epoch as if it were whole.
        self.steps = min(batch + 1, self.planned)
        self.logs = {name: float(value) for name, value in (logs or {}).items()}
        if self.after_call(self.steps, self.logs):
            self.model.stop_training = True
