"""CLUE flags, paths and ids that would fail, or quietly do something else,
only once training starts or ends: refused before any training, naming the
flag, or the file and line."""

import json
import runpy
import shutil

import keras
import pytest
from test_clue import CLUE, FIXTURES, model_files, run, snippets_importable  # noqa: F401 (fixtures)

SPAN_TASKS = ["cmrc2018", "chid", "c3"]


@pytest.fixture(autouse=True)
def no_training(monkeypatch):
    """Every case here must be refused before `fit`."""

    def fit(*args, **kwargs):
        raise AssertionError("the model was trained before the bad input was refused")

    monkeypatch.setattr(keras.Model, "fit", fit)


def refused_flag(task, model_files, tmp_path, capsys, *flags):  # noqa: F811
    """The usage error's message, the output folder checked unmade."""
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error: exit status 2, its message on stderr
        run(task, model_files, tmp_path / "out", None, *flags)
    assert not (tmp_path / "out").exists()
    return capsys.readouterr().err


BAD_NUMBERS = {
    "batch-size 0": (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    "batch-size -1": (["--batch-size", "-1"], "--batch-size must be at least 1, got -1"),
    "epochs 0": (["--epochs", "0"], "--epochs must be at least 1, got 0"),
    "epochs -1": (["--epochs", "-1"], "--epochs must be at least 1, got -1"),
    "grow 0": (["--grow", "0"], "--grow must be at least 1, got 0; leave --grow out"),
    "accum-steps 0": (["--accum-steps", "0"], "--accum-steps must be at least 1, got 0"),
    "lr 0": (["--lr", "0"], "--lr must be a positive number, got 0.0"),
    "lr negative": (["--lr", "-0.001"], "--lr must be a positive number, got -0.001"),
    "lr nan": (["--lr", "nan"], "--lr must be a positive number, got nan"),
    "maxlen 0": (["--maxlen", "0"], "--maxlen must be at least 5, got 0"),
    "maxlen 4": (["--maxlen", "4"], "--maxlen must be at least 5, got 4 ([CLS], two [SEP] and a token of each text)"),
    "seed -1": (["--seed", "-1"], "--seed must be between 0 and 4294967295, got -1"),
    "seed 2**32": (["--seed", "4294967296"], "--seed must be between 0 and 4294967295, got 4294967296"),
    "warmup negative": (["--warmup", "-1"], "--warmup must be a number at least 0, got -1"),
    "warmup nan": (["--warmup", "nan"], "--warmup must be a number at least 0, got nan"),
    "warmup 1.5": (
        ["--warmup", "1.5"],
        "--warmup must be a fraction below 1 (0.1: 10% of the updates) or a whole number of updates, got 1.5",
    ),  # fmt: skip
    "warmup with constant": (
        ["--schedule", "constant", "--warmup", "0.1"],
        "--warmup is for --schedule linear; leave it out with --schedule constant",
    ),
    # afqmc's fixture: 2 batches of 4, 2 updates an epoch.
    "warmup as long as the run": (
        ["--warmup", "2"],
        "--warmup 2 is not fewer than the run's 2 updates (1 epoch of 2 batches); give fewer updates, or a fraction",
    ),
    "warmup longer than the run": (
        ["--warmup", "7", "--epochs", "3", "--accum-steps", "2"],
        "--warmup 7 is not fewer than the run's 3 updates (3 epochs of 2 batches, 2 per update)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_NUMBERS))
def test_a_bad_number_is_refused_naming_its_flag(case, model_files, tmp_path, capsys):  # noqa: F811
    flags, message = BAD_NUMBERS[case]
    assert message in refused_flag("afqmc", model_files, tmp_path, capsys, *flags)


@pytest.mark.parametrize("task", SPAN_TASKS)
def test_the_span_tasks_refuse_bad_numbers_too(task, model_files, tmp_path, capsys):  # noqa: F811
    assert "--batch-size must be at least 1, got 0" in refused_flag(task, model_files, tmp_path, capsys, "--batch-size", "0")  # fmt: skip
    assert "--maxlen must be at least 5, got 3" in refused_flag(task, model_files, tmp_path, capsys, "--maxlen", "3")
    assert "--warmup 100 is not fewer than the run's" in refused_flag(task, model_files, tmp_path, capsys, "--warmup", "100")  # fmt: skip


@pytest.mark.parametrize("flag", ["--stride", "--max-question", "--max-answer"])
def test_cmrc2018_refuses_its_own_flags_below_1(flag, model_files, tmp_path, capsys):  # noqa: F811
    """Below 1, --stride and --max-question were taken as 1, and --max-answer found no answer."""
    error = refused_flag("cmrc2018", model_files, tmp_path, capsys, flag, "0")
    assert f"{flag} must be at least 1, got 0" in error


@pytest.mark.parametrize("task", ["afqmc", *SPAN_TASKS])
def test_maxlen_past_the_position_table_is_refused_before_training(task, model_files, tmp_path):  # noqa: F811
    """The tiny BERT has 64 positions: 128 (the default) used to train, then fail in `predict` on a long text."""
    with pytest.raises(
        ValueError, match=r"--maxlen 128 is more than the model's 64 positions.*give --maxlen 64 or less"
    ):
        run(task, model_files, tmp_path / "out", None, "--maxlen", "128")
    assert not (tmp_path / "out").exists()


def test_a_rotary_model_has_no_position_limit(model_files):  # noqa: F811
    """RoFormer encodes positions in attention: no table, any --maxlen."""
    snippets = runpy.run_path(str(CLUE / "snippets.py"))
    argv = ["--data-dir", "x", "--config", str(model_files / "config.json"), "--vocab", "v", "--maxlen", "128"]
    for model, refused in (("roformer", False), ("bert", True)):
        args = snippets["parse_args"](snippets["Task"]("afqmc", "afqmc_predict.json", None), [*argv, "--model", model])
        classifier = snippets["build_classifier"](args, 2)
        if refused:
            with pytest.raises(ValueError, match="--maxlen 128 is more than the model's 64 positions"):
                snippets["check_positions"](classifier, 128)
        else:
            snippets["check_positions"](classifier, 128)


@pytest.mark.parametrize("task", ["afqmc", "cmrc2018"])
def test_an_output_dir_that_is_a_file_is_refused_and_left_as_it_was(task, model_files, tmp_path, capsys):  # noqa: F811
    output = tmp_path / "out"
    output.write_text("keep me")
    with pytest.raises(SystemExit, match="^2$"):  # a usage error, its message on stderr
        run(task, model_files, output)
    assert f"--output-dir {output} is a file; give a folder" in capsys.readouterr().err
    assert output.read_text() == "keep me"


def test_an_output_dir_that_cannot_be_made_is_refused(model_files, tmp_path, capsys):  # noqa: F811
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit, match="^2$"):  # a usage error, its message on stderr
        run("c3", model_files, blocker / "out")
    assert f"--output-dir {blocker / 'out'} cannot be made: {blocker} is a file" in capsys.readouterr().err


@pytest.mark.parametrize("task, predictions", [("afqmc", "afqmc_predict.json"), ("chid", "chid11_predict.json")])
def test_a_folder_where_the_predictions_go_is_refused(task, predictions, model_files, tmp_path, capsys):  # noqa: F811
    (tmp_path / "out" / predictions).mkdir(parents=True)
    with pytest.raises(SystemExit, match="^2$"):  # a usage error, its message on stderr
        run(task, model_files, tmp_path / "out")
    assert f"holds a folder {predictions}, where the predictions go" in capsys.readouterr().err


# Ids read from a user's file: the submission answers by id, so each is refused at read time.


def copy_with_lines(task, name, tmp_path, edit):
    """The task's fixtures, `name`'s JSON lines passed through `edit(records)`."""
    data = tmp_path / "data"
    shutil.copytree(FIXTURES / task, data)
    records = [json.loads(line) for line in (data / name).read_text("utf-8").splitlines() if line.strip()]
    edit(records)
    (data / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
    return data


def set_id(line, value):
    def edit(records):
        records[line - 1]["id"] = value

    return edit


def drop_id(line):
    return lambda records: records[line - 1].pop("id")


BAD_IDS = {
    "missing": (drop_id(2), r"test\.json, line 2: no field 'id'"),
    "a list": (set_id(2, [1]), r"test\.json, line 2: the 'id' is list \[1\], not a whole number or a string"),
    "a dict": (set_id(2, {"a": 1}), r"test\.json, line 2: the 'id' is dict \{'a': 1\}, not a whole number"),
    "a float": (set_id(2, 1.5), r"test\.json, line 2: the 'id' is float 1\.5, not a whole number"),
    "a bool": (set_id(1, True), r"test\.json, line 1: the 'id' is bool True, not a whole number"),
    "null": (set_id(2, None), r"test\.json, line 2: the 'id' is NoneType None, not a whole number"),
    "repeated": (set_id(3, 0), r"test\.json, line 3: id 0 was already used on line 1\."),
    "repeated as text": (set_id(3, "1"), r"test\.json, line 3: id '1' was already used on line 2 \(as 1\)"),
}


@pytest.mark.parametrize("task", ["cluener", "afqmc"])
@pytest.mark.parametrize("case", sorted(BAD_IDS))
def test_a_bad_test_id_is_refused_naming_the_file_and_line(task, case, model_files, tmp_path):  # noqa: F811
    """cluener merged two lines of one id into one prediction, took a line without one, and crashed on a
    list id after training; the classification tasks (`snippets.line_id`) crashed on a list at read time
    and took a bool or a float."""
    edit, message = BAD_IDS[case]
    data = copy_with_lines(task, "test.json", tmp_path, edit)
    with pytest.raises(ValueError, match=message):
        run(task, model_files, tmp_path / "out", data)
    assert not (tmp_path / "out").exists()


def test_dev_lines_with_one_id_are_scored_apart(model_files):  # noqa: F811
    """dev.json's ids are not CLUENER's (its dev lines have none): two lines with one id were merged, one
    line's predicted spans counted against the other's gold."""
    cluener = runpy.run_path(str(CLUE / "cluener.py"))
    texts = [cluener["Text"](7, "张三去了北京。", {("name", 0, 1)}, 1), cluener["Text"](7, "北京", set(), 2)]
    predicted = [{("name", 0, 1)}, set()]
    assert cluener["entity_scores"](predicted, texts) == (1.0, 1.0, 1.0)
    predicted = [set(), {("name", 0, 1)}]  # the second text's prediction is not the first's gold
    assert cluener["entity_scores"](predicted, texts) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("task", ["c3", "cmrc2018"])
def test_a_question_id_that_is_not_a_number_or_text_is_refused(task, model_files, tmp_path):  # noqa: F811
    """A list id crashed (unhashable) with a traceback, a null one was written as null."""
    data = tmp_path / "data"
    shutil.copytree(FIXTURES / task, data)
    text = (data / "test.json").read_text("utf-8")
    first = '"id": 0' if task == "c3" else '"id": "E1_Q1"'
    (data / "test.json").write_text(text.replace(first, '"id": [0]', 1), "utf-8")
    with pytest.raises(ValueError, match=r"test\.json, .*: the 'id' is list \[0\], not a whole number or a string"):
        run(task, model_files, tmp_path / "out", data)


def test_cluener_refuses_a_stride_longer_than_a_window(model_files, tmp_path, capsys):  # noqa: F811
    """It was capped to the window without a word; a larger one would skip characters."""
    error = refused_flag("cluener", model_files, tmp_path, capsys, "--maxlen", "16", "--stride", "15")
    assert (
        "--stride 15 is more than a window's 14 characters (--maxlen 16 less [CLS] and [SEP]): the characters "
        "between two windows would lie in none; give --stride 14 or less, or a larger --maxlen"
    ) in error
    assert "--stride must be at least 1, got 0" in refused_flag(
        "cluener", model_files, tmp_path, capsys, "--stride", "0"
    )


def with_a_lone_surrogate(value):
    """`value` (parsed JSON) with its first text of several characters begun by a lone surrogate."""
    if isinstance(value, str) and len(value) > 3:
        return chr(0xDC80) + value, True
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        changed, done = with_a_lone_surrogate(item)
        if done:
            value[key] = changed
            return value, True
    return value, False


@pytest.mark.parametrize("task, name, where", [("afqmc", "train.json", "train.json, line 2"),
                                               ("cluener", "dev.json", "dev.json, line 2"),
                                               ("c3", "test.json", "test.json")])  # fmt: skip
def test_text_that_is_not_valid_unicode_is_refused_naming_the_file_and_line(task, name, where, model_files, tmp_path):  # noqa: F811
    """JSON's "\\udc80" escape reads as a lone surrogate, which the WordPiece tokenizer failed on with a
    TypeError naming nothing (or, read one character at a time, took as [UNK])."""
    data = tmp_path / "data"
    shutil.copytree(FIXTURES / task, data)
    text = (data / name).read_text("utf-8")
    if task == "c3":  # one JSON value, not lines
        (data / name).write_text(json.dumps(with_a_lone_surrogate(json.loads(text))[0]), "utf-8")
    else:
        lines = text.splitlines()
        lines[1] = json.dumps(with_a_lone_surrogate(json.loads(lines[1]))[0])  # ensure_ascii: written as \udc80
        (data / name).write_text("\n".join(lines) + "\n", "utf-8")
    with pytest.raises(ValueError, match=rf"{where}: .* is not valid Unicode: it holds a lone surrogate \(U\+DC80\)"):
        run(task, model_files, tmp_path / "out", data)
    assert not (tmp_path / "out").exists()
