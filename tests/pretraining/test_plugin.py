"""A user's own objective (its own option and loss step, a frozen reference model on the device) and family
reach `kwiden pretrain` without touching the package: `--plugin FILE` imports a module that registers them, and
the objective's own option becomes a flag, reaches the objective, and is recorded in run.json and held on a
resume; and a run.json an earlier kwiden wrote (every objective's options in every run) still resumes."""

import dataclasses
import hashlib
import json
import sys

import keras
import numpy as np
import pytest
from conftest import SMALL_RUN, TINY_GPT, copied

import kwiden
from kwiden.arguments import option
from kwiden.cli import main
from kwiden.models import family as families
from kwiden.models import get_family, register_family
from kwiden.pretraining import objectives

SEEN = {}


@dataclasses.dataclass(frozen=True)
class ReferenceOptions:
    reference_seed: int = option(0, "the seed of the frozen reference model's weights", "count", 0)


def reference_model(vocab_size, seed):
    """A tiny frozen model: each token's embedding, then logits over the vocabulary."""
    model = keras.Sequential([
        keras.Input((None,), dtype="int32"),
        keras.layers.Embedding(vocab_size, 8, embeddings_initializer=keras.initializers.RandomNormal(seed=seed)),
        keras.layers.Dense(vocab_size, kernel_initializer=keras.initializers.RandomNormal(seed=seed + 1)),
    ])  # fmt: skip
    model.trainable = False
    return model


class Imitate(objectives.CausalLM):
    """The frozen reference model's next-token distribution, as the target: a loss step of its own
    (`compute_loss`), the reference run on the device inside the compiled step."""

    name = "imitate"
    Options = ReferenceOptions

    @classmethod
    def made_for(cls, tokenizer, family, options):
        objective = super().made_for(tokenizer, family, options)
        objective.reference = reference_model(tokenizer.vocab_size, options.reference_seed)
        SEEN["reference_seed"], SEEN["vocab_size"] = options.reference_seed, tokenizer.vocab_size
        return objective

    @classmethod
    def fingerprint(cls, options):
        weights = reference_model(8, options.reference_seed).get_weights()  # its weights' seeds, drawn small
        return {"reference": hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest()}

    def compute_loss(self, model, x, y, y_pred, sample_weight=None, training=True):
        SEEN.setdefault("traced", set()).add(training)  # Python runs as the step is traced, in training or not
        return imitation_loss(self.reference(x, training=False), y_pred)

    def validation_batches(self, valid, batch_size, seed):
        SEEN["valid"] = super().validation_batches(valid, batch_size, seed)
        return SEEN["valid"]


def imitation_loss(reference_logits, logits):
    """The cross-entropy of the model's next token against the reference's distribution, averaged."""
    target = keras.ops.softmax(reference_logits)
    return keras.ops.mean(keras.losses.categorical_crossentropy(target, logits, from_logits=True))


def register():
    """What the plugin file does: the objective, and a family that pretrains with it."""
    objectives.register_objective(Imitate)
    register_family(dataclasses.replace(get_family("gpt"), name="imitating-gpt", pretrains_with="imitate"))


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A plugin file that registers this test's objective and family; the registries as they were afterwards."""
    monkeypatch.setattr(objectives, "OBJECTIVES", dict(objectives.OBJECTIVES))
    monkeypatch.setattr(families, "FAMILIES", families.FAMILIES.copy())
    path = tmp_path / "my_plugin.py"
    path.write_text(f"import {__name__}\n\n{__name__}.register()\n")
    yield path
    sys.modules.pop("my_plugin", None)


def command(english, folder, config, *flags, grow="none"):
    return ["pretrain", str(english), "--output-dir", str(folder), "--config", str(config), "--grow", grow,
            "--seq-len", "16", "--batch-size", "4", "--budget", "3", "--lr", "3e-3", "--quiet", *flags]  # fmt: skip


