"""The run folder is kwiden's alone: what a call may write, remove, trust and
refuse there (docs/guarantees.md#the-run-folder). Each case failed before its
fix: a refusal deleting the user's files, a failed run emptied of its log,
`final/` written through a planted link, two runs at once, a foreign
vocabulary taken, a resume on another backend, a resumed row averaging too
few losses, a growth in which nothing grows, a corpus edited in place, a torn
metrics line, a target too big for memory."""

import json
import os
import shutil
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
from conftest import SMALL_RUN, TINY_BERT, TINY_GPT, TINY_RUN, after_update, copied, kill

import kwiden
from kwiden.files import FolderLock
from kwiden.pretraining import checks, outputs, run
from kwiden.text import tokens


def pretrain(corpus, folder, **changes):
    return kwiden.pretrain(corpus, folder, **{"model": "gpt", "config": TINY_GPT, **TINY_RUN, **changes})


def names(folder):
    return sorted(p.name for p in folder.iterdir())


def record(folder):
    return json.loads((folder / "run.json").read_text())


@pytest.fixture
def small(english, finished, tmp_path):
    """tmp_path / "run" holding a finished SMALL_RUN: a copy of one run a worker (the tests write into it)."""
    return copied(finished(english, **SMALL_RUN), tmp_path / "run")


def test_a_folder_holding_files_kwiden_did_not_write_is_refused_and_left_as_it_was(english, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    vocab = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefgh"]) + "\n"
    (folder / "vocab.txt").write_text(vocab)
    (folder / "log.txt").write_text("my notes")
    with pytest.raises(ValueError, match=r"run holds files kwiden did not write \(log\.txt, vocab\.txt\)"):
        pretrain(english, folder, model="bert", config={**TINY_BERT, "vocab_size": 99}, tokenizer=folder / "vocab.txt")
    assert names(folder) == ["log.txt", "vocab.txt"]
    assert (folder / "vocab.txt").read_text() == vocab and (folder / "log.txt").read_text() == "my notes"


def test_a_refused_call_removes_only_what_it_recorded_writing(english, tmp_path):
    folder = tmp_path / "run"
    with pytest.raises(ValueError, match="too small for --warmup 40"):
        pretrain(english, folder, budget=2, grow="none", warmup=40)
    # Refused after it tokenized: the token file stays for the corrected call, recorded as kwiden's.
    assert names(folder) == ["run.json", "tokens"]
    assert record(folder) == dict(state=outputs.REFUSED, written=["tokens"])
    (folder / "notes.txt").write_text("mine")  # put there between the two calls: the folder is no longer empty
    with pytest.raises(ValueError, match=r"run holds notes\.txt, which kwiden did not write there"):
        pretrain(english, folder, budget=2, grow="none")
    assert (folder / "notes.txt").read_text() == "mine"
    (folder / "notes.txt").unlink()
    assert pretrain(english, folder, budget=2, grow="none").updates == 2
    (folder / "notes.txt").write_text("mine")  # beside a run that trained: resumed, never touched
    assert pretrain(english, folder, budget=2, grow="none").updates == 2
    assert (folder / "notes.txt").read_text() == "mine"
    # A name kwiden writes, put there by the user after a refusal, is refused, not overwritten.
    other = tmp_path / "other"
    with pytest.raises(ValueError, match="vocab_size 257"):
        pretrain(english, other, budget=2, grow="none", config={**TINY_GPT, "vocab_size": 257})
    assert names(other) == ["run.json"]  # refused before the corpus was read: nothing else was written
    (other / "log.txt").write_text("my log")
    with pytest.raises(ValueError, match=r"other holds log\.txt, which kwiden did not write there"):
        pretrain(english, other, budget=2, grow="none")
    assert (other / "log.txt").read_text() == "my log"


def test_a_call_killed_before_it_trained_leaves_the_folder_to_the_corrected_one(english, tmp_path, monkeypatch):
    folder = tmp_path / "run"

    def killed(*args, **kwargs):
        raise SystemExit("killed")

    monkeypatch.setattr(outputs.RunFolder, "release", lambda self: None)  # kill -9: nothing is cleaned up
    monkeypatch.setattr(tokens, "tokenized", killed)
    with pytest.raises(SystemExit, match="^killed$"):
        pretrain(english, folder, budget=2, grow="none", lr=1.0)
    assert record(folder)["state"] == outputs.CLAIMED
    monkeypatch.undo()
    assert pretrain(english, folder, budget=2, grow="none").updates == 2  # another --lr: the folder was free


def test_a_run_that_trained_and_failed_keeps_its_files_and_resumes(english, tmp_path, monkeypatch):
    folder = tmp_path / "run"
    run_arguments = dict(grow="none", save_every=2, warmup=0)
    after_update(monkeypatch, 5, lambda logs: logs.update(loss=np.float32("nan")))
    with pytest.raises(ValueError, match=r"training diverged\. Give a lower --lr .* keeps this run's log, metrics"):
        pretrain(english, folder, **run_arguments)
    assert {"run.json", "log.txt", "metrics.jsonl", "backup"} <= set(names(folder))
    assert record(folder)["state"] == outputs.TRAINING
    assert "training diverged" in (folder / "log.txt").read_text()
    assert json.loads((folder / "backup" / "state.json").read_text())["update"] == 4
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"holds a run made with --lr 0.003, not 0.001"):
        pretrain(english, folder, **run_arguments, lr=1e-3)
    resumed = pretrain(english, folder, **run_arguments)
    assert "resuming from the backup at update 4" in (folder / "log.txt").read_text()
    assert resumed.updates == TINY_RUN["budget"]


