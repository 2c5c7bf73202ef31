"""The small real text corpus that ships with kwiden, as byte-level token ids."""

import gzip
from importlib import resources

import numpy as np

PADDING = 0
VOCAB_SIZE = 257  # 256 byte values, shifted by one so that 0 is padding


def gpt_config(hidden_size, num_hidden_layers, length, **overrides):
    """The config of a byte-level GPT on this corpus (2 heads, FFN 4× the
    width, ε 1e-5, no dropout) for `kwiden.build_transformer_model(model="gpt")`:
    what the demo, the benchmarks and the notebooks train."""
    config = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=2,
        intermediate_size=4 * hidden_size,
        max_position_embeddings=length,
        layer_norm_eps=1e-5,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return {**config, **overrides}


def load_text(name="python_tutorial.txt.gz"):
    """The shipped text (see kwiden/data/README.md for its source and licence)."""
    with resources.files("kwiden").joinpath("data", name).open("rb") as f:
        return gzip.decompress(f.read()).decode("utf-8")


def encode(text):
    """UTF-8 bytes as token ids 1..256."""
    return np.frombuffer(text.encode("utf-8"), np.uint8).astype("int32") + 1


def decode(ids):
    ids = np.asarray(ids)
    return bytes((ids[ids != PADDING] - 1).astype(np.uint8)).decode("utf-8", "replace")


def windows(ids, length, count, rng):
    """`count` random windows of `length + 1` ids, split into inputs and next-id targets."""
    starts = rng.integers(0, len(ids) - length - 1, count)
    batch = np.stack([ids[s : s + length + 1] for s in starts])
    return batch[:, :-1], batch[:, 1:]
