"""The widening calculus (DESIGN §1), in numpy and nothing else.

Every activation vector `a` of the small model has a counterpart in the big
model, `ã = s · P a`: `P` copies coordinate `j` into `factor` interleaved copies
(new index `i` reads old index `i // factor`) and `s` is a scale. A `Space`
names one such pair. Layers say which axis of which weight lives in which
space; `expand` turns that into the big weight. No layer derives a factor.
"""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Space:
    """How a small-model axis maps to the big model: `ã = scale · a[i // factor]`.

    `Space()` is an axis the growth leaves alone (token ids, logits, masks).
    """

    factor: int = 1
    scale: float = 1.0

    @classmethod
    def stream(cls, k):
        """The residual stream: `k` copies at `1/√k`, an isometry (norms kept)."""
        return cls(k, k**-0.5)

    @classmethod
    def copy(cls, k):
        """Plain copies at scale 1: what an elementwise non-linearity needs."""
        return cls(k, 1.0)

    @property
    def expanded(self):
        return self.factor != 1 or self.scale != 1.0

    def size(self, n):
        return n * self.factor

    def source(self, n):
        """For each new index, the old index it reads."""
        return np.repeat(np.arange(n), self.factor)

    def carry(self, a, axis=-1):
        """A small-model tensor `a` as the big model holds it: `s · P a`."""
        a = np.asarray(a, dtype=np.float64)
        return self.scale * np.take(a, self.source(a.shape[axis]), axis=axis)

    def __str__(self):
        if not self.expanded:
            return "unchanged"
        return f"×{self.factor} copies at scale {self.scale:.6g}"


UNCHANGED = Space()

IN = "in"
OUT = "out"


def spread_weights(n, factor):
    """α for each new row of an input axis: they sum to 1 over each row's copies."""
    return np.full(n * factor, 1.0 / factor)


def expand(weight, axes):
    """Expand one weight tensor.

    `axes` gives, for each axis of `weight`, `None` (left alone) or a pair
    `(space, role)`. An `OUT` axis is a space the weight writes into: it is
    copied and its scale multiplies the weight. An `IN` axis is a space the
    weight reads from: each row is spread over its copies with weights summing
    to 1 (DESIGN §1.1) and its scale divides the weight. So a Dense kernel
    `(in, out)` becomes `(s_out / s_in) · S_in W P_outᵀ` and a bias `s_out · P b`.
    Computed in float64 and returned in the weight's dtype.
    """
    weight = np.asarray(weight)
    if len(axes) != weight.ndim:
        raise ValueError(
            f"`axes` names {len(axes)} axes but the weight has shape "
            f"{weight.shape}."
        )
    result = weight.astype(np.float64)
    factor = 1.0
    for axis, spec in enumerate(axes):
        if spec is None:
            continue
        space, role = spec
        n = result.shape[axis]
        result = np.take(result, space.source(n), axis=axis)
        if role == IN:
            shape = [1] * result.ndim
            shape[axis] = -1
            result = result * spread_weights(n, space.factor).reshape(shape)
            factor /= space.scale
        elif role == OUT:
            factor *= space.scale
        else:
            raise ValueError(f"Axis role must be {IN!r} or {OUT!r}, got {role!r}.")
    return (result * factor).astype(weight.dtype)


def is_positively_homogeneous(activation_name):
    """Whether `A(s·x) = s·A(x)` for s > 0, so a scaled copy commutes with A."""
    return activation_name in (None, "linear", "relu", "leaky_relu")
