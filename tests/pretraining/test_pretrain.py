"""`kwiden.pretrain` end to end on tiny models: both objectives, grown and
from scratch, what it writes, equal compute, resuming."""

import json
import os
import shutil
import signal

import numpy as np
import pytest
from conftest import SMALL_RUN, TINY_BERT, TINY_GPT, TINY_RUN, after_update, assert_same_weights, copied, kill

import kwiden
from kwiden.pretraining import outputs, trainer
from kwiden.training import loop, recipe

# A grown run's scratch twin, a run interrupted to resume and a checkpoint to go on from: one finished run for all.
SCRATCH = dict(model="gpt", config=TINY_GPT, grow="none", **TINY_RUN)


def read_metrics(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_a_grown_causal_run_writes_everything_and_spends_the_scratch_budget(english, tmp_path, finished, monkeypatch):
    asked = []
    advice = recipe.advice
    monkeypatch.setattr(recipe, "advice", lambda *args, **kwargs: asked.append(kwargs) or advice(*args, **kwargs))
    grown = kwiden.pretrain(english, tmp_path / "grown", model="gpt", config=TINY_GPT, **TINY_RUN)
    # the advice is asked with the run's tokenizer and tokens an update
    assert [(a["tokenizer"], a["tokens_per_update"]) for a in asked] == [
        ("bytes", TINY_RUN["batch_size"] * TINY_RUN["seq_len"])]  # fmt: skip
    scratch = finished(english, **SCRATCH)
    rows = read_metrics(tmp_path / "grown")
    assert rows == grown.metrics
    assert all(set(outputs.METRICS) <= set(row) for row in rows)
    assert [r["update"] for r in rows] == sorted(r["update"] for r in rows)
    assert rows[0]["update"] == 0 and rows[-1]["update"] == grown.updates
    # auto (a Pre-LN target of 2 blocks): its depth halved, grown ×2 at 80% of the run's own updates
    assert (rows[0]["hidden_size"], rows[0]["num_layers"]) == (16, 1) and rows[-1]["num_layers"] == 2
    grew = [r for r in rows if r.get("grew")]
    assert len(grew) == 1 and grew[0]["num_layers"] == 2 and abs(grew[0]["update"] - 0.8 * grown.updates) <= 2
    # exact growth: the loss right after growth is the loss right before
    before = [r for r in rows if r["update"] == grew[0]["update"] and not r.get("grew")]
    assert not before or abs(before[0]["valid_loss"] - grew[0]["valid_loss"]) < 1e-4
    # equal compute: the grown run makes more, cheaper updates, and spends what scratch spends, to one update
    assert scratch.updates == TINY_RUN["budget"] and grown.updates > scratch.updates
    one_update = scratch.flops / scratch.updates
    assert scratch.flops - one_update < grown.flops <= scratch.flops
    for name in ("run.json", "log.txt", "loss.png", "metrics.jsonl", "tokens/ids.bin"):
        assert (tmp_path / "grown" / name).is_file(), name
    log = (tmp_path / "grown" / "log.txt").read_text()
    assert "growth: depth ×2 at 80%" in log
    # bytes and a tiny budget: inside the IsoFLOP sweep, so the advice uses the ratio measured at the batch nearest
    # its 64 tokens an update, not Chinchilla's
    nearest = min(recipe._measured()["compute_optimal"]["measured"], key=lambda sweep: sweep["tokens_per_update"])
    assert grown.advice in log and nearest["says"] in grown.advice
    assert f"compute-optimal ratio is about {nearest['tokens_per_parameter']} tokens per parameter" in grown.advice
    # final/ loads and computes what the trained model computed
    assert sorted(p.name for p in grown.final.iterdir()) == [
        "config.json", "generation_config.json", "kwiden-manifest.json", "model.safetensors", "tokenizer.json"]  # fmt: skip
    loaded = kwiden.build_transformer_model(checkpoint_path=grown.final)
    ids = np.random.default_rng(0).integers(1, 257, (2, 16))
    np.testing.assert_allclose(
        loaded.predict(ids, verbose=0), grown.model.predict(ids, verbose=0), rtol=1e-5, atol=1e-5
    )


def test_tokens_are_cached_and_reused(english, tmp_path, finished):
    folder = copied(finished(english, **SMALL_RUN), tmp_path / "run")  # a first run's folder, as it left it
    index = json.loads((folder / "tokens" / "index.json").read_text())
    assert index["dtype"] == "uint16" and index["count"] == len(english.read_bytes()) + 1  # the newline ending it
    ids = np.memmap(folder / "tokens" / "ids.bin", "uint16", "r")
    np.testing.assert_array_equal(ids[:100], np.frombuffer(english.read_bytes()[:100], np.uint8) + 1)
    stamp = (folder / "tokens" / "ids.bin").stat().st_mtime_ns
    kwiden.pretrain(english, folder, **SMALL_RUN)
    assert (folder / "tokens" / "ids.bin").stat().st_mtime_ns == stamp


def test_a_masked_run_with_its_own_vocabulary_fine_tunes_on_clue(chinese, tmp_path, monkeypatch):
    result = kwiden.pretrain(
        chinese, tmp_path / "run", model="bert", config=TINY_BERT, build_vocab=300, whole_word_mask=True,
        **TINY_RUN,
    )  # fmt: skip
    rows = result.metrics
    assert rows[-1]["hidden_size"] == 16 and np.isfinite(rows[-1]["valid_loss"])
    vocab = (result.final / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and "花" in vocab
    config = json.loads((result.final / "config.json").read_text())
    assert config["vocab_size"] == len(vocab) and config["hidden_size"] == 16
    # the encoder's output (the MLM head aside) is what the trained model computed
    loaded = kwiden.build_transformer_model(checkpoint_path=result.final, with_mlm=True)
    x = np.random.default_rng(0).integers(5, len(vocab), (2, 16))
    inputs = [x, np.zeros_like(x)]
    np.testing.assert_allclose(loaded(inputs)[0], result.model(inputs)[0], rtol=1e-5, atol=1e-5)
    # a CLUE script fine-tunes it
    import pathlib
    import runpy

    clue = pathlib.Path(__file__).parents[2] / "examples" / "clue"
    monkeypatch.syspath_prepend(str(clue))
    tnews = runpy.run_path(str(clue / "tnews.py"))["main"]
    fixtures = pathlib.Path(__file__).parents[1] / "examples" / "fixtures" / "clue" / "tnews"
    done = tnews(["--data-dir", str(fixtures), "--checkpoint", str(result.final), "--vocab",
                  str(result.final / "vocab.txt"), "--output-dir", str(tmp_path / "tnews"), "--epochs", "1",
                  "--batch-size", "4", "--maxlen", "32"])  # fmt: skip
    # every test id once, in order, each with a label of labels.json; the dev accuracy, of dev.json's 2 lines
    lines = {name: [json.loads(line) for line in (fixtures / f"{name}.json").read_text("utf-8").splitlines()]
             for name in ("test", "labels", "dev")}  # fmt: skip
    predictions = [json.loads(line) for line in done["predictions"].read_text("utf-8").splitlines()]
    assert [p["id"] for p in predictions] == [t["id"] for t in lines["test"]]
    assert {p["label"] for p in predictions} <= {label["label"] for label in lines["labels"]}
    assert len(lines["dev"]) == 2 and done["dev_accuracy"] in (0.0, 0.5, 1.0)


# Dropout on, backups every 4 updates: a run killed and resumed.
KILLED_RUN = dict(model="gpt", config={**TINY_GPT, "hidden_dropout_prob": 0.1}, save_every=4, **TINY_RUN)


@pytest.fixture(scope="module")
def killed(english, finished, tmp_path_factory):
    """The whole run of KILLED_RUN, and the folder of the same run killed on the first update after its growth
    (whose backup is the last), which each resume copies."""
    whole = finished(english, **KILLED_RUN)
    folder = tmp_path_factory.mktemp("killed")
    with pytest.MonkeyPatch.context() as monkeypatch:
        after_update(monkeypatch, whole.growths[0].update + 1, kill)
        with pytest.raises(SystemExit, match="^killed$"):
            kwiden.pretrain(english, folder, **KILLED_RUN)
    assert not (folder / "final").exists()
    return whole, folder


# A resume may evaluate and back up at other intervals: neither changes an update.
@pytest.mark.parametrize("resumed_with", [{}, {"eval_every": 1, "save_every": 3}])
def test_a_killed_run_resumes_to_identical_weights(english, tmp_path, killed, resumed_with):
    whole, stopped = killed
    grew = whole.growths[0].update
    folder = shutil.copytree(stopped, tmp_path / "killed")
    resumed = kwiden.pretrain(english, folder, **{**KILLED_RUN, **resumed_with})
    assert f"resuming from the backup at update {grew}" in (folder / "log.txt").read_text()
    for a, b in zip(whole.model.weights, resumed.model.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)
    updates = [r["update"] for r in resumed.metrics]
    if resumed_with:  # the rows before the backup as made, every update after it
        assert updates == [r["update"] for r in whole.metrics if r["update"] <= grew] + list(
            range(grew + 1, whole.updates + 1)
        )
    else:
        assert updates == [r["update"] for r in whole.metrics]


def stopped_log(tmp_path):
    return (tmp_path / "stopped" / "log.txt").read_text()


def test_ctrl_c_saves_a_backup_first(english, tmp_path, monkeypatch, finished):
    whole = finished(english, **SCRATCH)
    after_update(monkeypatch, 5, lambda logs: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(
        KeyboardInterrupt, match=r"^stopped at update \d+: backup saved; run the same command to resume$"
    ):
        kwiden.pretrain(english, tmp_path / "stopped", **SCRATCH)
    state = json.loads((tmp_path / "stopped" / "backup" / "state.json").read_text())
    assert state["update"] == 5
    assert "stopped at update 5: backup saved; run the same command to resume" in stopped_log(tmp_path)
    monkeypatch.undo()
    resumed = kwiden.pretrain(english, tmp_path / "stopped", **SCRATCH)
    for a, b in zip(whole.model.weights, resumed.model.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)


# Evaluating every update runs one update a compiled call; evaluating at the end alone runs each phase's updates in
# calls of UPDATES_PER_CALL (3 here), the last call of a phase short.
# On JAX too, with accumulation (one backend's run of each is enough: both go through the same stretches).
@pytest.mark.parametrize("accum_steps", [1, pytest.param(2, marks=pytest.mark.backends)])
def test_one_or_several_updates_a_call_train_the_same_weights(english, tmp_path, monkeypatch, accum_steps):
    run = dict(model="gpt", config={**TINY_GPT, "hidden_dropout_prob": 0.1}, accum_steps=accum_steps, **TINY_RUN)
    one = kwiden.pretrain(english, tmp_path / "one", eval_every=1, **run)
    monkeypatch.setattr(trainer, "UPDATES_PER_CALL", 3)
    calls = []
    real = loop.run_stretch
    monkeypatch.setattr(loop, "run_stretch", lambda model, batches, steps, *args: calls.append(steps) or
                        real(model, batches, steps, *args))  # fmt: skip
    several = kwiden.pretrain(english, tmp_path / "several", eval_every=1000, **run)
    grew = one.growths[0].update
    assert calls == [grew * accum_steps, (several.updates - grew) * accum_steps]  # one stretch a phase
    assert_same_weights(one.model, several.model)
    every_update = [r["train_loss"] for r in one.metrics if r["train_loss"] is not None]
    assert len(every_update) == several.updates  # a growth's row has no training loss: the next row averages on
    assert several.metrics[-1]["train_loss"] == pytest.approx(np.mean(every_update), rel=1e-5)


def test_ctrl_c_stops_at_the_end_of_the_compiled_call_under_way(english, tmp_path, monkeypatch):
    run = dict(model="gpt", config=TINY_GPT, grow="none", eval_every=1000, **TINY_RUN)
    whole = kwiden.pretrain(english, tmp_path / "whole", **run)
    monkeypatch.setattr(trainer, "UPDATES_PER_CALL", 4)
    after_update(monkeypatch, 5, lambda logs: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(
        KeyboardInterrupt, match=r"^stopped at update \d+: backup saved; run the same command to resume$"
    ):
        kwiden.pretrain(english, tmp_path / "stopped", **run)
    assert json.loads((tmp_path / "stopped" / "backup" / "state.json").read_text())["update"] == 8
    assert "stopped at update 8: backup saved; run the same command to resume" in stopped_log(tmp_path)
    monkeypatch.undo()
    assert_same_weights(whole.model, kwiden.pretrain(english, tmp_path / "stopped", **run).model)


def test_ctrl_c_during_a_growth_stops_before_another_call(english, tmp_path, monkeypatch):
    run = dict(model="gpt", config=TINY_GPT, eval_every=1000, **TINY_RUN)
    whole = kwiden.pretrain(english, tmp_path / "whole", **run)
    real = loop.grow_and_compile

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "grow_and_compile", interrupted)
    with pytest.raises(
        KeyboardInterrupt, match=r"^stopped at update \d+: backup saved; run the same command to resume$"
    ):
        kwiden.pretrain(english, tmp_path / "stopped", **run)
    state = json.loads((tmp_path / "stopped" / "backup" / "state.json").read_text())
    assert (state["update"], state["growths_done"]) == (whole.growths[0].update, 1)  # just after the growth
    assert f"stopped at update {whole.growths[0].update}: backup saved; run the same command" in stopped_log(tmp_path)
    monkeypatch.undo()
    assert_same_weights(whole.model, kwiden.pretrain(english, tmp_path / "stopped", **run).model)


def test_the_row_at_a_growths_update_describes_the_model_before_it(english, tmp_path):
    result = kwiden.pretrain(english, tmp_path, model="gpt", config=TINY_GPT, grow="0.5:depth=2", eval_every=1,
                             **TINY_RUN)  # fmt: skip
    before, after = [row for row in result.metrics if row["update"] == result.growths[0].update]
    assert (before["num_layers"], after["num_layers"]) == (1, 2)
    assert after["grew"] and "grew" not in before and before["train_loss"] is not None


def test_an_explicit_schedule_grows_width_then_depth(english, tmp_path):
    result = kwiden.pretrain(
        english, tmp_path, model="gpt", config=TINY_GPT, grow="0.3:k=2 0.6:depth=2,optimizer_state=grown",
        **{**TINY_RUN, "budget": 20},
    )  # fmt: skip
    sizes = [(r["hidden_size"], r["num_layers"]) for r in result.metrics]
    assert sizes[0] == (8, 1) and sizes[-1] == (16, 2) and (16, 1) in sizes
    assert [r["update"] for r in result.metrics if r.get("grew")] == [g.update for g in result.growths]


def test_the_schedule_is_counted_across_growths(english, tmp_path):
    result = kwiden.pretrain(english, tmp_path, model="gpt", config=TINY_GPT, warmup=2, eval_every=1,
                             **{**TINY_RUN, "budget": 20})  # fmt: skip
    rates = {r["update"]: r["lr"] for r in result.metrics}
    total = result.updates
    decay = round(0.2 * total)
    assert rates[1] == pytest.approx(TINY_RUN["lr"] / 2)
    assert rates[total - decay] == pytest.approx(TINY_RUN["lr"])  # held until the last fifth
    assert rates[total] == 0.0


def test_from_a_checkpoint_goes_on_and_grows(english, tmp_path, finished):
    first = finished(english, **SCRATCH)
    more = kwiden.pretrain(english, tmp_path / "more", from_checkpoint=str(first.final), grow="0.5:k=2", **TINY_RUN)
    # the same tokens (its tokenizer.json read as bytes), and the loss it ended with
    assert more.metrics[0]["valid_loss"] == pytest.approx(first.metrics[-1]["valid_loss"], rel=1e-5)
    assert (more.metrics[0]["hidden_size"], more.metrics[-1]["hidden_size"]) == (16, 32)
    with pytest.raises(ValueError, match=r"grows .*final to width 32 × 2 blocks .*, not the --config target width 64"):
        kwiden.pretrain(english, tmp_path / "wrong", from_checkpoint=str(first.final), grow="0.5:k=2",
                        config={**TINY_GPT, "hidden_size": 64, "intermediate_size": 256}, **TINY_RUN)  # fmt: skip


@pytest.mark.backends
def test_a_tiny_run_on_this_backend(english, tmp_path):
    result = kwiden.pretrain(english, tmp_path, model="gpt", config=TINY_GPT, **{**TINY_RUN, "budget": 6})
    assert result.metrics[-1]["hidden_size"] == 16 and np.isfinite(result.metrics[-1]["valid_loss"])
    assert result.metrics[-1]["valid_loss"] < result.metrics[0]["valid_loss"]


# On JAX with 2 virtual CPU devices, asked for before JAX is imported: hence a fresh interpreter.
TWO_DEVICES = """
import os, sys
os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import kwiden
from kwiden.text import corpus
config = corpus.gpt_config(8, 1, 16)
config.pop("vocab_size")
result = kwiden.pretrain(sys.argv[1], sys.argv[2], model="gpt", config=config, budget=4, seq_len=16,
                         batch_size=4, grow="none", verbose=0)
print(result.model.weights[0].value.sharding)
"""


@pytest.mark.slow
def test_several_devices_split_each_batch(english, tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", TWO_DEVICES, str(english), str(tmp_path)], capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "devices: 2, each batch split over them" in (tmp_path / "log.txt").read_text()
    assert "NamedSharding" in done.stdout and (tmp_path / "final" / "model.safetensors").is_file()


def test_final_records_the_length_its_positions_were_trained_on(english, tmp_path):
    short = {**TINY_RUN, "budget": 4}
    first = kwiden.pretrain(english, tmp_path / "first", model="gpt", config=TINY_GPT, grow="none", **short)
    # transformers reads a generation_config.json alone: config.json's token ids go in beside max_length
    assert json.loads((first.final / "generation_config.json").read_text()) == {"pad_token_id": 0, "max_length": 16}
    assert (
        "the model holds 32 positions and --seq-len 16 trains positions 0 to 15 only: 16 to 31 stay untrained. "
        "final/generation_config.json records max_length 16"
    ) in (tmp_path / "first" / "log.txt").read_text()
    with pytest.raises(ValueError, match=r"Prompt 0 has 2 tokens: with max_new_tokens=15 that makes 17, past the 16 "
                       r"the model was trained on \(.*generation_config.json's max_length\): give max_new_tokens=14"):  # fmt: skip
        kwiden.generate(first.final, None, "ab", 15)
    assert len(kwiden.generate(first.final, None, "ab", 14, greedy=True)) == 1
    # --from a folder with the record: the longer of the two lengths
    longer = kwiden.pretrain(english, tmp_path / "longer", from_checkpoint=str(first.final), grow="none",
                             **{**short, "seq_len": 24})  # fmt: skip
    assert json.loads((longer.final / "generation_config.json").read_text())["max_length"] == 24
    shorter = kwiden.pretrain(english, tmp_path / "shorter", from_checkpoint=str(longer.final), grow="none",
                              **{**short, "seq_len": 8})  # fmt: skip
    assert json.loads((shorter.final / "generation_config.json").read_text())["max_length"] == 24
    # --from a folder without the record (a Hugging Face model, trained elsewhere): none is made up
    (shorter.final / "generation_config.json").unlink()
    unknown = kwiden.pretrain(english, tmp_path / "unknown", from_checkpoint=str(shorter.final), grow="none", **short)
    assert not (unknown.final / "generation_config.json").exists()
    assert "stay untrained" not in (tmp_path / "unknown" / "log.txt").read_text()
    (shorter.final / "generation_config.json").write_text(json.dumps({"max_length": 24}))
    # a folder grown wider keeps the record: its positions are the ones trained
    kwiden.grow_checkpoint(shorter.final, tmp_path / "grown", k=2)
    with pytest.raises(ValueError, match=r"past the 24 the model was trained on"):
        kwiden.generate(tmp_path / "grown", None, "ab", 23)
