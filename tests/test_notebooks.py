"""The notebooks run top to bottom (their cells assert what they show).

Every notebook in notebooks/ runs here in its small mode (KWIDEN_NOTEBOOK_SMALL=1:
smaller models and fewer steps, the same code), in a kernel that imports this
checkout's kwiden. They are saved without outputs.
"""

import importlib.util
import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
REQUIREMENTS = ("matplotlib",)  # what the notebooks import beyond kwiden's own requirements


PRETRAIN = ROOT / "notebooks" / "pretrain_then_finetune.ipynb"
# Notebooks run by a test of their own, which also checks the files they write.
RUN_APART = (PRETRAIN,)


def execute(path, monkeypatch, **environment):
    """Run the notebook in its small mode, in a kernel that imports this checkout's kwiden."""
    missing = [name for name in REQUIREMENTS if importlib.util.find_spec(name) is None]
    assert not missing, f"the notebooks need {missing}: pip install -e '.[test,notebooks]'"
    monkeypatch.setenv("KWIDEN_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    notebook = nbformat.read(path, as_version=4)
    # The kernel is killed once the last cell has run ("immediate"): every output is in by then, and a graceful
    # shutdown waits seconds for a kernel that imported TensorFlow to exit on its own.
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
        shutdown_kernel="immediate",
    )
    client.execute()
    errors = [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p not in RUN_APART], ids=lambda p: p.name)
def test_notebook_runs(path, monkeypatch):
    execute(path, monkeypatch)


def test_pretrain_then_finetune_notebook(tmp_path, monkeypatch):
    """It pretrains (grown on the way) into a Hugging Face folder with its vocabulary, and the
    TNEWS script fine-tunes that folder and predicts every test line of the task it wrote."""
    execute(PRETRAIN, monkeypatch, KWIDEN_NOTEBOOK_WORK=str(tmp_path))
    final = tmp_path / "run" / "final"
    assert {"config.json", "model.safetensors", "vocab.txt"} <= {p.name for p in final.iterdir()}
    config = json.loads((final / "config.json").read_text("utf-8"))
    assert config["vocab_size"] == len((final / "vocab.txt").read_text("utf-8").splitlines())
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text("utf-8").splitlines()]
    assert rows[-1]["update"] >= 20 and any(row.get("grew") for row in rows)
    assert rows[0]["hidden_size"] * 2 == rows[-1]["hidden_size"] == config["hidden_size"]
    assert (tmp_path / "run" / "loss.png").stat().st_size > 0

    labels = [json.loads(line)["label"] for line in (tmp_path / "clue" / "labels.json").read_text("utf-8").splitlines()]
    test = [json.loads(line) for line in (tmp_path / "clue" / "test.json").read_text("utf-8").splitlines()]
    for folder in ("finetune", "finetune_from_scratch"):
        predictions = (tmp_path / folder / "tnews11_predict.json").read_text("utf-8").splitlines()
        predictions = [json.loads(line) for line in predictions]
        assert [p["id"] for p in predictions] == [t["id"] for t in test]
        assert {p["label"] for p in predictions} <= set(labels)
    results = json.loads((tmp_path / "results.json").read_text("utf-8"))
    assert len(labels) >= 2 and results["majority_class"]["dev_accuracy"] == pytest.approx(1 / len(labels))
    # Small mode's scores mean nothing; each is still a share of its split's lines (the dev one the best epoch's,
    # the test one the predictions file's against the labels kept aside).
    assert results["examples"]["test"] == len(test)
    for start in ("pretrained", "from_scratch"):
        for split in ("dev", "test"):
            right = results[start][f"{split}_accuracy"] * results["examples"][split]
            assert right == pytest.approx(round(right)) and 0 <= round(right) <= results["examples"][split]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_saved_clean(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: saved with outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_colab_ready(path):
    """The first code cell installs kwiden where it is missing; the small mode is read."""
    notebook = nbformat.read(path, as_version=4)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    assert "KWIDEN_REPO" in code[0] and "%pip install" in code[0] and 'find_spec("kwiden") is None' in code[0]
    assert any("KWIDEN_NOTEBOOK_SMALL" in source for source in code)


def test_there_are_notebooks():
    assert NOTEBOOKS
