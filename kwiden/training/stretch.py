"""A stretch of training: what the loop (`kwiden.training.loop`) runs between
its growths, evaluations and backups, `steps_per_execution` batches a call
with nothing in between; one function for both front ends, with TensorFlow's
fast path behind it."""

import itertools

import keras

from kwiden.keras_internals import build_for_training


def run_stretch(model, batches, steps, after_call, fit_arguments=None):
    """`(batches trained on, the last logs, the fit's history)`: `model` trained on the next `steps` batches of the
    iterator `batches`, in order, `model.steps_per_execution` a call; after each call `after_call(batches trained
    on, logs)` (the logs' loss the mean over the stretch so far; `after_call` may change them) says whether to stop
    there.

    With `fit_arguments` (`callbacks`, `verbose`, `initial_epoch`, `epochs`: `fit_growing`'s) the stretch is one
    epoch of `model.fit`, whose callbacks may stop it too (Keras checks `model.stop_training` after each call), and
    the history is its. Without, on TensorFlow, the calls are the ones `train_on_batch` makes, given several
    batches: `fit` would feed them through a `tf.data` pipeline started anew each stretch, whose threads cost a
    stretch of a few updates more than its calls save (measured by benchmarks/loop_speed.py); the history is then
    empty. (A call's batches stacked into one `tf.data` iterator, which Keras runs in one loop inside its graph,
    measured 0.65x the rate of these calls at 128 x 4 and within the noise at 64 x 2: not taken.) Elsewhere `fit`, which keeps the state where it trains.
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
    # None is an output without targets (an encoder's sequence beside its MLM logits); anything else without a
    # shape is left to Keras' own refusal, at its trace.
    if all(part is None or hasattr(part, "shape") for part in keras.tree.flatten(first)):
        build_for_training(model, first)
    return (batch for batch in itertools.chain([first], batches))  # a generator: Keras' fit takes no other iterator


def _compiled_calls(model, batches, steps, after_call):
    model.reset_metrics()
    model.make_train_function()
    trained, logs = 0, {}
    while trained < steps:
        count = min(model.steps_per_execution, steps - trained)
        logs = model.train_function((x, y, None) for x, y in itertools.islice(batches, count))
        trained += count
        logs = {name: float(keras.ops.convert_to_numpy(value)) for name, value in logs.items()}
        if after_call(trained, logs):
            break
    return trained, logs, {}


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
