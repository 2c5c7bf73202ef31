"""The CLUE multiple-choice and span baselines (examples/clue: chid, c3,
cmrc2018) end to end on tiny hand-written fixtures in CLUE 1.1's formats,
with the tiny BERT of test_clue.py."""

import json
import re
import shutil

import pytest
from test_clue import FIXTURES, model_files, run, snippets_importable  # noqa: F401 (fixtures)

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


@pytest.mark.parametrize("flags", [[], ["--grow", "2", "--accum-steps", "2"]], ids=["plain", "grow2-accum2"])
@pytest.mark.parametrize("task", sorted(PREDICTIONS))
def test_script_predicts_every_test_question_once(task, flags, model_files, tmp_path):  # noqa: F811
    result = run(task, model_files, tmp_path, None, *flags)
    path = tmp_path / PREDICTIONS[task]
    assert result["predictions"] == path
    CHECKS[task](path)
    assert 0.0 <= result["dev_accuracy"] <= 1.0
