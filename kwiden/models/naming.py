"""The names kwiden's builders give their layers, in one place.

Checkpoint maps read them, depth growth renumbers blocks with them, and
`kwiden.grow` keeps them; nothing else spells a layer name. Names follow
bert4keras: `Embedding-Token`, `Transformer-3-FeedForward-Norm`, `MLM-Bias`.
"""

import re

INPUT_TOKEN = "Input-Token"
INPUT_SEGMENT = "Input-Segment"

EMBEDDING_TOKEN = "Embedding-Token"
EMBEDDING_SEGMENT = "Embedding-Segment"
EMBEDDING_POSITION = "Embedding-Position"
EMBEDDING_RELATIVE_POSITION = "Embedding-Relative-Position"
EMBEDDING_ADD = "Embedding-Add"
EMBEDDING_NORM = "Embedding-Norm"
EMBEDDING_DROPOUT = "Embedding-Dropout"

OUTPUT_NORM = "Output-Norm"
OUTPUT_LOGITS = "Output-Logits"

POOLER = "Pooler"
POOLER_DENSE = "Pooler-Dense"
MLM_DENSE = "MLM-Dense"
MLM_NORM = "MLM-Norm"
MLM_BIAS = "MLM-Bias"

# The two residual sublayers of a block, and the parts around each.
ATTENTION = "MultiHeadSelfAttention"
FEED_FORWARD = "FeedForward"
SUBLAYERS = (ATTENTION, FEED_FORWARD)
NORM, DROPOUT, ADD = "Norm", "Dropout", "Add"

_BLOCK = re.compile(r"^Transformer-(\d+)-")


def block(index, sublayer, part=None):
    """`Transformer-{index}-{sublayer}`, or with `-{part}` (Norm, Dropout, Add)."""
    name = f"Transformer-{index}-{sublayer}"
    return name if part is None else f"{name}-{part}"


def block_index(name):
    """The block a layer name belongs to, or None outside the blocks."""
    match = _BLOCK.match(name)
    return int(match.group(1)) if match else None


def renumbered(name, index):
    """`name` moved to block `index` (depth growth)."""
    return _BLOCK.sub(f"Transformer-{index}-", name, count=1)


def count_blocks(names):
    """How many distinct blocks the layer `names` belong to."""
    return len({block_index(name) for name in names} - {None})


def with_part(name, part):
    """The sibling of a sublayer's part: `…-FeedForward-Norm` → `…-FeedForward-Add`."""
    base = name.rsplit("-", 1)[0] if name.endswith(f"-{NORM}") else name
    return f"{base}-{part}"
