import contextlib
import dataclasses
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

import kwiden
from kwiden import cli
from kwiden.cli import main
from kwiden.growth.verify import sample_inputs
from kwiden.testing import padded_batch, randomize_weights
from kwiden.text import corpus


def test_grow_command_writes_an_exact_model(bert, tmp_path, capsys):
    small = bert(with_mlm=True)
    src, dst = tmp_path / "small.keras", tmp_path / "big.keras"
    small.save(src)
    assert main(["grow", str(src), str(dst), "--factor", "2", "--check"]) == 0
    printed = capsys.readouterr().out
    assert f"parameters: {small.count_params():,} -> " in printed
    assert "kwiden.verify (×2, rtol=1e-05): OK" in printed and f"saved {dst}" in printed
    big = keras.saving.load_model(dst)
    assert big.get_layer("Embedding-Token").output_dim == 32
    assert kwiden.verify(small, big, padded_batch()).ok


def test_grow_command_reports_what_it_cannot_grow(bert, tmp_path, capsys):
    small = bert()
    head = keras.layers.LayerNormalization(name="keras-norm")(small.output)
    src = tmp_path / "small.keras"
    keras.Model(small.inputs, head).save(src)
    assert main(["grow", str(src), str(tmp_path / "big.keras"), "--factor", "2"]) == 1
    assert "cannot grow layer 'keras-norm'" in capsys.readouterr().err
    assert not (tmp_path / "big.keras").exists()


def test_grow_command_rejects_a_bad_factor(bert, tmp_path, capsys):
    src = tmp_path / "small.keras"
    bert().save(src)
    assert main(["grow", str(src), str(tmp_path / "big.keras"), "--factor", "0"]) == 1
    assert (
        "kwiden grow: --factor must be a number of at least 1 such as 2, 1.5 or 4/3, got 0." in capsys.readouterr().err
    )
    assert main(["grow", str(src), str(tmp_path / "big.keras"), "--factor", "2", "--spread", "200"]) == 1
    assert "kwiden grow: --spread must be a number from 0 to 100, got 200.0." in capsys.readouterr().err


def grow_help():
    """What `kwiden grow --help` says of each flag, `{flag: its help on one line}`."""
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit, match="^0$"):  # --help exits 0
        cli.parser().parse_args(["grow", "--help"])
    options = help_text.getvalue().split("\noptions:\n")[1]
    entries = re.split(r"\n  (?=--)", "\n" + options)[1:]  # each flag's lines, from its line on
    return {entry.split()[0]: " ".join(entry.split()[1:]) for entry in entries}


def test_grow_help_shows_each_default_as_the_functions():
    """`kwiden grow --help` says each flag's default as the function it calls takes it: the one default where
    `kwiden.grow` and `kwiden.grow_checkpoint` share it, each one's where they differ, and the command's own, with
    why, where it has one; a switch and an option without a default say none."""
    from kwiden import arguments
    from kwiden.growth import arguments as options

    signatures = {
        options.GROW: inspect.signature(kwiden.grow).parameters,
        options.CHECKPOINT: inspect.signature(kwiden.grow_checkpoint).parameters,
    }
    said_of = grow_help()
    for field in dataclasses.fields(options.GrowthArguments):
        flag = arguments.flag_of(field)
        if flag is None:
            continue
        said = said_of.pop(flag)
        taking = {
            entry: signatures[entry][field.name].default for entry in signatures if field.name in signatures[entry]
        }
        command = arguments.command_default(field)
        if command is not field.default and command is not None:  # the command's own, and why
            expected = None if command is False else f"(default: {command}: {field.metadata['why']})"
        elif len(set(map(repr, taking.values()))) > 1:  # each path its function's
            each = ", ".join(f"{taking[entry]} for {options.WHERE[entry]}" for entry in taking)
            expected = f"(default: {each}: {field.metadata['why']})"
        else:
            (default,) = set(taking.values())
            expected = None if default is None or default is False else f"(default: {default})"
        if expected is None:
            assert "(default: " not in said or "(default: " in field.metadata["help"], (flag, said)
        else:
            assert said.endswith(expected), (flag, said, expected)
    assert not said_of, f"--help shows flags that are no option's: {sorted(said_of)}"


