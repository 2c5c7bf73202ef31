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
    With `group=2`, pairs are copied instead of single coordinates,
    `[x1, x2, x1, x2, x3, x4, x3, x4]`, as rotary embeddings need (DESIGN §1.8).
    """

    factor: int = 1
    scale: float = 1.0
    group: int = 1

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

    def source(self, n):
        """For each new index, the old index it reads."""
        if self.group == 1:
            return np.repeat(np.arange(n), self.factor)
        if n % self.group:
            raise ValueError(f"A space of groups of {self.group} needs a multiple of {self.group}, got {n}.")
        groups = np.arange(n).reshape(-1, 1, self.group)
        return np.broadcast_to(groups, (n // self.group, self.factor, self.group)).reshape(-1)

    def carry(self, a, axis=-1):
        """A small-model tensor `a` as the big model holds it: `s · P a`."""
        a = np.asarray(a, dtype=np.float64)
        return self.scale * np.take(a, self.source(a.shape[axis]), axis=axis)

    def __str__(self):
        if not self.expanded:
            return "unchanged"
        return f"×{self.factor} copies at scale {self.scale:.6g}"


UNCHANGED = Space()


def check_factor(k, name="k"):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"`{name}` must be a positive integer (2 doubles the width), got {name}={k!r}.")
    return int(k)


HEAD_MODES = ("size", "count")
ROPE_MODES = ("exact", "standard")


@dataclasses.dataclass(frozen=True)
class Growth:
    """What one growth does to each kind of width.

    `k` multiplies the hidden size (residual stream, embeddings, norms). `ffn`
    multiplies the feed-forward width (default `k`). `heads="size"` multiplies
    each attention head's size by `k` (DESIGN §1.5); `heads="count"` multiplies
    the number of heads instead (§1.6). `rope="exact"` keeps rotary
    frequencies copied pair-wise; `"standard"` gives grown heads the standard
    schedule of their new size, which is approximate (§1.8) and needs
    `allow_approximate`. Layers accept a `Growth` wherever they accept an
    integer `k`.
    """

    k: int
    ffn: int | None = None
    heads: str = "size"
    rope: str = "exact"
    allow_approximate: bool = False

    def __post_init__(self):
        object.__setattr__(self, "k", check_factor(self.k))
        if self.ffn is not None:
            object.__setattr__(self, "ffn", check_factor(self.ffn, "ffn_factor"))
        if self.heads not in HEAD_MODES:
            raise ValueError(f"`heads` must be one of {HEAD_MODES}, got heads={self.heads!r}.")
        if self.rope not in ROPE_MODES:
            raise ValueError(f"`rope` must be one of {ROPE_MODES}, got rope={self.rope!r}.")

    @property
    def ffn_factor(self):
        return self.k if self.ffn is None else self.ffn

    @classmethod
    def of(cls, growth):
        return growth if isinstance(growth, cls) else cls(growth)

IN = "in"
OUT = "out"


def spread_weights(shape, axis, factor, spread=0.0, rng=None, source=None):
    """α over an expanded input axis: weights that sum to 1 over each row's copies.

    `spread=0` gives the plain `1/factor`. Otherwise `α = (1 + spread·u)/factor`
    with `u` drawn per element, uniform in [-1, 1], then centred over each group
    of copies (so triangular for k=2, and α < 0 happens for spread ≥ 1/2, which
    stays exact; DESIGN §1.7): every output still receives exactly the small
    model's input, but each copy of an input neuron reaches the outputs through
    different weights, so the copies receive different gradients from the first
    step on, under SGD and under Adam alike.
    """
    if spread == 0.0 or factor == 1:
        broadcast = [1] * len(shape)
        broadcast[axis] = shape[axis]
        return np.full(broadcast, 1.0 / factor)
    if rng is None:
        raise ValueError("`spread` needs a random generator `rng`.")
    if source is None:
        source = np.repeat(np.arange(shape[axis] // factor), factor)
    # Centre u over the copies of each source row: sort the copies together,
    # subtract each group's mean, and put them back.
    order = np.argsort(source, kind="stable")
    u = np.moveaxis(rng.uniform(-1.0, 1.0, shape), axis, -1)
    grouped = u[..., order].reshape(*u.shape[:-1], -1, factor)
    grouped = (grouped - grouped.mean(axis=-1, keepdims=True)).reshape(u.shape)
    u = np.empty_like(grouped)
    u[..., order] = grouped
    return (1.0 + spread * np.moveaxis(u, -1, axis)) / factor


def _check_axes(weight, axes):
    if len(axes) != weight.ndim:
        raise ValueError(f"`axes` names {len(axes)} axes but the weight has shape {weight.shape}.")
    for spec in axes:
        if spec is not None and spec[1] not in (IN, OUT):
            raise ValueError(f"Axis role must be {IN!r} or {OUT!r}, got {spec[1]!r}.")


def expand(weight, axes, spread=0.0, rng=None):
    """Expand one weight tensor.

    `axes` gives, for each axis of `weight`, `None` (left alone) or a pair
    `(space, role)`. An `OUT` axis is a space the weight writes into: it is
    copied and its scale multiplies the weight. An `IN` axis is a space the
    weight reads from: each row is spread over its copies with weights summing
    to 1 (DESIGN §1.1; unequal when `spread > 0`, §1.7) and its scale divides
    the weight. So a Dense kernel `(in, out)` becomes
    `(s_out / s_in) · S_in W P_outᵀ` and a bias `s_out · P b`.
    Computed in float64 and returned in the weight's dtype.
    """
    weight = np.asarray(weight)
    _check_axes(weight, axes)
    if spread == 0.0:
        # Equal splits: scale the small tensor, then copy (k² times less work).
        return _copy(weight.astype(np.float64) * growth_scale(axes), axes).astype(weight.dtype)
    result = weight.astype(np.float64)
    for axis, spec in enumerate(axes):
        if spec is not None:
            space, role = spec
            source = space.source(result.shape[axis])
            result = np.take(result, source, axis=axis)
            if role == IN:
                alpha = spread_weights(result.shape, axis, space.factor, spread, rng, source)
                result = result * (space.factor * alpha)
    return (result * growth_scale(axes)).astype(weight.dtype)


def _copy(value, axes):
    """`value` copied along each grown axis (no scaling)."""
    for axis, spec in enumerate(axes):
        if spec is None or spec[0].factor == 1:
            continue
        if spec[0].group == 1:
            value = np.repeat(value, spec[0].factor, axis=axis)
        else:
            value = np.take(value, spec[0].source(value.shape[axis]), axis=axis)
    return value


def growth_scale(axes):
    """`c`: the grown tensor is its source copied and multiplied by `c` (with
    equal splits). DESIGN §1.11b: Adam's learning rate for it times `c` keeps
    the first steps after growth on the small model's trajectory."""
    c = 1.0
    for spec in axes:
        if spec is not None:
            space, role = spec
            c *= space.scale if role == OUT else 1.0 / (space.scale * space.factor)
    return c


