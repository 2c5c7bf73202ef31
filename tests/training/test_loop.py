"""The one training loop (`kwiden.training.loop`) driven by its `fit_growing` front end: growths, a Ctrl-C that
leaves a backup to resume from, a loss that is not finite, and a backup in the format kwiden wrote before the one
loop (`kwiden-growing.json` without the update)."""

import json
import shutil
import signal

import keras
import numpy as np
import pytest
from growing_runs import SCHEDULE, compile_for_growing
from growing_runs import weighted_batches as batches

import kwiden
from kwiden import optimizers
from kwiden.testing import padded_batch
from kwiden.training.fit import STATE_FILE
from kwiden.training.stretch import run_stretch


def compiled(gpt):
    return compile_for_growing(gpt())


class CtrlCAt(keras.callbacks.Callback):
    """Ctrl-C (SIGINT to this process, as a terminal sends it) once the optimizer has done `updates` updates."""

    def __init__(self, updates):
        super().__init__()
        self.updates, self.sent = updates, False

    def on_train_batch_end(self, batch, logs=None):
        if not self.sent and int(self.model.optimizer.iterations) >= self.updates:
            self.sent = True
            signal.raise_signal(signal.SIGINT)


def assert_same_weights(a, b):
    assert [w.path for w in a.weights] == [w.path for w in b.weights]
    for x, y in zip(a.weights, b.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=x.path)


def state(folder):
    return json.loads((folder / STATE_FILE).read_text())


def test_ctrl_c_between_growths_backs_up_and_the_same_call_resumes_to_identical_weights(gpt, tmp_path, straight):
    with pytest.raises(KeyboardInterrupt, match=r"stopped at update 5 \(Ctrl-C\): backed up in .*resume"):
        kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=9, verbose=0, callbacks=[CtrlCAt(5)],
                           backup_dir=tmp_path)  # fmt: skip
    saved = state(tmp_path)
    assert (saved["update"], saved["batches"], saved["growths_done"]) == (5, 5, 1)  # after the first growth
    resumed, history = kwiden.fit_growing(gpt(seed=7), batches(), SCHEDULE, steps=9, verbose=0, backup_dir=tmp_path)
    assert_same_weights(straight.model, resumed)
    assert kwiden.models.naming.count_blocks(layer.name for layer in resumed.layers) == 4  # the second growth too
    assert len(history["loss"]) == 2  # the rest of the second stretch, and the third


def test_ctrl_c_without_a_backup_dir_stops_and_says_how_to_keep_the_run(gpt):
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match=r"stopped at update 2 \(Ctrl-C\); give backup_dir= to resume"):
        kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=9, verbose=0, callbacks=[CtrlCAt(2)])
    assert signal.getsignal(signal.SIGINT) is before  # the loop's handler is gone


def test_a_loss_that_is_not_finite_stops_naming_the_update_and_keeps_the_last_good_backup(gpt, tmp_path):
    with pytest.raises(ValueError, match=r"training loss is nan by update 5: training diverged\. .* keeps the last"):
        kwiden.fit_growing(compiled(gpt), batches(poisoned=4), SCHEDULE, steps=9, verbose=0, backup_dir=tmp_path)
    saved = state(tmp_path)
    assert (saved["update"], saved["growths_done"]) == (3, 1)  # just after the growth, before the NaN
    kept = keras.saving.load_model(tmp_path / saved["model"], compile=False)
    assert all(np.isfinite(np.asarray(w)).all() for w in kept.weights)


def test_a_backup_in_the_format_before_the_one_loop_resumes_to_identical_weights(gpt, tmp_path, straight):
    """`kwiden-growing.json` as fit_growing wrote it before the one loop: no update (its batches give it)."""
    with pytest.raises(KeyboardInterrupt, match=r"stopped at update 4"):
        kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=9, verbose=0, callbacks=[CtrlCAt(4)],
                           backup_dir=tmp_path)  # fmt: skip
    today = {key: state(tmp_path)[key] for key in ("model", "backend", "generators", "growths_done", "batches",
                                                    "schedule")}  # fmt: skip
    (tmp_path / STATE_FILE).write_text(json.dumps(today, indent=1))
    resumed, _ = kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=9, verbose=0, backup_dir=tmp_path)
    assert_same_weights(straight.model, resumed)
    assert state(tmp_path)["update"] == 9  # written in the one loop's format from then on


def test_a_backup_at_a_position_its_schedule_cannot_reach_is_refused(gpt, tmp_path, backup_at_update_2):
    shutil.copytree(backup_at_update_2, tmp_path, dirs_exist_ok=True)
    (tmp_path / STATE_FILE).write_text(json.dumps({**state(tmp_path), "growths_done": 2}))
    with pytest.raises(ValueError, match=r"not a backup of this schedule's run to 9 updates .* after 2 growth"):
        kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=9, verbose=0, backup_dir=tmp_path)


def made_in_traces(model, batches, fit_arguments):
    """The names of the variables made while `run_stretch` trains `model` on `batches` (a list) inside a traced
    function; its logs."""
    tf = pytest.importorskip("tensorflow")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("only TensorFlow makes variables inside a traced step")
    made = []

    def record(make, **arguments):
        if tf.inside_function():
            made.append(arguments.get("name"))
        return make(**arguments)

    with tf.variable_creator_scope(record):
        trained, logs, _ = run_stretch(model, iter(batches), len(batches), lambda trained, logs: False, fit_arguments)
    assert trained == len(batches) and np.isfinite(logs["loss"])
    assert model.optimizer.built
    return made


@pytest.mark.parametrize("fit_arguments", [None, dict(verbose=0)], ids=["compiled calls", "fit"])
def test_a_stretch_makes_no_variable_inside_its_traced_step(gpt, fit_arguments):
    """The optimizer's and the metrics' variables are made before the step is traced: TensorFlow traces a step
    that makes variables twice, which doubled the compile time of every stretch after a growth."""
    model = compiled(gpt)
    model.compile(model.optimizer, model.loss, metrics=["accuracy"])
    assert made_in_traces(model, [(x, y) for x, y, _ in batches(3)], fit_arguments) == []


@pytest.mark.parametrize("fit_arguments", [None, dict(verbose=0)], ids=["compiled calls", "fit"])
def test_an_output_without_targets_still_builds_the_optimizer_before_the_trace(bert, fit_arguments):
    """A masked LM's batches hold None for the encoder's sequence output, which has no loss (as `kwiden pretrain`
    feeds a BERT): the optimizer is still built from the first batch, not inside a first trace."""
    model = bert(with_mlm=True)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizers.AdamW(1e-3), [None, loss])
    data = []
    for s in range(3):
        ids = padded_batch(lengths=(8,) * 4, seed=s, segments=False)
        data.append(((ids, np.zeros_like(ids)), (None, ids)))
    assert made_in_traces(model, data, fit_arguments) == []


def test_several_batches_a_call_of_different_shapes_train_as_one_a_call(gpt):
    """A stretch's compiled calls of several batches (`steps_per_execution`), one of them shorter, train the weights
    that one batch a call trains."""
    pairs = [(x, y) for x, y, _ in batches(7)]
    pairs[5] = tuple(part[:, :-2] for part in pairs[5])

    def trained(per_call):
        model = compiled(gpt)
        model.compile(model.optimizer, model.loss, steps_per_execution=per_call)
        calls, logs, _ = run_stretch(model, iter(pairs), 7, lambda trained, logs: False)
        assert calls == 7 and np.isfinite(logs["loss"])
        return model

    assert_same_weights(trained(1), trained(3))