def test_demo_command_pretrains_grown_and_from_scratch_at_equal_compute(capsys):
    assert main(["demo", "--budget", "12"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("kwiden: Keras ") and "tensorflow backend, devices: " in printed.splitlines()[0]
    rows = {
        line.split()[0]: line.split() for line in printed.splitlines() if line.split()[:1] in (["grown"], ["scratch"])
    }
    grown, scratch = rows["grown"], rows["scratch"]
    assert grown[1] == scratch[1] == "64×2"  # both end as the target
    assert int(scratch[2]) == 12 and int(grown[2]) > 12  # the grown run's early updates are cheaper
    assert abs(float(grown[3]) - float(scratch[3])) <= float(scratch[3]) / 12  # equal FLOPs, to one update
    assert "reaches the scratch run's final loss" in printed or "does not reach the scratch run's final loss" in printed
    # The logs named the runs' final/ folders: the user is told they were temporary, and that --output-dir keeps them.
    gone = printed.split("The two runs were in ")[1].split(", a temporary folder, deleted now")[0]
    assert "give --output-dir DIR to keep them" in printed and not Path(gone).exists()


def test_pretrain_command_trains_and_refuses_in_one_line(tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text(corpus.load_text()[:20_000], encoding="utf-8")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(corpus.gpt_config(16, 1, 16, vocab_size=258)))
    flags = ["--config", str(config), "--output-dir", str(tmp_path / "run"), "--seq-len", "16", "--batch-size", "2"]
    assert main(["pretrain", str(text), *flags, "--budget", "4", "--quiet"]) == 0
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()
    assert main(["pretrain", str(text), *flags, "--budget", "5", "--quiet"]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("kwiden pretrain: --output-dir ") and "--budget 4" in error and len(error.splitlines()) == 1


# Each command line answered before a backend is imported: its help, and refusals that need no model.
ANSWERED_WITHOUT_KERAS = {
    "--help": 0,
    "pretrain --help": 0,
    "grow --help": 0,
    "generate --help": 0,
    "similar --help": 0,
    "eval-sts --help": 0,
    "demo --help": 0,
    "pretrain CORPUS --output-dir RUN --config gpt-demo --budget 0": 1,
    "pretrain CORPUS --output-dir RUN --config gpt-demo --objective nonesuch": 1,
    "pretrain CORPUS --output-dir RUN --config gpt-demo --grow 0.5:k=0": 1,
    "pretrain CORPUS --output-dir RUN --config gpt-demo --objective simbert --batch-size 2": 1,
    "pretrain missing.txt --output-dir RUN --config gpt-demo": 1,
    "pretrain CORPUS --output-dir RUN": 1,
    "grow missing.keras out.keras": 1,
    "grow CORPUS out.keras": 1,
    "grow SOURCE out.txt": 1,
    "grow SOURCE out.keras --factor 0": 1,
    "generate missing-folder hello": 1,
    "similar missing-folder hello": 1,
    "eval-sts missing-folder missing.tsv": 1,
    "pretrain CORPUS --output-dir RUN --mistyped-flag": 2,
}
BACKENDS = ("keras", "tensorflow", "jax", "torch")


def kwiden_script():
    beside_python = Path(sys.executable).with_name("kwiden")
    script = str(beside_python) if beside_python.exists() else shutil.which("kwiden")
    if script is None:
        pytest.fail("the `kwiden` console script is not installed: `pip install -e .[test]`")
    return script


# Runs the `kwiden` console script once for each command line (argv's, as JSON) in turn in one Python process,
# as a process of its own would run it (its own sys.argv, environment and warning filters), and after each writes
# a line to standard error with its status and the backends in sys.modules by then. A backend one command line
# imports stays imported, so a later line is checked as strictly: it shows from the line that imported it on.
DONE = "kwiden-test: done"
RUN_IN_TURN = f"""
import json, os, runpy, sys, traceback, warnings
script, lines, backends = sys.argv[1], json.loads(sys.argv[2]), set(json.loads(sys.argv[3]))
environment = dict(os.environ)
for argv in lines:
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = [script, *argv]
    with warnings.catch_warnings():
        try:
            runpy.run_path(script, run_name="__main__")
            status = 0
        except SystemExit as done:  # as Python ends a process: None is 0, other than a number is said, and 1
            if done.code is not None and not isinstance(done.code, int):
                print(done.code, file=sys.stderr)
            status = 0 if done.code is None else done.code if isinstance(done.code, int) else 1
        except BaseException:
            traceback.print_exc()
            status = 1
    sys.stdout.flush()
    print({DONE!r}, json.dumps([status, sorted(backends & set(sys.modules))]), file=sys.stderr, flush=True)
"""


def test_help_and_refusals_answer_before_a_backend_is_imported(tmp_path):
    """`kwiden --help`, each command's, and a refused flag, file or folder import no backend: the user who
    mistyped waits for none (docs/architecture.md#what-imports-keras). Python lists what each run imported
    (PYTHONPROFILEIMPORTTIME), and sys.modules what it holds after each."""
    corpus_file, source = tmp_path / "corpus.txt", tmp_path / "small.keras"
    corpus_file.write_text("床前明月光\n")
    with zipfile.ZipFile(source, "w") as archive:
        archive.writestr("config.json", "{}")
    paths = {"CORPUS": corpus_file, "RUN": tmp_path / "run", "SOURCE": source}

    def run(lines):
        """`[(status, lines printed to stderr, the backends imported, those in sys.modules)]` of the command
        `lines`, run in turn in one process (starting Python for each took most of the test's time)."""
        argvs = [[str(paths.get(word, word)) for word in line.split()] for line in lines]
        # A log level of the user's own: the quiet start, which hides standard error while TensorFlow starts,
        # would hide the import lines too.
        env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "TF_CPP_MIN_LOG_LEVEL": "1"}
        script = [sys.executable, "-c", RUN_IN_TURN, kwiden_script()]
        argv = [*script, json.dumps(argvs), json.dumps(BACKENDS)]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        # Each line's standard error ends at its DONE line: what Python imported before the first, the first's.
        sections = done.stderr.split(f"{DONE} ")
        assert len(sections) == len(lines) + 1, done.stderr[-3000:]
        answered = []
        for rows, (status, held) in zip(sections, (json.loads(s.split("\n", 1)[0]) for s in sections[1:])):
            rows = rows.split("\n", 1)[1].splitlines() if answered else rows.splitlines()
            imported = {row.rsplit("|", 1)[-1].strip() for row in rows if row.startswith("import time:")}
            said = [row for row in rows if not row.startswith("import time:")]
            answered.append((status, said, sorted(imported & set(BACKENDS)), held))
        return answered

    # The control last: a command that reads a model imports Keras, and the lines before it would say so.
    lines = [*ANSWERED_WITHOUT_KERAS, "grow SOURCE out.keras --factor 2"]
    *answered, control = run(lines)
    for (line, expected), (status, said, backends, held) in zip(ANSWERED_WITHOUT_KERAS.items(), answered, strict=True):
        assert status == expected, (line, said)
        assert expected == 0 or said[-1].startswith(("kwiden", "usage: kwiden")), (line, said)
        assert backends == [] and held == [], (line, backends, held)
    assert not (tmp_path / "run").exists()
    status, said, backends, held = control
    assert status == 1 and "keras" in backends and "keras" in held, (said, backends, held)


def test_console_script_is_installed():
    result = subprocess.run([kwiden_script(), "--help"], capture_output=True, text=True, check=True)
    assert "grow" in result.stdout and "demo" in result.stdout


def test_corpus_round_trips_bytes():
    text = corpus.load_text()
    assert len(text) > 200_000 and "Python" in text
    ids = corpus.encode(text[:1000])
    assert ids.min() >= 1 and ids.max() < corpus.VOCAB_SIZE
    assert corpus.decode(ids) == text[:1000]
    x, y = corpus.windows(ids, 16, 4, np.random.default_rng(0))
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])


