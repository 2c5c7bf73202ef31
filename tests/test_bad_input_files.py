"""Bad luck with files: a backup folder shared with the user's own models, a
link planted where a temporary goes, a process killed mid-write, training
under mixed precision, a resume with a loss Keras cannot find. Nothing of the
user's is lost, and nothing is silently cut short."""

import errno
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import uuid
import warnings

import keras
import numpy as np
import pytest

import kwiden
from kwiden import files
from kwiden.testing import padded_batch
from kwiden.training.fit import BACKUP_PREFIX, STATE_FILE


def lm_batches(count=12):
    return [
        (ids[:, :-1], ids[:, 1:])
        for ids in (padded_batch(lengths=(9,) * 4, seed=s, segments=False) for s in range(count))
    ]


def token_loss(y_true, y_pred):
    """A loss Keras' registry does not know: a backup must resume with it all the same."""
    return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)


def compiled(model, loss=token_loss, optimizer=None):
    model.compile(optimizer or kwiden.optimizers.AdamW(3e-3), loss)
    return model


# 1. A backup deletes only what it wrote.


def test_an_earlier_versions_backup_resumes_and_is_replaced(gpt, tmp_path):
    """A state file naming `model-*.keras` (kwiden before its prefix): that file is kwiden's, and goes."""
    first = compiled(gpt())
    kwiden.fit_growing(first, lm_batches(), {1: dict(k=2)}, steps=1, verbose=0, backup_dir=tmp_path)
    state = json.loads((tmp_path / STATE_FILE).read_text())
    del state["batches"]  # nor did its state count batches: the optimizer's iterations say how far it got
    os.rename(tmp_path / state["model"], tmp_path / "model-1-0.keras")
    (tmp_path / STATE_FILE).write_text(json.dumps({**state, "model": "model-1-0.keras"}))
    (tmp_path / "model-5-0.keras").write_bytes(b"the user's")
    big, _ = kwiden.fit_growing(compiled(gpt()), lm_batches(), {1: dict(k=2)}, steps=2, verbose=0, backup_dir=tmp_path)
    assert big.get_layer("Embedding-Token").output_dim == 2 * first.get_layer("Embedding-Token").output_dim
    assert int(big.optimizer.iterations) == 2
    assert not (tmp_path / "model-1-0.keras").exists() and (tmp_path / "model-5-0.keras").read_bytes() == b"the user's"


def test_a_damaged_backup_state_is_named(gpt, tmp_path):
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=r"kwiden-growing.json is not a backup state kwiden can read"):
        kwiden.fit_growing(compiled(gpt()), lm_batches(), {2: dict(k=2)}, steps=4, verbose=0, backup_dir=tmp_path)


# 2. Temporary names cannot be planted.


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "table.txt"
    planted, fresh = uuid.UUID("1" * 32), uuid.UUID("2" * 32)
    names = iter([planted, fresh])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(names))
    link = tmp_path / f".table.txt{files.TEMPORARY}{planted.hex[:12]}.txt"
    link.symlink_to(victim)
    with files.replaced_atomically(target) as temporary:
        assert temporary.name != link.name and not temporary.is_symlink()
        temporary.write_text("new")
    assert victim.read_text() == "precious" and target.read_text() == "new"
    assert link.is_symlink()  # not kwiden's: left alone


def test_new_files_get_the_umask_mode_and_replaced_ones_keep_theirs(bert, tmp_path):
    old = os.umask(0o027)
    try:
        folder = kwiden.save_checkpoint(bert(), tmp_path / "new")
        assert {oct(p.stat().st_mode & 0o777) for p in folder.iterdir()} == {"0o640"}
        (folder / "model.safetensors").chmod(0o644)
        kwiden.save_checkpoint(bert(seed=1), folder)
        assert oct((folder / "model.safetensors").stat().st_mode & 0o777) == "0o644"
        with files.replaced_atomically(tmp_path / "table.txt") as temporary:
            temporary.write_text("x")
        assert oct((tmp_path / "table.txt").stat().st_mode & 0o777) == "0o640"
    finally:
        os.umask(old)


# 3. What a killed writer leaves, the next write removes.


