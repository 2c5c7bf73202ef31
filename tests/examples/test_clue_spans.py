"""The CLUE multiple-choice and span baselines (examples/clue: chid, c3,
cmrc2018) end to end on tiny hand-written fixtures in CLUE 1.1's formats,
with the tiny BERT of test_clue.py."""

import json
import re
import runpy
import shutil

import numpy as np
import pytest
from test_clue import (  # noqa: F401 (fixtures)
    CLUE,
    FIXTURES,
    GROWN,
    Run,
    assert_best_dev_epoch,
    assert_constant_rate,
    model_files,
    recorded_run,
    run,
    snippets_importable,
)

PREDICTIONS = {"chid": "chid11_predict.json", "c3": "c311_predict.json", "cmrc2018": "cmrc2018_predict.json"}


def json_lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def chid_blanks(path):
    return [blank for record in json_lines(path) for p in record["content"] for blank in re.findall(r"#idiom\d+#", p)]


def c3_questions(path):
    return [question["id"] for item in json.loads(path.read_text(encoding="utf-8")) for question in item[1]]


def cmrc_questions(path):
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    return [qa["id"] for article in data for paragraph in article["paragraphs"] for qa in paragraph["qas"]]


def check_chid(path):
    predictions = json.loads(path.read_text(encoding="utf-8"))
    assert sorted(predictions) == sorted(chid_blanks(FIXTURES / "chid" / "test.json"))
    candidates = {
        blank: len(record["candidates"])
        for record in json_lines(FIXTURES / "chid" / "test.json")
        for p in record["content"]
        for blank in re.findall(r"#idiom\d+#", p)
    }
    assert all(isinstance(i, int) and 0 <= i < candidates[blank] for blank, i in predictions.items())


def check_c3(path):
    predictions = json_lines(path)
    assert [p["id"] for p in predictions] == c3_questions(FIXTURES / "c3" / "test.json")
    choices = {
        q["id"]: len(q["choice"]) for item in json.loads((FIXTURES / "c3" / "test.json").read_text()) for q in item[1]
    }
    assert all(set(p) == {"id", "label"} and 0 <= p["label"] < choices[p["id"]] for p in predictions)


def check_cmrc2018(path):
    predictions = json.loads(path.read_text(encoding="utf-8"))
    assert sorted(predictions) == sorted(cmrc_questions(FIXTURES / "cmrc2018" / "test.json"))
    contexts = "".join(
        p["context"]
        for a in json.loads((FIXTURES / "cmrc2018" / "test.json").read_text())["data"]
        for p in a["paragraphs"]
    )
    assert all(isinstance(text, str) and text in contexts for text in predictions.values())


CHECKS = {"chid": check_chid, "c3": check_c3, "cmrc2018": check_cmrc2018}


@pytest.fixture(scope="module")
def cmrc2018_run(model_files, tmp_path_factory):  # noqa: F811
    """cmrc2018 neither grown nor accumulating, in small windows every 5 characters, 2 epochs at the default
    rate under --schedule constant: the run three tests read."""
    flags = ["--stride", "5", "--maxlen", "32", "--epochs", "2", "--schedule", "constant"]
    with pytest.MonkeyPatch.context() as monkeypatch:
        return recorded_run(monkeypatch, "cmrc2018", model_files, tmp_path_factory.mktemp("cmrc2018"), None, *flags,
                            lr=None)  # fmt: skip


# cmrc2018 (its own span head) plain and grown with accumulation; chid and c3 share `snippets.run_multiple_choice`
# and `build_scorer`, and differ in how they read their files, which growth and accumulation never see: one each.
SPAN_RUNS = [("c3", "plain"), ("chid", "grow2-accum2"), ("cmrc2018", "plain"), ("cmrc2018", "grow2-accum2")]


