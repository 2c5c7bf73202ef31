"""Similarity: sentence vectors (`sentence.SentenceEncoder`), their evaluation on
scored and retrieval pairs (`sts`), and SimBERT's `similar` sentences (`similar`).
"""

from kwiden.exports import lazy as _lazy

__getattr__, __dir__ = _lazy(__name__, {})  # its modules, as attributes once asked for

# The in-batch similarity loss' settings (`losses.InBatchSimilarity`), here where the command line reads them as
# `kwiden pretrain`'s defaults without importing Keras. SimBERT's: the cosines are multiplied by this before the
# softmax over the batch.
SCALE = 30.0
# RoFormer-Sim's: the weight of the mean squared difference of the cosines from the teacher's.
DISTILL_WEIGHT = 100.0
