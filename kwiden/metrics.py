"""Every kwiden metric, by its public name (as `keras.metrics` gathers Keras'); each is written beside its
concern: entity-level F1 in `kwiden/ner/metrics.py`, retrieval in `kwiden/similarity/retrieval.py`."""

from kwiden.ner.metrics import SpanF1, SpanPrecision, SpanRecall, span_counts, span_f1_score
from kwiden.similarity.retrieval import retrieval_accuracy

__all__ = ["SpanF1", "SpanPrecision", "SpanRecall", "retrieval_accuracy", "span_counts", "span_f1_score"]
