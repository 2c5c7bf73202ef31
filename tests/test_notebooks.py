"""The notebooks run top to bottom (their cells assert what they show).

Every notebook in notebooks/ runs here in its small mode (KWIDEN_NOTEBOOK_SMALL=1:
smaller models and fewer steps, the same code), in a kernel that imports this
checkout's kwiden. They are saved without outputs.
"""

import importlib.util
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
REQUIREMENTS = ("matplotlib",)  # what the notebooks import beyond kwiden's own requirements


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, monkeypatch):
    missing = [name for name in REQUIREMENTS if importlib.util.find_spec(name) is None]
    assert not missing, f"the notebooks need {missing}: pip install -e '.[test,notebooks]'"
    monkeypatch.setenv("KWIDEN_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    errors = [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


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
