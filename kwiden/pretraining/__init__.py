"""Pretraining on your own corpus, small first and grown on the way
(`kwiden.pretrain`, the `kwiden pretrain` command)."""

from kwiden.pretraining.objectives import CausalLM, MaskedLM, Objective, register_objective
from kwiden.pretraining.run import PretrainResult, pretrain
from kwiden.pretraining.seq2seq import Seq2Seq

__all__ = ["CausalLM", "MaskedLM", "Objective", "PretrainResult", "Seq2Seq", "pretrain", "register_objective"]
