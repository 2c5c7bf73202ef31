"""The one training loop (`kwiden.training.loop`) driven by its `kwiden pretrain` front end: a growth, a Ctrl-C
after it that leaves a backup to resume from, a loss that is not finite, and a run folder's backup in the format
kwiden wrote before the one loop (`state.json` without batches or schedule)."""

import json
import os
import shutil
import signal

import numpy as np
import pytest
from conftest import TINY_GPT, TINY_RUN, after_update, assert_same_weights

import kwiden

# Evaluating every update makes each update a stretch of its own: a Ctrl-C stops at the update it came in.
RUN = dict(model="gpt", config=TINY_GPT, eval_every=1, **TINY_RUN)


def without_seconds(rows):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def state_of(folder):
    return json.loads((folder / "backup" / "state.json").read_text())


@pytest.fixture(scope="module")
def whole(english, finished):
    """The uninterrupted run every test compares with (shared: the tests only read it)."""
    return finished(english, **RUN)


@pytest.fixture(scope="module")
def stopped(english, whole, tmp_path_factory):
    """The folder of RUN stopped by a Ctrl-C on the first update after its growth, which each test copies before
    going on there."""
    grew = whole.growths[0].update
    folder = tmp_path_factory.mktemp("stopped")
    with pytest.MonkeyPatch.context() as monkeypatch:
        after_update(monkeypatch, grew + 1, lambda logs: os.kill(os.getpid(), signal.SIGINT))
        with pytest.raises(
            KeyboardInterrupt, match=rf"stopped at update {grew + 1}: backup saved; run the same command"
        ):
            kwiden.pretrain(english, folder, **RUN)
    return folder


def test_ctrl_c_after_a_growth_backs_up_and_the_same_command_resumes_to_identical_weights(
    english, tmp_path, whole, stopped
):
    grew = whole.growths[0].update
    shutil.copytree(stopped, tmp_path / "stopped")
    state = state_of(tmp_path / "stopped")
    assert (state["update"], state["batches"], state["growths_done"]) == (grew + 1, grew + 1, 1)
    resumed = kwiden.pretrain(english, tmp_path / "stopped", **RUN)
    assert_same_weights(whole.model, resumed.model)
    assert without_seconds(resumed.metrics) == without_seconds(whole.metrics)


def test_a_loss_that_is_not_finite_stops_naming_the_update_and_keeps_the_last_good_backup(
    english, tmp_path, monkeypatch, whole
):
    grew = whole.growths[0].update
    after_update(monkeypatch, grew + 2, lambda logs: logs.update(loss=np.float32("inf")))
    with pytest.raises(ValueError, match=rf"training loss is inf by update {grew + 2}: training diverged"):
        kwiden.pretrain(english, tmp_path / "diverged", **RUN)
    state = state_of(tmp_path / "diverged")
    assert (state["update"], state["growths_done"]) == (grew, 1)  # the backup just after the growth, kept


def test_a_run_folders_backup_in_the_format_before_the_one_loop_resumes_to_identical_weights(
    english, tmp_path, whole, stopped
):
    shutil.copytree(stopped, tmp_path / "stopped")
    keys = ("model", "backend", "generators", "update", "growths_done", "seconds", "train_losses")
    today = {key: state_of(tmp_path / "stopped")[key] for key in keys}
    (tmp_path / "stopped" / "backup" / "state.json").write_text(json.dumps(today, indent=1))
    resumed = kwiden.pretrain(english, tmp_path / "stopped", **RUN)
    assert_same_weights(whole.model, resumed.model)
    assert state_of(tmp_path / "stopped")["batches"] == whole.updates  # the one loop's format from then on
