"""kwiden: grow a trained Keras 3 Transformer into a wider one that computes the same function."""

from kwiden.exports import lazy as _lazy
from kwiden.exports import register_keras_objects as _register_keras_objects
from kwiden.quiet import the_command_runs as _the_command_runs

__version__ = "0.1.0"

_MODULES = {name: f"kwiden.{name}" for name in ("layers", "losses", "metrics", "models", "optimizers", "testing")}
_MODULES["admin"] = "kwiden.training.admin"
_NAMES = {
    "save_checkpoint": "kwiden.checkpoints",
    "generate": "kwiden.generation.prompts",
    "Generator": "kwiden.generation.generator",
    **dict.fromkeys(("IN", "OUT", "Growth", "GrowthError", "Space"), "kwiden.growth.expansion"),
    **dict.fromkeys(("GrowthResult", "grow", "growth_scales"), "kwiden.growth.pipeline"),
    **dict.fromkeys(("GrownCheckpoint", "grow_checkpoint"), "kwiden.growth.streaming"),
    **dict.fromkeys(("VerifyReport", "verify"), "kwiden.growth.verify"),
    "build_transformer_model": "kwiden.models.builder",
    **dict.fromkeys(("PretrainResult", "pretrain"), "kwiden.pretraining.run"),
    "SentenceEncoder": "kwiden.similarity.sentence",
    "similar": "kwiden.similarity.similar",
    "Tokenizer": "kwiden.text.pairs",
    "layout_map": "kwiden.training.distribution",
    "fit_growing": "kwiden.training.fit",
    "GrowthSchedule": "kwiden.training.schedule",
}
__getattr__, __dir__ = _lazy(__name__, _NAMES, _MODULES)

# A Python program that imports kwiden reads kwiden's models with keras.saving.load_model at once; the `kwiden`
# command imports Keras only once a command computes, so that --help and a refused flag answer at once.
if not _the_command_runs():
    _register_keras_objects()
__all__ = sorted([*_MODULES, *_NAMES], key=str.lower)