def test_grow_command_checks_models_with_one_segment_type(bert, tmp_path, capsys):
    small = bert(type_vocab_size=1)
    src, dst = tmp_path / "roberta.keras", tmp_path / "big.keras"
    small.save(src)
    assert main(["grow", str(src), str(dst), "--factor", "2", "--heads", "count", "--spread", "1", "--check"]) == 0
    assert "OK" in capsys.readouterr().out
    assert keras.saving.load_model(dst).get_layer("Transformer-0-MultiHeadSelfAttention").heads == 4


def test_grow_command_does_not_save_a_model_that_fails_its_check(bert, tmp_path, capsys, monkeypatch):
    from kwiden.layers import ExpandableLayerNormalization

    original = ExpandableLayerNormalization.get_expanded_config
    monkeypatch.setattr(
        ExpandableLayerNormalization,
        "get_expanded_config",
        lambda self, k, input_space=None: {**original(self, k, input_space), "epsilon": self.epsilon},
    )
    src, dst = tmp_path / "small.keras", tmp_path / "big.keras"
    bert().save(src)
    assert main(["grow", str(src), str(dst), "--factor", "2", "--check"]) == 1
    assert "not saved" in capsys.readouterr().err and not dst.exists()


def test_sample_inputs_cover_every_segment_and_avoid_padding_tokens(bert):
    ids, segments = sample_inputs(bert(), batch_size=8, length=16)
    assert ids.min() >= 1 and ids.max() < 97
    assert set(np.unique(segments)) == {0, 1}


