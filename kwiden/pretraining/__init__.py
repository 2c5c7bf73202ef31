"""Pretraining on your own corpus, small first and grown on the way
(`kwiden.pretrain`, the `kwiden pretrain` command)."""

from kwiden.pretraining.run import PretrainResult, pretrain

__all__ = ["PretrainResult", "pretrain"]
