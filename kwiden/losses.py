"""Every kwiden loss, by its public name (as `keras.losses` gathers Keras'); each is written beside its
concern: the span heads' in `kwiden/ner/losses.py`, SimBERT's in `kwiden/similarity/losses.py`."""

from kwiden.ner.losses import (
    ConditionalRandomFieldLoss,
    global_pointer_crossentropy,
    multilabel_categorical_crossentropy,
)
from kwiden.similarity.losses import InBatchSimilarity

__all__ = [
    "ConditionalRandomFieldLoss",
    "InBatchSimilarity",
    "global_pointer_crossentropy",
    "multilabel_categorical_crossentropy",
]