def test_final_is_staged_under_a_random_name_and_never_written_through_a_link(english, tmp_path, small):
    folder, victim = small, tmp_path / "victim"
    victim.mkdir()
    for fixed in ("final.kwiden-tmp-", ".final.kwiden-tmp-", "final.kwiden-tmp-old"):  # names once used or guessable
        (folder / fixed).symlink_to(victim, target_is_directory=True)
    again = pretrain(english, folder, budget=2, grow="none")  # a finished run run again writes final/ again
    assert names(victim) == [] and not again.final.is_symlink() and (again.final / "model.safetensors").is_file()
    for fixed in ("final.kwiden-tmp-", ".final.kwiden-tmp-", "final.kwiden-tmp-old"):
        (folder / fixed).unlink()
    # final/ itself a link: refused, nothing written where it points.
    os.rename(folder / "final", tmp_path / "moved")
    (folder / "final").symlink_to(victim, target_is_directory=True)
    with pytest.raises(ValueError, match=r"final is a link or a file, which kwiden did not write"):
        pretrain(english, folder, budget=2, grow="none")
    assert names(victim) == []
    assert [name for name in names(folder) if "kwiden-tmp" in name] == []
    # The log, the metrics and the token file: a link planted there is refused or replaced, never written through.
    (folder / "final").unlink()
    (victim / "log").write_text("theirs")
    os.rename(folder / "log.txt", tmp_path / "log.txt")
    (folder / "log.txt").symlink_to(victim / "log")
    with pytest.raises(ValueError, match=r"The log .*log\.txt is a link"):
        pretrain(english, folder, budget=2, grow="none")
    assert (victim / "log").read_text() == "theirs"


def test_a_link_planted_at_the_token_file_is_replaced_not_written_through(english, tmp_path):
    folder, victim = tmp_path / "run", tmp_path / "victim.bin"
    with pytest.raises(ValueError, match="too small for --warmup 40"):
        pretrain(english, folder, budget=2, grow="none", warmup=40)
    victim.write_bytes(b"theirs")
    (folder / "tokens" / "ids.bin").unlink()
    (folder / "tokens" / "ids.bin").symlink_to(victim)
    (folder / "tokens" / "index.json").unlink()  # the token file must be made again
    pretrain(english, folder, budget=2, grow="none")
    assert victim.read_bytes() == b"theirs" and not (folder / "tokens" / "ids.bin").is_symlink()