@pytest.mark.parametrize("task, variant", SPAN_RUNS, ids=[f"{task}-{variant}" for task, variant in SPAN_RUNS])
def test_script_predicts_every_test_question_once(task, variant, model_files, tmp_path, capsys, request):  # noqa: F811
    if (task, variant) == ("cmrc2018", "plain"):
        done = request.getfixturevalue("cmrc2018_run")
    else:
        flags = GROWN if variant == "grow2-accum2" else []
        result = run(task, model_files, tmp_path, None, *flags)
        done = Run(result, capsys.readouterr().out, [], tuple(flags), tmp_path)
    path = done.output_dir / PREDICTIONS[task]
    assert done.result["predictions"] == path
    CHECKS[task](path)
    dev = (FIXTURES / task / "dev.json").read_text("utf-8")
    questions = len(re.findall(r"#idiom\d+#", dev)) if task == "chid" else dev.count('"question"')
    assert_best_dev_epoch(done.result, done.out, done.epochs, questions)


def test_cmrc2018_windows_overlap_and_labels_point_at_the_answer(model_files, cmrc2018_run):  # noqa: F811
    """Small windows every few characters: each window holding the answer labels its first and last character."""
    cmrc2018 = runpy.run_path(str(CLUE / "cmrc2018.py"))
    args = cmrc2018["parse_args"](
        ["--data-dir", "x", "--config", "c", "--vocab", "v", "--maxlen", "32", "--stride", "5"]
    )
    tokens = cmrc2018["snippets"].CharacterTokens(model_files / "vocab.txt")
    windows, contexts, answers = cmrc2018["read_file"](FIXTURES / "cmrc2018" / "train.json", True, tokens, args)
    assert len(windows) > len(contexts)  # long contexts are cut into several windows
    for window in windows:
        assert len(window.token_ids) <= 32
        start, end = window.label
        if (start, end) != (0, 0):
            first = window.characters[start - window.offset]
            last = window.characters[end - window.offset]
            assert contexts[window.id][first : last + 1] == answers[window.id][0]
    labelled = {window.id for window in windows if window.label != (0, 0)}
    assert labelled == set(contexts)
    assert cmrc2018_run.flags[:4] == ("--stride", "5", "--maxlen", "32")  # the run on these windows
    check_cmrc2018(cmrc2018_run.result["predictions"])


def test_schedule_constant_keeps_the_rate_of_cmrc2018(cmrc2018_run):
    """A span task's, as test_clue.test_schedule_constant_keeps_the_rate checks afqmc's."""
    assert_constant_rate(cmrc2018_run)


def broken_copy(task, tmp_path, file, edit):
    """A copy of a task's fixtures with `edit` applied to one file's text."""
    data_dir = tmp_path / "data"
    shutil.copytree(FIXTURES / task, data_dir)
    (data_dir / file).write_text(edit((data_dir / file).read_text(encoding="utf-8")), encoding="utf-8")
    return data_dir


def drop_first_line_field(name):
    def edit(text):
        lines = text.splitlines()
        record = json.loads(lines[0])
        del record[name]
        return "\n".join([json.dumps(record, ensure_ascii=False)] + lines[1:]) + "\n"

    return edit


