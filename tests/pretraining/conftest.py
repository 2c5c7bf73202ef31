import json
import pathlib
import shutil

import numpy as np
import pytest

from kwiden.text import corpus

FIXTURES = pathlib.Path(__file__).parents[1] / "examples" / "fixtures" / "clue"
# A tiny target: every weight trained, LayerNorm ε large enough that a wrong one shows.
TINY_GPT = dict(
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=32,
    layer_norm_eps=1e-3,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
TINY_BERT = {**TINY_GPT, "hidden_dropout_prob": 0.1}
# What every tiny run shares.
TINY_RUN = dict(seq_len=16, batch_size=4, budget=12, lr=3e-3, verbose=0)
# The smallest finished run: a folder for the tests of what a later call does there.
SMALL_RUN = dict(model="gpt", config=TINY_GPT, grow="none", **{**TINY_RUN, "budget": 2})


@pytest.fixture(scope="session")
def english(tmp_path_factory):
    """40 kB of the shipped English text."""
    path = tmp_path_factory.mktemp("english") / "tutorial.txt"
    path.write_text(corpus.load_text()[:40_000], encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """`finished(corpus, **arguments)`: the result of `kwiden.pretrain(corpus, folder, **arguments)`, run once a
    worker for every test that asks for the same arguments (building and tracing a model is most of a test's time).
    Its folder is `result.final.parent`. Tests only read a shared run, its model and its folder: one that writes
    into a run folder works on `copied(result, folder)`. Call it before patching anything the run would go through."""
    import kwiden

    made = {}

    def run(corpus, **arguments):
        key = json.dumps([str(corpus), arguments], sort_keys=True, default=str)
        if key not in made:
            made[key] = kwiden.pretrain(corpus, tmp_path_factory.mktemp("finished"), **arguments)
        return made[key]

    return run


def copied(result, folder):
    """A copy of a shared run's folder at `folder`, for a test to go on in (a run folder may move: it resumes)."""
    shutil.copytree(result.final.parent, folder, symlinks=True)
    return folder


def chinese_lines():
    """The Chinese sentences of the CLUE fixtures, a document a line."""
    lines = []
    for path in sorted(FIXTURES.rglob("*.json")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if isinstance(record, dict):
                lines += [v for v in record.values() if isinstance(v, str) and len(v) > 4]
    assert lines, f"no fixture text under {FIXTURES}"
    return lines


@pytest.fixture(scope="session")
def chinese(tmp_path_factory):
    path = tmp_path_factory.mktemp("chinese") / "zh.txt"
    path.write_text("\n".join(chinese_lines() * 3) + "\n", encoding="utf-8")
    return path


def after_update(monkeypatch, n, action):
    """Call `action(logs)` once, when the trainer has trained update `n` or later (after the compiled call that
    trains it), before its own look at the loss: to kill, interrupt or poison a run at a known place."""
    from kwiden.pretraining import trainer

    real, done = trainer.Trainer._after_call, []

    def watched(self, first, trained, logs, *args):
        if trained >= n and not done:
            done.append(trained)
            action(logs)
        return real(self, first, trained, logs, *args)

    monkeypatch.setattr(trainer.Trainer, "_after_call", watched)
    return done


def kill(logs):
    raise SystemExit("killed")


def assert_resumes_bit_for_bit(corpus, run, result, folder, monkeypatch):
    """`run` killed at update 9 and resumed from its backup at 6 (the optimizer's state, the data's position, the
    objective's masks and Dropout's generators), through its growth, ends on `result`'s final/ bit for bit; on
    the vocabulary `result`'s run built (two builds of --build-vocab on one corpus may order tied tokens
    differently). Returns the resumed run."""
    import kwiden

    killed = {
        **{k: v for k, v in run.items() if k != "build_vocab"},
        "tokenizer": str(result.final.parent / "vocab.txt"),
    }
    after_update(monkeypatch, 9, kill)
    with pytest.raises(SystemExit, match="^killed$"):
        kwiden.pretrain(corpus, folder, **killed)
    assert not (folder / "final").exists()
    monkeypatch.undo()
    resumed = kwiden.pretrain(corpus, folder, **killed)
    assert "resuming from the backup at update 6" in (folder / "log.txt").read_text()
    assert resumed.updates == result.updates
    assert_same_final(result.final, resumed.final)
    return resumed


def assert_same_final(a, b):
    """Every tensor of two runs' final/model.safetensors, the same names and bit for bit the same values."""
    from kwiden.checkpoints.safetensors import SafetensorsTensors

    first, second = SafetensorsTensors(a / "model.safetensors"), SafetensorsTensors(b / "model.safetensors")
    assert sorted(first) == sorted(second)
    for name in first:
        np.testing.assert_array_equal(np.asarray(first[name]), np.asarray(second[name]), err_msg=name)


def assert_same_weights(a, b):
    """Two models' weights: the same paths, equal to the bit."""
    assert [w.path for w in a.weights] == [w.path for w in b.weights]
    for x, y in zip(a.weights, b.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=x.path)