def test_a_folder_in_use_is_refused_at_once_and_freed_when_its_holder_dies(english, small):
    folder = small
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; d = os.open(sys.argv[1], os.O_RDONLY); "
         "fcntl.flock(d, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)", str(folder)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(ValueError, match=rf"run is in use by process {os.getpid()} \(a kwiden run holds it\)"):
            pretrain(english, folder, budget=2, grow="none")  # run.json names the process that last claimed it
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert pretrain(english, folder, budget=2, grow="none").updates == 2  # the kernel dropped the dead holder's lock
    # Held within this process too (another open file): refused, and the folder left as it was.
    lock = FolderLock(folder)
    assert lock.acquire() == "locked"
    before = (folder / "metrics.jsonl").read_text()
    try:
        with pytest.raises(ValueError, match="is in use by process"):
            pretrain(english, folder, budget=2, grow="none")
    finally:
        lock.release()
    assert (folder / "metrics.jsonl").read_text() == before


def test_build_vocab_trusts_only_the_vocabulary_it_recorded(english, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]) + "\n")
    bert = dict(model="bert", config=TINY_BERT, build_vocab=300, budget=2, grow="none")
    with pytest.raises(ValueError, match=r"holds files kwiden did not write \(vocab\.txt\)"):
        pretrain(english, folder, **bert)
    (folder / "vocab.txt").unlink()
    result = pretrain(english, folder, **bert)
    built = (folder / "vocab.txt").read_text()
    assert len(built.splitlines()) > 8 and result.model.get_layer("Embedding-Token").input_dim == len(
        built.splitlines()
    )
    assert pretrain(english, folder, **bert).updates == 2  # its own vocabulary, recorded: resumed
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]) + "\n")
    with pytest.raises(ValueError, match=r"vocab\.txt is not the vocabulary this run built and trained on \(changed"):
        pretrain(english, folder, **bert)


def test_a_resume_on_another_backend_or_precision_is_refused_naming_both(english, small):
    folder = small
    began = record(folder)
    assert began["computed_on"] == dict(backend=keras.backend.backend(), precision="float32")
    other = "jax" if keras.backend.backend() != "jax" else "tensorflow"
    for changed, message in [
        (dict(backend=other), rf"begun on the {other} backend in float32; resumed on {keras.backend.backend()}"),
        (dict(precision="mixed_bfloat16"), r"in mixed_bfloat16; resumed on .* in float32 it would not end"),
    ]:
        (folder / "run.json").write_text(json.dumps({**began, "computed_on": {**began["computed_on"], **changed}}))
        with pytest.raises(ValueError, match=message):
            pretrain(english, folder, budget=2, grow="none")


def test_a_run_resumed_by_a_process_on_another_backend_is_refused(english, small):
    folder = small
    other = "jax" if keras.backend.backend() != "jax" else "tensorflow"
    code = (
        "import sys, kwiden; sys.path.insert(0, sys.argv[3]); from conftest import TINY_GPT, TINY_RUN\n"
        "try:\n"
        "    kwiden.pretrain(sys.argv[1], sys.argv[2], model='gpt', config=TINY_GPT, **{**TINY_RUN, 'budget': 2},"
        " grow='none')\n"
        "except ValueError as error:\n"
        "    print(error)"
    )
    here = os.path.dirname(__file__)
    done = subprocess.run([sys.executable, "-c", code, str(english), str(folder), here], capture_output=True,
                          text=True, env={**os.environ, "KERAS_BACKEND": other})  # fmt: skip
    assert f"begun on the {keras.backend.backend()} backend in float32; resumed on {other} in float32" in done.stdout