BAD_INPUTS = {
    "chid malformed line": ("chid", "dev.json", lambda text: text + '{"candidates": [\n', "line 2:"),
    "chid missing field": ("chid", "train.json", drop_first_line_field("content"), "line 1: no field 'content'"),
    "chid missing answer": ("chid", "dev_answer.json", lambda text: "{}\n", "has no answer in"),
    "c3 malformed": ("c3", "train.json", lambda text: text.rstrip()[:-1] + "\n", "line 2: not valid JSON"),
    "c3 missing answer": ("c3", "dev.json", lambda text: text.replace('"answer": "下雨", ', ""), "field 'answer'"),
    "c3 answer not a choice": (
        "c3",
        "train.json",
        lambda text: text.replace('"answer": "三年"', '"answer": "五年"'),
        "not among",
    ),
    "cmrc2018 malformed": ("cmrc2018", "test.json", lambda text: text[:-3], "line 1"),
    "cmrc2018 missing question": (
        "cmrc2018",
        "dev.json",
        lambda text: text.replace('"question"', '"q"', 1),
        "no field 'question'",
    ),
    "cmrc2018 missing data": (
        "cmrc2018",
        "train.json",
        lambda text: text.replace('"data"', '"dat"', 1),
        "no field 'data'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_names_the_file_and_writes_nothing(case, model_files, tmp_path):  # noqa: F811
    task, file, edit, message = BAD_INPUTS[case]
    data_dir = broken_copy(task, tmp_path, file, edit)
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        run(task, model_files, tmp_path / "out", data_dir)
    assert str(data_dir / file) in str(error.value)
    assert not (tmp_path / "out").exists()


MISSING = {
    "chid": ["train.json", "test.json", "train_answer.json", "dev_answer.json"],
    "c3": ["dev.json"],
    "cmrc2018": ["test.json"],
}


@pytest.mark.parametrize("task, missing", [(task, file) for task, files in MISSING.items() for file in files])
def test_missing_file_is_named(task, missing, model_files, tmp_path):  # noqa: F811
    data_dir = tmp_path / "data"
    shutil.copytree(FIXTURES / task, data_dir)
    (data_dir / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing):
        run(task, model_files, tmp_path / "out", data_dir)
    assert not (tmp_path / "out").exists()


def test_choice_loss_leaves_padding_rows_out():
    snippets = runpy.run_path(str(CLUE / "snippets.py"))
    loss = snippets["choice_loss"](3)
    targets = np.array([0, 1, -1, 1, 0, 0], "float32")  # question 1: two choices and a padding row
    scores = np.array([[0.0], [2.0], [0.0], [1.0], [1.0], [1.0]], "float32")
    padded_high = scores.copy()
    padded_high[2] = 50.0
    values = np.asarray(loss(targets, scores))
    assert np.allclose(values, np.asarray(loss(targets, padded_high)))
    assert np.allclose(values, [np.log1p(np.exp(-2.0)), np.log(3.0)], atol=1e-5)


def test_cmrc2018_questions_are_cut_to_fit_maxlen_and_misses_count(model_files):  # noqa: F811
    cmrc2018 = runpy.run_path(str(CLUE / "cmrc2018.py"))
    args = cmrc2018["parse_args"](["--data-dir", "x", "--config", "c", "--vocab", "v", "--maxlen", "6"])
    tokens = cmrc2018["snippets"].CharacterTokens(model_files / "vocab.txt")
    windows, _, _ = cmrc2018["read_file"](FIXTURES / "cmrc2018" / "train.json", True, tokens, args)
    assert max(len(window.token_ids) for window in windows) <= 6  # questions longer than 6 − 4 are cut
    # A dev question whose answer was not found in its context is a miss, not left out of the mean.
    assert cmrc2018["exact_match"]({"a": "x"}, {"a": ["x"], "b": ["y"]}) == 0.5


def test_cmrc2018_reads_spaces_as_tokens_and_its_answers_still_map_back(model_files, tmp_path):  # noqa: F811
    """CharacterTokens gives every character a token, a space too ([UNK] in the tiny vocab, which has no
    [unused1]): the window holds the whole context and the label points at the answer's own characters."""
    cmrc2018 = runpy.run_path(str(CLUE / "cmrc2018.py"))
    context, answer = "长城 是中国 古代的工程", "中国 古代"
    qa = {"id": "Q1", "question": "长城 是?", "answers": [{"text": answer, "answer_start": context.index(answer)}]}
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": [qa]}]}]}), "utf-8")
    args = cmrc2018["parse_args"](["--data-dir", "x", "--config", "c", "--vocab", "v", "--maxlen", "32"])
    tokens = cmrc2018["snippets"].CharacterTokens(model_files / "vocab.txt")
    (window,), _, _ = cmrc2018["read_file"](path, True, tokens, args)
    assert len(window.token_ids) == 3 + len("长城 是?") + len(context)
    assert window.token_ids[3] == window.token_ids[window.offset + 2] == tokens.ids["[UNK]"]  # the spaces
    start, end = window.label
    assert (window.characters[start - window.offset], window.characters[end - window.offset]) == (4, 8)
    assert context[4:9] == answer