def test_grow_command_deepens_and_reports_approximate_growth(bert, tmp_path, capsys):
    src, dst = tmp_path / "bert.keras", tmp_path / "deep.keras"
    bert().save(src)
    assert main(["grow", str(src), str(dst), "--factor", "2", "--depth", "2"]) == 1
    assert "not Pre-LN" in capsys.readouterr().err
    assert main(["grow", str(src), str(dst), "--factor", "2", "--depth", "2", "--allow-approximate", "--check"]) == 0
    printed = capsys.readouterr()
    assert "NOT EXACT" in printed.out and "saved anyway" in printed.err  # reported, and accepted
    assert keras.saving.load_model(dst).get_layer("Transformer-3-FeedForward") is not None


def test_grow_command_takes_target_sizes(tmp_path, capsys):
    config = dict(
        vocab_size=97,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=24,
        rms_norm_eps=1e-3,
    )
    small = kwiden.build_transformer_model(config, model="llama")
    src, dst = tmp_path / "llama.keras", tmp_path / "big.keras"
    small.save(src)
    args = [
        "grow",
        str(src),
        str(dst),
        "--hidden-size",
        "24",
        "--intermediate-size",
        "40",
        "--heads",
        "count",
        "--check",
    ]
    assert main(args) == 0
    assert "kwiden.verify (×3/2, rtol=1e-05): OK" in capsys.readouterr().out
    big = keras.saving.load_model(dst)
    assert big.get_layer("Transformer-0-FeedForward").intermediate_size == 40
    assert main(["grow", str(src), str(dst), "--factor", "4/3", "--heads", "count"]) == 1
    assert "'Embedding-Token' output_dim is 16, and 16 × 4/3 = 21.33 is not a whole number" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["BertBackbone", "GPT2Backbone", "GPT2CausalLM"])
def test_grow_command_checks_keras_hub_models(tmp_path, capsys, name):
    keras_hub = pytest.importorskip("keras_hub")
    sizes = dict(
        vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=12
    )
    if name == "GPT2CausalLM":
        backbone = keras_hub.models.GPT2Backbone(**sizes, dropout=0.0)
        small = randomize_weights(keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None))
    else:
        small = randomize_weights(getattr(keras_hub.models, name)(**sizes, dropout=0.0))
    small.save(tmp_path / "small.keras")
    assert main(["grow", str(tmp_path / "small.keras"), str(tmp_path / "big.keras"), "--factor", "2", "--check"]) == 0
    printed = capsys.readouterr().out
    assert "kwiden.verify (×2, rtol=1e-05): OK" in printed and "outputs only" in printed
    big = keras.saving.load_model(tmp_path / "big.keras")
    assert type(big).__name__ == name and getattr(big, "backbone", big).get_config()["hidden_dim"] == 16
    inputs = sample_inputs(small)
    assert set(inputs) >= {"token_ids", "padding_mask"} and inputs["token_ids"].shape == (2, 12)