def test_an_objective_and_a_family_of_a_plugin_train_from_the_command_line(english, tmp_path, plugin, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_GPT))
    run = tmp_path / "run"
    flags = ("--plugin", str(plugin), "--model", "imitating-gpt", "--reference-seed", "7")
    assert main(command(english, run, config, *flags, grow="0.5:k=2")) == 0
    assert SEEN["reference_seed"] == 7  # the flag reached the objective
    record = json.loads((run / "run.json").read_text())
    assert record["arguments"]["reference_seed"] == 7 and record["arguments"]["model"] == "imitating-gpt"
    assert record["reference"] == Imitate.fingerprint(ReferenceOptions(7))["reference"]
    assert "objective: imitate" in (run / "log.txt").read_text()
    # its loss step trained and evaluated, grown or not: the last validation loss is its loss of final/ (the grown
    # model) on the held-out batches
    assert SEEN["traced"] == {True, False}
    final = kwiden.build_transformer_model(checkpoint_path=run / "final")
    reference = reference_model(SEEN["vocab_size"], 7)
    losses = [float(imitation_loss(reference(x), final(x))) for x, _ in SEEN["valid"]]
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["valid_loss"] == pytest.approx(np.mean(losses), rel=1e-5)
    # a resume holds the option: another value is another run
    assert main(command(english, run, config, *flags[:-1], "8", grow="0.5:k=2")) == 1
    assert "holds a run made with --reference-seed 7, not 8" in capsys.readouterr().err
    # another objective refuses it, naming whose it is
    assert main(command(english, tmp_path / "causal", config, "--plugin", str(plugin), "--objective", "causal_lm",
                        "--reference-seed", "3")) == 1  # fmt: skip
    assert ("--reference-seed is not an option of --objective causal_lm; it is for imitate: the seed of the frozen "
            "reference model's weights.") in capsys.readouterr().err  # fmt: skip


def test_the_help_lists_what_a_plugin_registers(plugin, capsys):
    with pytest.raises(SystemExit, match=r"^0$"):
        main(["pretrain", "--plugin", str(plugin), "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "causal_lm, imitate, masked_lm, seq2seq, simbert" in shown
    assert "bert, gpt, imitating-gpt, llama" in shown
    assert "--reference-seed REFERENCE_SEED imitate: the seed of the frozen reference model's weights" in shown


def test_a_plugin_that_is_not_there_is_named(capsys, tmp_path):
    assert main(["pretrain", "c.txt", "--output-dir", str(tmp_path), "--plugin", "no_such_plugin"]) == 1
    assert "kwiden: --plugin no_such_plugin: No module named 'no_such_plugin'" in capsys.readouterr().err
    assert main(["pretrain", "c.txt", "--output-dir", str(tmp_path), "--plugin", str(tmp_path / "gone.py")]) == 1
    assert f"--plugin {tmp_path / 'gone.py'} does not exist." in capsys.readouterr().err


# What run.json's arguments held in a run of kwiden before the objectives declared their own options: every
# objective's options, at their defaults where its objective did not take them.
EARLIER = dict(whole_word_mask=False, scale=30.0, corrupt=0.0, teacher=None, distill_weight=None)


def test_a_run_json_an_earlier_kwiden_wrote_resumes(english, tmp_path, finished):
    arguments = SMALL_RUN
    run = copied(finished(english, **arguments), tmp_path / "run")  # a finished run's folder (one a worker)
    record = json.loads((run / "run.json").read_text())
    assert not set(EARLIER) & set(record["arguments"])  # a causal LM's run records no other objective's options
    record["arguments"].update(EARLIER)
    (run / "run.json").write_text(json.dumps(record))
    assert kwiden.pretrain(english, run, **{**arguments, "budget": 2}).updates == 2  # resumed, nothing to train
    assert set(EARLIER).isdisjoint(json.loads((run / "run.json").read_text())["arguments"])
    record["arguments"]["scale"] = 20.0  # not what an earlier kwiden could write for a causal LM
    (run / "run.json").write_text(json.dumps(record))
    with pytest.raises(
        ValueError, match=r"holds a run made with --scale 20\.0, an option this run.s objective does not take"
    ):
        kwiden.pretrain(english, run, **arguments)