# Rows every 3 updates, backups every 4: a run killed at update 5 resumes from 4, its next row at 6.
ROWS_AND_BACKUPS = dict(model="gpt", config=TINY_GPT, **TINY_RUN, grow="none", eval_every=3, save_every=4)


@pytest.fixture(scope="module")
def killed(english, finished, tmp_path_factory):
    """The whole run of ROWS_AND_BACKUPS, and the folder of the same run killed at update 5 (which each test copies
    before it goes on there)."""
    whole = finished(english, **ROWS_AND_BACKUPS)
    folder = tmp_path_factory.mktemp("killed")
    with pytest.MonkeyPatch.context() as monkeypatch:
        after_update(monkeypatch, 5, kill)
        with pytest.raises(SystemExit, match="^killed$"):
            kwiden.pretrain(english, folder, **ROWS_AND_BACKUPS)
    return whole, folder


def test_the_first_row_after_a_resume_is_the_uninterrupted_runs(english, tmp_path, killed):
    whole, stopped = killed
    resumed = kwiden.pretrain(english, shutil.copytree(stopped, tmp_path / "killed"), **ROWS_AND_BACKUPS)

    def without_time(rows):
        return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]

    assert [r["update"] for r in resumed.metrics] == [0, 3, 6, 9, 12]
    assert without_time(resumed.metrics) == without_time(whole.metrics)


def test_a_backup_of_the_previous_format_one_loss_a_micro_batch_resumes(english, tmp_path, killed):
    whole, stopped = killed
    path = shutil.copytree(stopped, tmp_path / "killed") / "backup" / "state.json"
    state = json.loads(path.read_text())
    assert state["update"] == 4 and [count for _, count in state["train_losses"]] == [1]  # update 4, since row 3
    state["train_losses"] = [loss for loss, count in state["train_losses"] for _ in range(count)]
    path.write_text(json.dumps(state))
    resumed = kwiden.pretrain(english, tmp_path / "killed", **ROWS_AND_BACKUPS)
    assert resumed.metrics[0]["train_loss"] is None  # the first row, before any update
    assert [r["train_loss"] for r in resumed.metrics[1:]] == pytest.approx([r["train_loss"] for r in whole.metrics[1:]])


def test_a_corpus_file_edited_in_place_keeping_its_size_and_time_is_noticed(english, tmp_path):
    corpus = tmp_path / "a.txt"
    corpus.write_text(english.read_text()[:8000])
    stamp = corpus.stat()
    pretrain(corpus, tmp_path / "run", budget=2, grow="none")
    corpus.write_text(english.read_text()[1:8001])  # as many bytes, other ones
    os.utime(corpus, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # as touch -r, rsync -t or tar leave it
    assert corpus.stat().st_size == stamp.st_size and corpus.stat().st_mtime_ns == stamp.st_mtime_ns
    with pytest.raises(ValueError, match=r"gives [\d,]+ other tokens now \(a file added, removed or edited\)"):
        pretrain(corpus, tmp_path / "run", budget=2, grow="none")


def test_a_torn_last_metrics_line_is_dropped_and_any_other_bad_line_named(english, tmp_path):
    folder = tmp_path / "run"
    arguments = dict(grow="none", save_every=4)
    first = pretrain(english, folder, **arguments)
    metrics = folder / "metrics.jsonl"
    whole = metrics.read_text()
    metrics.write_text(whole + '{"update": 13, "tokens": 8')  # a disk that filled during an append
    with pytest.warns(UserWarning, match=r"metrics\.jsonl: its last line was cut short"):
        again = pretrain(english, folder, **arguments)
    assert metrics.read_text() == whole and again.metrics == first.metrics
    lines = whole.splitlines(keepends=True)
    metrics.write_text("".join(lines[:2]) + "not json\n" + "".join(lines[2:]))
    with pytest.raises(ValueError, match=r"metrics\.jsonl, line 3: not a metrics row kwiden wrote \('not json'\)"):
        pretrain(english, folder, **arguments)


def test_a_target_too_big_for_memory_is_refused_before_it_is_built(english, tmp_path, monkeypatch):
    huge = {**TINY_GPT, "hidden_size": 4096, "num_hidden_layers": 48, "num_attention_heads": 32,
            "intermediate_size": 16384, "max_position_embeddings": 1024}  # fmt: skip
    monkeypatch.setattr(checks, "available_memory", lambda: 21e9)
    built = []
    monkeypatch.setattr(run.Phase, "built", lambda *args: built.append(args))
    with pytest.raises(
        ValueError,
        match=r"The target \(hidden_size 4096 × 48 blocks, about 9.67 billion parameters\) needs about 156 GB to "
        r"train \(155 GB for the weights, their gradients and Adam's moments; 0.919 GB for a batch of 4 × 16 "
        r"tokens\), and 21 GB is available: give a smaller --config",
    ):
        pretrain(english, tmp_path / "run", config=huge)
    assert built == []  # refused before building anything
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"needs about \d[\d.]* [GT]B to train"):  # this machine, whatever it has
        pretrain(english, tmp_path / "run", config={**huge, "hidden_size": 65536, "num_attention_heads": 512})
    assert pretrain(english, tmp_path / "run", budget=2, grow="none").updates == 2  # the folder was left free


