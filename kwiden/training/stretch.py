"""A stretch of training: what both loops that grow during training
(`kwiden.fit_growing`, `kwiden pretrain`) run between their growths,
evaluations and backups, `steps_per_execution` batches a call with nothing
in between."""

import itertools

import keras


def fit_stretch(model, batches, steps, callbacks=(), verbose=0, **fit_arguments):
    """`(batches trained on, the fit's history)`: `model.fit` on the next
    `steps` batches of the iterator `batches`, in order; fewer where a
    callback sets `model.stop_training` (Keras checks it after each call of
    `steps_per_execution` batches)."""
    counter = StepCounter(steps)
    fitted = model.fit(
        batches,
        steps_per_epoch=steps,
        shuffle=False,
        callbacks=[*callbacks, counter],
        verbose=verbose,
        **fit_arguments,
    )
    return counter.steps, fitted.history


def train_stretch(model, batches, steps, after_call):
    """`(batches trained on, the last logs)`: `model` trained on the next `steps` `(x, y)` batches of the iterator
    `batches`, `model.steps_per_execution` a call; after each call `after_call(batches trained on, logs)` (the
    logs' loss the mean over the stretch so far; `after_call` may change them) says whether to stop there.

    On TensorFlow the calls are the ones `train_on_batch` makes, given several batches: `fit` would feed them
    through a `tf.data` pipeline started anew each stretch, whose threads cost a stretch of a few updates more than
    its calls save (measured by benchmarks/loop_speed.py). Elsewhere `fit`, which keeps the state where it trains.
    """
    model.reset_metrics()
    if keras.backend.backend() != "tensorflow":
        watch = _AfterCall(steps, after_call)
        trained, _ = fit_stretch(model, batches, steps, callbacks=[watch])
        return trained, watch.logs
    model.make_train_function()
    trained, logs = 0, {}
    while trained < steps:
        count = min(model.steps_per_execution, steps - trained)
        logs = model.train_function((x, y, None) for x, y in itertools.islice(batches, count))
        trained += count
        logs = {name: float(keras.ops.convert_to_numpy(value)) for name, value in logs.items()}
        if after_call(trained, logs):
            break
    return trained, logs


class StepCounter(keras.callbacks.Callback):
    """How many batches a `fit` of `planned` batches an epoch trained on. Not the optimizer's iterations: a step
    that loss scaling skips (mixed_float16) leaves those as they were."""

    def __init__(self, planned):
        super().__init__()
        self.planned, self.steps = planned, 0

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the last of the steps just run; Keras names a short last call of an epoch as if it were whole.
        self.steps = min(batch + 1, self.planned)


class _AfterCall(StepCounter):
    def __init__(self, planned, after_call):
        super().__init__(planned)
        self.after_call, self.logs = after_call, {}

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        self.logs = {name: float(value) for name, value in (logs or {}).items()}
        if self.after_call(self.steps, self.logs):
            self.model.stop_training = True