# A child process imports kwiden/files.py alone (it needs nothing but the standard library and kwiden.messages),
# not all of kwiden: a bare package stands in for kwiden's, whose __init__ would take seconds importing Keras.
IMPORT_FILES = f"""
import importlib.util, sys, types
sys.modules["kwiden"] = types.ModuleType("kwiden")
sys.modules["kwiden"].__path__ = [{str(pathlib.Path(files.__file__).parent)!r}]
spec = importlib.util.spec_from_file_location("files", {str(pathlib.Path(files.__file__))!r})
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)
"""


def killed_while_writing(target, folder):
    """Run a process that is killed (SIGKILL) holding a temporary of `target`."""
    script = IMPORT_FILES + textwrap.dedent(f"""
        import os, signal
        with files.temporary_beside({str(target)!r}, suffix="" if {folder} else ".keras", folder={folder}) as temporary:
            if {folder}:
                (temporary / "model.safetensors").write_bytes(b"half" * 1000)
            else:
                temporary.write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()


def temporaries(folder):
    return sorted(p.name for p in folder.iterdir() if files.TEMPORARY in p.name)


def test_a_killed_backups_temporary_is_removed_by_the_next_save(tmp_path):
    target = tmp_path / "model.keras"
    killed_while_writing(target, folder=False)
    assert len(temporaries(tmp_path)) == 1
    with pytest.warns(
        UserWarning, match=r"Removed 1 temporary file\(s\) beside .*model.keras left by a kwiden process"
    ) as caught:
        with files.replaced_atomically(target) as temporary:
            temporary.write_text("whole")
    assert caught[0].filename == __file__  # files.sweep, three calls down, names this line
    assert temporaries(tmp_path) == [] and target.read_text() == "whole"


def test_a_killed_saves_temporary_folder_is_removed_by_the_next_save(bert, tmp_path):
    target = tmp_path / "out"
    killed_while_writing(target, folder=True)
    assert len(temporaries(tmp_path)) == 1
    model = bert()
    with pytest.warns(UserWarning, match=r"Removed 1 temporary") as caught:
        kwiden.save_checkpoint(model, target)
    assert {w.filename for w in caught if "Removed" in str(w.message)} == {__file__}
    assert temporaries(tmp_path) == [] and (target / "model.safetensors").is_file()


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    target = tmp_path / "model.keras"
    holder = subprocess.Popen(
        [sys.executable, "-c", IMPORT_FILES + f"import sys\nwith files.temporary_beside({str(target)!r}):\n"
         "    print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == b"ready\n"
        assert files.remove_stale(target) == [] and len(temporaries(tmp_path)) == 1
    finally:
        holder.communicate(b"")
    assert temporaries(tmp_path) == []  # its writer removed it on the way out


def test_a_file_system_without_locks_still_saves_and_sweeps_nothing(bert, tmp_path, monkeypatch):
    def no_locks(descriptor, operation):
        raise OSError(errno.ENOLCK, "No locks available")  # NFS without a lock daemon; Lustre without flock

    monkeypatch.setattr(files.fcntl, "flock", no_locks)
    kwiden.save_checkpoint(bert(), tmp_path / "out")
    with files.replaced_atomically(tmp_path / "table.txt") as temporary:
        temporary.write_text("x")
    assert temporaries(tmp_path) == [] and (tmp_path / "table.txt").read_text() == "x"
    unknown = tmp_path / f".out{files.TEMPORARY}0123456789ab"
    unknown.mkdir()  # whose writer may live: without locks nothing proves otherwise
    assert files.remove_stale(tmp_path / "out") == [] and unknown.is_dir()


def test_a_temporary_folder_swept_as_it_is_made_is_made_again(tmp_path, monkeypatch):
    real_open, swept = os.open, []

    def swept_first(path, flags, *mode):
        if not swept and pathlib.Path(path).is_dir() and files.TEMPORARY in str(path):
            swept.append(path)
            os.rmdir(path)  # another process' sweep, in the instant between mkdir and the lock
        return real_open(path, flags, *mode)

    monkeypatch.setattr(files.os, "open", swept_first)
    with files.temporary_beside(tmp_path / "out", folder=True) as folder:
        assert folder.is_dir() and str(folder) != str(swept[0])


# 4. Mixed precision: a skipped step is still a batch trained on.


def test_loss_scaling_that_skips_steps_does_not_cut_training_short(gpt, tmp_path):
    keras.config.set_dtype_policy("mixed_float16")
    try:
        small = gpt()
        # Far too large a scale: the first steps overflow in float16 and are skipped.
        optimizer = keras.optimizers.LossScaleOptimizer(kwiden.optimizers.AdamW(3e-3), initial_scale=2.0**60)
        small.compile(optimizer, token_loss)
        data = lm_batches(4)
        big, history = kwiden.fit_growing(small, data, {2: dict(k=2)}, steps=4, verbose=0, backup_dir=tmp_path)
        assert big.get_layer("Embedding-Token").output_dim == 2 * small.get_layer("Embedding-Token").output_dim
        assert len(history["loss"]) == 2  # both stretches ran
        assert int(big.optimizer.iterations) < 4  # steps were skipped: counting iterations would have stopped early
        assert json.loads((tmp_path / STATE_FILE).read_text())["batches"] == 4
        # Resuming at the end trains on nothing more, though the optimizer counts fewer updates.
        with pytest.raises(ValueError, match=r"cannot be compiled as saved \(Could not locate function 'token_loss'"):
            kwiden.fit_growing(gpt(), data, {2: dict(k=2)}, steps=4, verbose=0, backup_dir=tmp_path)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="Skipping variable loading")  # an optimizer state left out
            again, more = kwiden.fit_growing(compiled(gpt()), data, {2: dict(k=2)}, steps=4, verbose=0, backup_dir=tmp_path)  # fmt: skip
        assert more == {} and again.get_layer("Embedding-Token").output_dim == big.get_layer("Embedding-Token").output_dim  # fmt: skip
        # The grown model's loss scale (its own, after the growth) came back with the rest of the optimizer's state.
        assert isinstance(again.optimizer, keras.optimizers.LossScaleOptimizer)
        assert float(again.optimizer.dynamic_scale) == float(big.optimizer.dynamic_scale)
        # Called again without the backup, it goes on from the batches trained on, not the updates done.
        _, none = kwiden.fit_growing(again, data, {}, steps=4, verbose=0)
        assert none == {}
        # Compiled afresh, a model counts from its new optimizer's first update.
        again.compile(kwiden.optimizers.AdamW(1e-3), token_loss)
        _, one = kwiden.fit_growing(again, data, {}, steps=1, verbose=0)
        assert len(one["loss"]) == 1 and int(again.optimizer.iterations) == 1
    finally:
        keras.config.set_dtype_policy("float32")


# 1 and 11. A resume beside the user's own files, with a loss that is not registered.


@pytest.mark.backends
def test_a_backup_beside_the_users_models_resumes_with_an_unregistered_loss_to_identical_weights(gpt, tmp_path):
    own = {"model-01.keras": b"epoch one", "model-best.keras": b"the best", "model-12-2.keras": b"looks like ours"}
    for name, content in own.items():  # a ModelCheckpoint's files, in the folder the backups go to
        (tmp_path / name).write_bytes(content)
    schedule = {1: dict(k=2)}
    straight, _ = kwiden.fit_growing(compiled(gpt()), lm_batches(), schedule, steps=3, verbose=0)
    kwiden.fit_growing(compiled(gpt()), lm_batches(), schedule, steps=2, verbose=0, backup_dir=tmp_path)
    resumed, _ = kwiden.fit_growing(
        compiled(gpt(seed=5)), lm_batches(), schedule, steps=3, verbose=0, backup_dir=tmp_path
    )
    assert resumed.loss is token_loss
    for a, b in zip(straight.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert int(resumed.optimizer.iterations) == 3
    for name, content in own.items():
        assert (tmp_path / name).read_bytes() == content
    state = json.loads((tmp_path / STATE_FILE).read_text())
    ours = sorted(p.name for p in tmp_path.glob(f"{BACKUP_PREFIX}*"))
    assert ours == [state["model"]] == [f"{BACKUP_PREFIX}3-1.keras"]  # the earlier saves were replaced
