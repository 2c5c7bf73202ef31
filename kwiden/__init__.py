"""kwiden: grow a trained Keras 3 Transformer into a wider one that computes the same function."""

import pathlib as _pathlib
import sys as _sys

# The `kwiden` command starts quietly (kwiden.quiet); a library import leaves TensorFlow's notices as they are.
if _pathlib.Path(_sys.argv[0]).name == "kwiden":
    from kwiden.quiet import start_quietly

    start_quietly()

from kwiden import layers, losses, metrics, models, optimizers, testing
from kwiden.checkpoints import save_checkpoint
from kwiden.generation import generate
from kwiden.generation.generator import Generator
from kwiden.growth.expansion import IN, OUT, Growth, GrowthError, Space
from kwiden.growth.pipeline import GrowthResult, grow, growth_scales
from kwiden.growth.streaming import GrownCheckpoint, grow_checkpoint
from kwiden.growth.verify import VerifyReport, verify
from kwiden.models.builder import build_transformer_model
from kwiden.pretraining import PretrainResult, pretrain
from kwiden.similarity.sentence import SentenceEncoder
from kwiden.similarity.similar import similar
from kwiden.text.pairs import Tokenizer
from kwiden.training import admin
from kwiden.training.distribution import layout_map
from kwiden.training.fit import fit_growing
from kwiden.training.schedule import GrowthSchedule

__version__ = "0.1.0"

__all__ = [
    "admin",
    "Generator",
    "Growth",
    "GrowthError",
    "GrowthResult",
    "GrowthSchedule",
    "GrownCheckpoint",
    "IN",
    "OUT",
    "Space",
    "Tokenizer",
    "build_transformer_model",
    "fit_growing",
    "generate",
    "grow",
    "grow_checkpoint",
    "layout_map",
    "growth_scales",
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "pretrain",
    "PretrainResult",
    "SentenceEncoder",
    "save_checkpoint",
    "similar",
    "testing",
    "verify",
    "VerifyReport",
]
