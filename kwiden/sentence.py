"""Sentence vectors from a BERT-style checkpoint: `SentenceEncoder`."""

import pathlib

import keras
import numpy as np

from kwiden import naming
from kwiden.builder import build_transformer_model
from kwiden.files import read_json
from kwiden.tokenizer import Tokenizer

POOLINGS = ("cls", "mean")


class SentenceEncoder:
    """L2-normalised sentence vectors from a BERT or RoFormer checkpoint
    folder, encoded in batches: the `[CLS]` row of the last layer, or the
    mean of its rows over the real tokens.

    Args:
        checkpoint: a Hugging Face (or kwiden-saved) folder with its
            `vocab.txt`.
        pooling: `"cls"` or `"mean"`; by default what a sentence-transformers
            folder's `1_Pooling/config.json` says, else `"cls"` (SimBERT's).
        batch_size: texts a forward pass.
        maxlen: tokens a text at most, `[CLS]` and `[SEP]` included (512).
        lowercase: by default the folder's `tokenizer_config.json`'s
            `do_lower_case`, else True.
        model: the folder's model, already built (a UniLM with its MLM head
            too: its first output is the sequence, and a text alone is one
            segment, which it reads both ways); by default built from the folder.

    Example (any BERT folder; a tiny random one here):

    >>> import os, tempfile, kwiden
    >>> folder = tempfile.mkdtemp()
    >>> bert = kwiden.build_transformer_model(dict(vocab_size=8, hidden_size=8, num_hidden_layers=1,
    ...     num_attention_heads=2, intermediate_size=16))
    >>> _ = kwiden.save_checkpoint(bert, folder)
    >>> _ = open(os.path.join(folder, "vocab.txt"), "w").write(
    ...     "\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]))
    >>> encoder = kwiden.SentenceEncoder(folder)
    >>> encoder.encode(["a b", "c"]).shape, round(float(encoder.similarity("a b", "a b")), 5)
    ((2, 8), 1.0)
    """

    def __init__(self, checkpoint, pooling=None, batch_size=32, maxlen=512, lowercase=None, model=None):
        folder = pathlib.Path(checkpoint)
        if not folder.is_dir():
            raise ValueError(f"SentenceEncoder reads a checkpoint folder; {folder} is not one.")
        self.pooling = _pooling_of(folder) if pooling is None else pooling
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling={self.pooling!r}: SentenceEncoder pools by {' or '.join(POOLINGS)}.")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a whole number ≥ 1, got {batch_size!r}.")
        self.batch_size = batch_size
        lowercase = _lowercase_of(folder) if lowercase is None else lowercase
        self.tokenizer = Tokenizer(folder / "vocab.txt", lowercase=lowercase, maxlen=maxlen)
        self.model = build_transformer_model(checkpoint_path=folder) if model is None else model

    def encode(self, texts):
        """A float32 array with one unit-length row a text (a text alone: one row)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"SentenceEncoder.encode takes texts; item {index} is a {type(text).__name__}.")
        width = self.model.get_layer(naming.EMBEDDING_TOKEN).output_dim
        rows = [self._encoded(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(rows) if rows else np.zeros((0, width), "float32")

    def similarity(self, a, b):
        """The cosine of `a`'s and `b`'s vectors: a number for two texts, else a matrix (rows `a`, columns `b`)."""
        cosines = self.encode(a) @ self.encode(b).T
        return float(cosines[0, 0]) if isinstance(a, str) and isinstance(b, str) else cosines

    def _encoded(self, texts):
        token_ids, segment_ids = self.tokenizer(texts)
        outputs = self.model([token_ids, segment_ids])
        sequence = keras.ops.convert_to_numpy(outputs[0] if isinstance(outputs, (list, tuple)) else outputs)
        if self.pooling == "cls":
            vectors = sequence[:, 0]
        else:  # padding (id 0) left out of the mean
            real = (token_ids != 0)[..., None]
            vectors = (sequence * real).sum(1) / real.sum(1)
        vectors = vectors.astype("float64")
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype("float32")


def _pooling_of(folder):
    """What a sentence-transformers folder says it pools by, else "cls"."""
    path = folder / "1_Pooling" / "config.json"
    if not path.is_file():
        return "cls"
    config = read_json(path, f"{path} is not the JSON sentence-transformers writes", "repair it, or pass pooling=")
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    if config.get("pooling_mode_cls_token"):
        return "cls"
    modes = [key for key, value in config.items() if key.startswith("pooling_mode") and value]
    raise ValueError(f"{path} pools by {modes}; SentenceEncoder pools by {' or '.join(POOLINGS)}: pass pooling=.")


def _lowercase_of(folder):
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return True
    config = read_json(path, f"{path} is not the JSON Hugging Face writes", "repair it, or pass lowercase=")
    return bool(config.get("do_lower_case", True))
