"""`pretrain --from` a pretrained model: its own learning rate by default, advice that does not pretend its
pretraining is in the budget, and a seed that repeats the run though the objective's heads start fresh."""

import json

import numpy as np
import pytest
from conftest import TINY_BERT, TINY_RUN, after_update, kill

import kwiden
from kwiden.pretraining import trainer
from kwiden.pretraining.options import LR_PRETRAINED, LR_SCRATCH
from kwiden.testing import randomize_weights
from kwiden.training import recipe

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """A BERT without its MLM head (a `BertModel` folder): masked LM's head starts fresh. Built once: the runs
    only read it."""
    folder = tmp_path_factory.mktemp("start")
    bert = randomize_weights(kwiden.build_transformer_model({**TINY_BERT, "vocab_size": len(WORDS)}))
    kwiden.save_checkpoint(bert, folder)
    (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    return folder


def test_a_body_only_checkpoint_continued_twice_with_one_seed_ends_on_the_same_weights(english, tmp_path, start):
    run = {**TINY_RUN, "budget": 4, "grow": "none", "seed": 3}
    first = kwiden.pretrain(english, tmp_path / "one", from_checkpoint=str(start), **run)
    assert first.model.get_layer("MLM-Dense").kernel.path in {w.path for w in first.model.weights}
    second = kwiden.pretrain(english, tmp_path / "two", from_checkpoint=str(start), **run)
    for a, b in zip(first.model.weights, second.model.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)
    other = kwiden.pretrain(english, tmp_path / "three", from_checkpoint=str(start), **{**run, "seed": 4})
    assert not np.array_equal(np.asarray(first.model.get_layer("MLM-Dense").kernel),
                              np.asarray(other.model.get_layer("MLM-Dense").kernel))  # fmt: skip


def test_a_continued_run_trains_at_a_pretrained_models_rate_unless_told_and_says_its_advice_does_not_apply(
    english, tmp_path, start
):
    run = {key: value for key, value in TINY_RUN.items() if key != "lr"}
    continued = kwiden.pretrain(english, tmp_path / "on", from_checkpoint=str(start), grow="none", **run)
    assert json.loads((tmp_path / "on" / "run.json").read_text())["arguments"]["lr"] == LR_PRETRAINED == 5e-5
    log = (tmp_path / "on" / "log.txt").read_text()
    assert "on top of the pretraining of the --from model, which it does not count" in log
    assert recipe.measured_reuse() in log  # what growing a trained model first measured
    assert "train a smaller target" not in log and "compute-optimal ratio is about" not in log
    assert continued.metrics[1]["lr"] > 0
    scratch = kwiden.pretrain(english, tmp_path / "new", model="bert", config=TINY_BERT, tokenizer=str(start / "vocab.txt"),
                              grow="none", **run)  # fmt: skip
    assert json.loads((tmp_path / "new" / "run.json").read_text())["arguments"]["lr"] == LR_SCRATCH == 1e-3
    # A WordPiece vocabulary: the ratio measured for byte-level models does not apply, Chinchilla's does.
    assert "compute-optimal ratio is about 20 tokens per parameter" in (tmp_path / "new" / "log.txt").read_text()
    assert scratch.updates > 0


def test_a_backup_of_another_model_is_refused_naming_the_weights_that_differ():
    saved = (("Pooler-Dense/kernel", (4, 4)), ("a/kernel", (4, 4)))
    wanted = (("a/kernel", (4, 8)), ("b/bias", (4,)))
    assert trainer._difference(saved, wanted) == (
        "it lacks b/bias; it has, beyond the run's model, Pooler-Dense/kernel; other shapes at a/kernel"
    )


def test_a_run_begun_at_another_default_rate_resumes_with_it(english, tmp_path, monkeypatch, start):
    """A --from run begun before the default rate changed recorded 1e-3; the same command (no --lr) resumes it at
    1e-3 rather than being refused as another run. A rate given is still compared."""
    run = {key: value for key, value in TINY_RUN.items() if key != "lr"}
    arguments = dict(from_checkpoint=str(start), grow="none", save_every=4, warmup=0, **{**run, "budget": 8})
    with pytest.raises(SystemExit, match="^killed$"):
        after_update(monkeypatch, 5, kill)  # after the backup at update 4
        kwiden.pretrain(english, tmp_path / "run", lr=1e-3, **arguments)  # as the default was then
    monkeypatch.undo()
    resumed = kwiden.pretrain(english, tmp_path / "run", **arguments)
    assert resumed.updates == 8 and json.loads((tmp_path / "run" / "run.json").read_text())["arguments"]["lr"] == 1e-3
    assert "resuming from the backup at update 4" in (tmp_path / "run" / "log.txt").read_text()
    with pytest.raises(ValueError, match=r"holds a run made with --lr 0.001, not 0.0002: run the same command"):
        kwiden.pretrain(english, tmp_path / "run", lr=2e-4, **arguments)


def test_a_checkpoint_is_read_once_and_a_schedule_planned_on_shapes(english, tmp_path, monkeypatch, start):
    """Before training, memory holds about one model: `--from` is read once (with the objective's heads), and
    the growths are planned on skeletons, their weights filled only when the run grows."""
    from kwiden.growth import pipeline
    from kwiden.pretraining import run as run_module

    reads, fills = [], []
    read, transfer = run_module.build_transformer_model, pipeline.transfer
    monkeypatch.setattr(run_module, "build_transformer_model", lambda *a, **k: reads.append(k) or read(*a, **k))
    monkeypatch.setattr(pipeline, "transfer", lambda *a, **k: fills.append(1) or transfer(*a, **k))
    kwiden.pretrain(
        english, tmp_path / "on", from_checkpoint=str(start), **{**TINY_RUN, "budget": 6, "grow": "0.5:k=2"}
    )
    assert [k.get("checkpoint_path") for k in reads] == [str(start)]
    assert len(fills) == 1  # the growth at update 3, and no other