def test_on_an_accelerator_the_target_is_held_to_the_devices_free_memory(english, tmp_path, monkeypatch):
    big = {**TINY_GPT, "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8, "intermediate_size": 4096}
    monkeypatch.setattr(checks, "accelerated", lambda: True)
    monkeypatch.setattr(checks, "available_memory", lambda: 1e15)  # the host's memory is not what trains
    monkeypatch.setattr(checks, "device_memory", lambda: 1e8)
    with pytest.raises(ValueError, match=r"and 0.1 GB is available: .* \(The memory is the accelerator's.\)"):
        pretrain(english, tmp_path / "run", config=big)


def test_a_pipe_or_a_file_given_to_from_is_named_for_what_it_is(english, tmp_path):
    pipe = tmp_path / "corpus.txt"
    os.mkfifo(pipe)
    with pytest.raises(ValueError, match=r"corpus\.txt is not a regular file \(a pipe or a device\)"):
        pretrain(pipe, tmp_path / "a")
    with pytest.raises(ValueError, match=r"--from .*tutorial\.txt is not a folder: give a checkpoint folder"):
        pretrain(english, tmp_path / "b", config=None, from_checkpoint=english)
    with pytest.raises(ValueError, match=r"--from .*nowhere does not exist: give a checkpoint folder"):
        pretrain(english, tmp_path / "c", config=None, from_checkpoint=tmp_path / "nowhere")


def test_temporaries_in_a_folder_kwiden_then_refuses_are_not_swept(english, tmp_path):
    folder = tmp_path / "run"
    (folder / "data.kwiden-tmp-old").mkdir(parents=True)
    (folder / "data.kwiden-tmp-old" / "precious.bin").write_text("p")
    with pytest.raises(ValueError, match=r"holds files kwiden did not write \(data\.kwiden-tmp-old\)"):
        pretrain(english, folder, budget=2, grow="none")
    assert (folder / "data.kwiden-tmp-old" / "precious.bin").read_text() == "p"


def test_a_backup_gone_or_edited_is_refused_not_trained_over(english, tmp_path):
    arguments = dict(budget=8, grow="none", save_every=4, eval_every=4)
    pretrain(english, tmp_path / "run", **arguments)
    for broken, change in [
        ("state.json gone", lambda b: (b / "state.json").unlink()),
        ("backup/ gone", lambda b: shutil.rmtree(b)),
    ]:
        shutil.copytree(tmp_path / "run", tmp_path / broken)
        change(tmp_path / broken / "backup")
        with pytest.raises(ValueError, match=r"state\.json is missing, though this run has backed up"):
            pretrain(english, tmp_path / broken, **arguments)  # a moved folder resumes: output_dir may differ
    state = json.loads((tmp_path / "run" / "backup" / "state.json").read_text())
    for edit in [dict(update=999), dict(update="8"), dict(update=-5), dict(growths_done=3), dict(train_losses="abc"),
                 dict(model=str(tmp_path / "run" / "backup" / state["model"])), dict(model="model-9-0.keras")]:  # fmt: skip
        (tmp_path / "run" / "backup" / "state.json").write_text(json.dumps({**state, **edit}))
        with pytest.raises(ValueError, match=r"state\.json(, the backup's position,)? is not (one this run wrote|a "
                           r"backup state kwiden wrote)"):  # fmt: skip
            pretrain(english, tmp_path / "run", **arguments)
    (tmp_path / "run" / "backup" / "state.json").write_text(json.dumps(state))
    model = tmp_path / "run" / "backup" / state["model"]
    whole = model.read_bytes()
    model.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"The backup .*model-8-0\.keras cannot be loaded"):
        pretrain(english, tmp_path / "run", **arguments)
    model.write_bytes(whole)
    assert pretrain(english, tmp_path / "run", **arguments).updates == 8


