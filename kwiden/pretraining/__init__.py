"""Pretraining on your own corpus, small first and grown on the way
(`kwiden.pretrain`, the `kwiden pretrain` command)."""

from kwiden.exports import lazy as _lazy

_NAMES = {
    **dict.fromkeys(("CausalLM", "MaskedLM", "Objective", "register_objective"), "kwiden.pretraining.objectives"),
    "Seq2Seq": "kwiden.pretraining.objectives.seq2seq",
    "SimBERT": "kwiden.pretraining.objectives.simbert",
    **dict.fromkeys(("PretrainResult", "pretrain"), "kwiden.pretraining.run"),
}
__getattr__, __dir__ = _lazy(__name__, _NAMES)
__all__ = sorted(_NAMES, key=str.lower)