@pytest.mark.parametrize("command", ["grow", "demo", "eval-sts"])
def test_ctrl_c_stops_every_command_in_one_line(command, capsys, monkeypatch):
    from kwiden import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, {"grow": "_grow", "demo": "_demo", "eval-sts": "_eval_sts"}[command], interrupted)
    monkeypatch.setattr(cli, "_announce", lambda: None)
    argv = {"grow": ["a.keras", "b.keras"], "demo": [], "eval-sts": ["folder", "pairs.tsv"]}[command]
    assert main([command, *argv]) == 130
    assert capsys.readouterr().err == f"kwiden {command}: interrupted\n"


def test_ctrl_c_stops_pretrain_with_how_to_resume(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(kwiden, "pretrain", interrupted)
    monkeypatch.setattr("kwiden.cli._announce", lambda: None)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("床前明月光\n")
    assert main(["pretrain", str(corpus), "--config", "gpt-demo", "--output-dir", str(tmp_path / "run")]) == 130
    assert capsys.readouterr().err == (
        "kwiden pretrain: stopped; run the same command to resume from the last backup\n"
    )


def commands_reference():
    """docs/commands.md: every command's arguments and flags with their help (defaults said in it), read from the
    parser the command line uses, which the options' declarations make (`kwiden.arguments`)."""
    import argparse

    lines = [
        "# The commands",
        "",
        "Every argument and flag of each `kwiden` command, with its help and default, as `kwiden COMMAND --help`",
        "says them: made from the options' declarations (`kwiden.arguments`). Generated by",
        "`python tests/test_cli.py`; `test_the_commands_reference_is_current` fails when it is stale.",
    ]
    root = cli.parser()
    (commands,) = [a for a in root._actions if isinstance(a, argparse._SubParsersAction)]
    described = {choice.dest: choice.help for choice in commands._choices_actions}
    for name, command in commands.choices.items():
        lines += ["", f"## kwiden {name}", "", described[name][0].upper() + described[name][1:] + ".", ""]
        lines += ["| argument | |", "|---|---|"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            shown = action.option_strings[-1] if action.option_strings else action.dest
            if action.option_strings and action.nargs != 0:
                choices = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else None
                shown += " " + (action.metavar or choices or action.dest.upper())
            said = (action.help or "").replace("%%", "%").replace("|", "\\|")
            if action.default not in (None, False) and "(default:" not in said and action.option_strings:
                said += f" (default: {action.default})"
            lines.append(f"| `{shown}` | {said} |")
    return "\n".join(lines) + "\n"


def test_the_flags_the_pretraining_guide_names_are_the_commands():
    """docs/pretraining.md's table names flags in its own words; each is one `kwiden pretrain` takes."""
    guide = (Path(__file__).parent.parent / "docs" / "pretraining.md").read_text(encoding="utf-8")
    table = [line.split("|")[1] for line in guide.splitlines() if line.startswith("| `--")]
    named = set(re.findall(r"--[a-z][a-z-]*", " ".join(table)))
    taken = {flag for line in commands_reference().split("## kwiden pretrain")[1].split("## kwiden")[0].splitlines()
             for flag in re.findall(r"^\| `(--[a-z-]+)", line)}  # fmt: skip
    assert len(named) > 20 and sorted(named - taken) == []


def test_the_commands_reference_is_current():
    written = (Path(__file__).parent.parent / "docs" / "commands.md").read_text(encoding="utf-8")
    assert written == commands_reference(), "docs/commands.md is stale: run `python tests/test_cli.py`."


if __name__ == "__main__":
    (Path(__file__).parent.parent / "docs" / "commands.md").write_text(commands_reference(), encoding="utf-8")