def test_a_backup_of_another_model_is_refused(english, tmp_path):
    pretrain(english, tmp_path / "small", budget=4, grow="none", save_every=4, config={**TINY_GPT, "hidden_size": 8})
    pretrain(english, tmp_path / "run", budget=4, grow="none", save_every=4)
    shutil.copy(tmp_path / "small" / "backup" / "model-4-0.keras", tmp_path / "run" / "backup" / "model-4-0.keras")
    with pytest.raises(ValueError, match=r"model-4-0\.keras is not this run's model after 0 growth\(s\)"):
        pretrain(english, tmp_path / "run", budget=4, grow="none", save_every=4)


def test_records_and_rows_of_the_wrong_shape_are_named_not_a_traceback(english, small):
    folder = small
    began = record(folder)
    for edit in [dict(written=[["x"]]), dict(tokens="abc"), dict(computed_on="jax"), dict(written=["../x"])]:
        (folder / "run.json").write_text(json.dumps({**began, **edit}))
        with pytest.raises(ValueError, match=r"run\.json is not a run record kwiden wrote"):
            pretrain(english, folder, budget=2, grow="none")
    (folder / "run.json").write_text(json.dumps(began))
    rows = (folder / "metrics.jsonl").read_text().splitlines()
    (folder / "metrics.jsonl").write_text(
        "\n".join([rows[0].replace('"update": 0', '"update": "0"'), *rows[1:]]) + "\n"
    )
    with pytest.raises(ValueError, match=r"metrics\.jsonl, line 1: not a metrics row kwiden wrote"):
        pretrain(english, folder, budget=2, grow="none")


def test_a_resume_may_name_the_precision_it_resolved_to_and_the_folder_may_move(english, tmp_path, small):
    assert record(small)["arguments"]["precision"] == "auto"  # float32 on a CPU
    os.rename(tmp_path / "run", tmp_path / "moved")
    assert pretrain(english, tmp_path / "moved", budget=2, grow="none", precision="float32").updates == 2


def test_a_hard_linked_log_grows_under_this_name_alone(english, tmp_path, small):
    folder = small
    os.link(folder / "log.txt", tmp_path / "snapshot.txt")  # as `cp -al` snapshots leave it
    before = (tmp_path / "snapshot.txt").read_text()
    pretrain(english, folder, budget=2, grow="none")
    assert (tmp_path / "snapshot.txt").read_text() == before
    assert (folder / "log.txt").read_text().startswith(before) and len((folder / "log.txt").read_text()) > len(before)
