"""The small real text corpus that ships with kwiden, as byte-level token ids."""

import gzip
from importlib import resources

import numpy as np

PADDING = 0
VOCAB_SIZE = 257  # 256 byte values, shifted by one so that 0 is padding


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
