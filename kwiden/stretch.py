"""A stretch of training with Keras `fit`: what both loops that grow during
training (`kwiden.fit_growing`, `kwiden pretrain`) run between their growths,
evaluations and backups, so that Keras runs `steps_per_execution` batches a
call with nothing in between."""

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


class StepCounter(keras.callbacks.Callback):
    """How many batches a `fit` of `planned` batches an epoch trained on. Not the optimizer's iterations: a step
    that loss scaling skips (mixed_float16) leaves those as they were."""

    def __init__(self, planned):
        super().__init__()
        self.planned, self.steps = planned, 0

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the last of the steps just run; Keras names a short last call of an epoch as if it were whole.
        self.steps = min(batch + 1, self.planned)
