"""How a kwiden weight sits in a checkpoint tensor (`Layout`), and the two
conversions. numpy only: `kwiden.checkpoints` reads and writes files with it,
the families (`kwiden.models`) declare a `Layout` per tensor.
"""

import dataclasses
from typing import Optional

import numpy as np

# How a kwiden weight relates to its checkpoint tensor. Kernels are (in, out)
# in kwiden and Google checkpoints, (out, in) in Hugging Face's; attention
# splits its kernels by heads, checkpoints keep them flat.
KERNEL_KINDS = ("linear", "heads_out", "heads_in")
HEAD_KINDS = ("heads_out", "heads_in", "heads_bias")


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a kwiden weight sits in its checkpoint tensor.

    `flat`: how kwiden's per-head axes are flattened: `"heads_out"` (a
    query, key or value kernel, `(in, heads, size)` as `(in, heads·size)`),
    `"heads_in"` (the output kernel, `(heads, size, out)` as
    `(heads·size, out)`), `"heads_bias"` (`(heads, size)` as `(heads·size,)`)
    or None. `transpose`: the (flat) kernel is stored `(out, in)`, as
    PyTorch's `Linear` stores it. `rotate_half`: each head's coordinates are
    in Hugging Face LLaMA's rotary order, the first halves of the rotated
    pairs then the second halves, where kwiden keeps each pair
    `(x_2i, x_2i+1)` side by side; queries and keys permuted alike give the
    same scores. `part`: `(index, count)` where the tensor holds `count`
    weights side by side along its last axis (GPT-2's `c_attn` holds the
    query, key and value) and this weight is slice `index`.

    >>> layout = Layout("heads_out", transpose=True, rotate_half=True)
    >>> kernel = np.arange(8.0).reshape(1, 2, 4)  # (in, heads, size)
    >>> to_checkpoint(kernel, layout)
    array([[0.],
           [2.],
           [1.],
           [3.],
           [4.],
           [6.],
           [5.],
           [7.]])
    >>> np.array_equal(to_kwiden(to_checkpoint(kernel, layout), kernel.shape, layout), kernel)
    True
    """

    flat: Optional[str] = None
    transpose: bool = False
    rotate_half: bool = False
    part: Optional[tuple] = None

    @classmethod
    def of(cls, kind, format):
        """A family's `kind` (a `Layout`, or one of `KERNEL_KINDS`,
        `"heads_bias"` or None) as stored in `format`."""
        if isinstance(kind, Layout):
            return kind
        return cls(kind if kind in HEAD_KINDS else None, format == "hf" and kind in KERNEL_KINDS)


def _flat_shape(shape, flat):
    if flat == "heads_out":  # (in, heads, size)
        return (shape[0], shape[1] * shape[2])
    if flat == "heads_in":  # (heads, size, out)
        return (shape[0] * shape[1], shape[2])
    if flat == "heads_bias":  # (heads, size)
        return (shape[0] * shape[1],)
    return tuple(shape)


def checkpoint_shape(shape, layout):
    """The shape of the checkpoint tensor holding a weight of `shape`."""
    shape = _flat_shape(tuple(shape), layout.flat)
    if layout.part is not None:
        shape = (*shape[:-1], shape[-1] * layout.part[1])
    return shape[::-1] if layout.transpose else shape


def _half_order(size):
    """Hugging Face's rotary order of a head's coordinates, from kwiden's:
    kwiden's `2i` and `2i+1` are its `i` and `i + size/2`."""
    return np.arange(size).reshape(-1, 2).T.reshape(-1)


def to_kwiden(value, shape, layout):
    """A checkpoint tensor as the kwiden weight of `shape` it holds."""
    if layout.transpose:
        value = value.T
    if layout.part is not None:
        index, count = layout.part
        width = value.shape[-1] // count
        value = value[..., index * width : (index + 1) * width]
    value = value.reshape(shape)
    if layout.rotate_half:
        value = value[..., np.argsort(_half_order(shape[-1]))]
    return value


def to_checkpoint(value, layout):
    """A kwiden weight as its checkpoint tensor holds it (one part of it, for
    a `part`: `join_parts` puts them together)."""
    if layout.rotate_half:
        value = value[..., _half_order(value.shape[-1])]
    value = value.reshape(_flat_shape(value.shape, layout.flat))
    return value.T if layout.transpose else value


def join_parts(parts, layout):
    """The tensor holding `parts`, each `to_checkpoint`'s, in order."""
    return np.concatenate(parts, axis=0 if layout.transpose else -1)
