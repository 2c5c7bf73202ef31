import runpy
from pathlib import Path

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_grow_classifier_example_keeps_accuracy_through_growth():
    main = runpy.run_path(str(EXAMPLES / "grow_classifier.py"))["main"]
    small_accuracy, grown_accuracy, _ = main(["--steps", "6", "--grow-steps", "3", "--batch", "8"])
    assert grown_accuracy == small_accuracy  # same function, same predictions