def copy_count(axes):
    """K: how many copies of each source element the grown tensor holds."""
    return int(np.prod([spec[0].factor for spec in axes if spec is not None]))


def expand_gradient_like(value, axes, power=1):
    """An optimizer slot grown with its weight (DESIGN §1.11).

    With equal splits the grown weight's gradient is the source's copied and
    multiplied by `1/(c·K)`, `K` the number of copies per source element: first
    moments (`power=1`) grow like that, second moments (`power=2`) like its square.
    """
    value = np.asarray(value)
    _check_axes(value, axes)
    result = value.astype(np.float64) * (1.0 / (growth_scale(axes) * copy_count(axes))) ** power
    return _copy(result.astype(value.dtype), axes)


class GrowthError(ValueError):
    """A model that kwiden cannot grow exactly, or a grown model that is not exact."""


POSITIVELY_HOMOGENEOUS = (None, "linear", "relu", "leaky_relu")
ELEMENTWISE = POSITIVELY_HOMOGENEOUS + (
    "celu", "elu", "exponential", "gelu", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh",
    "log_sigmoid", "mish", "relu6", "selu", "sigmoid", "silu", "soft_shrink", "softplus",
    "softsign", "sparse_plus", "squareplus", "swish", "tanh", "tanh_shrink",
)  # fmt: skip


def is_positively_homogeneous(activation_name):
    """Whether `A(s·x) = s·A(x)` for s > 0, so a scaled copy commutes with A."""
    return activation_name in POSITIVELY_HOMOGENEOUS


def check_elementwise(activation_name, where):
    """Only elementwise activations commute with copies (`A(P h) = P A(h)`);
    softmax and other functions of the whole vector do not."""
    if activation_name not in ELEMENTWISE:
        raise GrowthError(
            f"{where} uses the activation {activation_name!r}, which is not elementwise "
            "(or not known to be): copying its input would change its output. Put it "
            "after a layer whose output width stays (a plain keras Dense head), or use "
            f"one of {', '.join(a for a in ELEMENTWISE if a)}."
        )
