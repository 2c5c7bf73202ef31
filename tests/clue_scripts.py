"""Where the CLUE scripts are, and the fixture that lets them `import snippets` as they do when run from their
folder (`python examples/clue/x.py`): for the tests of the scripts and of what they share with the package."""

import pathlib

import pytest

CLUE = pathlib.Path(__file__).parents[1] / "examples" / "clue"


@pytest.fixture(autouse=True)
def snippets_importable(monkeypatch):
    """The scripts `import snippets` from their folder, as `python examples/clue/x.py` would find it."""
    monkeypatch.syspath_prepend(str(CLUE))
