"""Pretraining on your own corpus, small first and grown on the way
(`kwiden.pretrain`, the `kwiden pretrain` command)."""

from kwiden.pretraining.objectives import CausalLM, MaskedLM, Objective, register_objective
from kwiden.pretraining.objectives.seq2seq import Seq2Seq
from kwiden.pretraining.objectives.simbert import SimBERT
from kwiden.pretraining.run import PretrainResult, pretrain

__all__ = [
    "CausalLM",
    "MaskedLM",
    "Objective",
    "PretrainResult",
    "Seq2Seq",
    "SimBERT",
    "pretrain",
    "register_objective",
]
