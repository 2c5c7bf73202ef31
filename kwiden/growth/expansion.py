"""The widening calculus (docs/widening.md), in numpy and nothing else.

Every activation vector `a` of the small model has a counterpart in the big
model, `ã = s · P a`: `P` copies coordinate `j` into `factor` interleaved copies
(new index `i` reads old index `i // factor`) and `s` is a scale. A `Space`
names one such pair. Layers say which axis of which weight lives in which
space; `expand` turns that into the big weight. No layer derives a factor.
"""

import dataclasses
import fractions

import numpy as np

# The scale of a stream grown by a non-integer factor: each copy of
# coordinate j carries 1/√c_j, c_j its number of copies. That keeps `Q = sP`
# an isometry (QᵀQ = I) when copy counts differ (docs/non-integer.md).
ISOMETRY = "1/√copies"


@dataclasses.dataclass(frozen=True)
class Space:
    """How a small-model axis maps to the big model: `ã_i = s_i · a[source(i)]`.

    `Space()` is an axis the growth leaves alone (token ids, logits, masks).
    `factor` is the width ratio: an integer gives `factor` interleaved copies
    of every coordinate (new index `i` reads `i // factor`) at one `scale`; a
    `fractions.Fraction` (384 → 512 is 4/3) gives consecutive copies in
    unequal numbers, new index `i` reading `⌊i·n/n'⌋`, and `scale` may then
    be `ISOMETRY`, `1/√c_j` for the copies of coordinate `j` (docs/non-integer.md).
    With `group=2`, pairs are copied instead of single coordinates,
    `[x1, x2, x1, x2, x3, x4, x3, x4]`, as rotary embeddings need (docs/widening.md#rotary-position-embedding); with
    `group=G`, blocks of G (the query heads sharing one key/value head).
    `axis` is where the space lives in a tensor: the last axis for features,
    1 for the heads of a `(1, heads, queries, keys)` attention bias.
    """

    factor: int | fractions.Fraction = 1
    scale: float | str = 1.0
    group: int = 1
    axis: int = -1

    def __post_init__(self):
        object.__setattr__(self, "factor", as_factor(self.factor))
        if self.scale == ISOMETRY and self.even:
            object.__setattr__(self, "scale", self.factor**-0.5)

    @classmethod
    def stream(cls, k):
        """The residual stream: copies at `1/√copies`, an isometry (norms kept)."""
        return cls(k, ISOMETRY)

    @classmethod
    def copy(cls, k, group=1):
        """Plain copies at scale 1: what an elementwise non-linearity needs."""
        return cls(k, 1.0, group)

    @property
    def even(self):
        """Whether every coordinate has the same number of copies."""
        return isinstance(self.factor, int)

    @property
    def expanded(self):
        return self.factor != 1 or self.scale != 1.0

    @property
    def mean_square_scale(self):
        """How the grown vector's mean square relates to the small one's:
        `s²` for equal copies at scale s, `n/n'` for an isometry."""
        return 1.0 / float(self.factor) if self.scale == ISOMETRY else self.scale**2

    def grown_size(self, n, what="an axis"):
        """`n · factor`, which must be a whole multiple of `group`."""
        size = grown_size(n, self.factor, what)
        if n % self.group or size % self.group:
            raise GrowthError(
                f"{what} copies blocks of {self.group}: its size {n} and grown size {size} must both be "
                f"multiples of {self.group}."
            )
        return size

    def source(self, n):
        """For each new index, the old index it reads."""
        blocks = n // self.group
        grown = self.grown_size(n) // self.group
        block_source = np.arange(grown) * blocks // grown  # = i // factor for an integer factor
        return (block_source[:, None] * self.group + np.arange(self.group)).reshape(-1)

    def copies(self, n):
        """For each new index, how many copies its source coordinate has."""
        return copy_counts(self.source(n))

    def scales(self, n):
        """For each new index, its scale `s_i`."""
        if self.scale == ISOMETRY:
            return self.copies(n) ** -0.5
        return np.full(self.grown_size(n), self.scale)

    def carry(self, a, axis=None):
        """A small-model tensor `a` as the big model holds it: `s · P a`."""
        axis = self.axis if axis is None else axis
        a = np.asarray(a, dtype=np.float64)
        n = a.shape[axis]
        return np.take(a, self.source(n), axis=axis) * _along(self.scales(n), axis, a.ndim)

    def __str__(self):
        if not self.expanded:
            return "unchanged"
        scale = self.scale if isinstance(self.scale, str) else f"{self.scale:.6g}"
        return f"×{self.factor} copies at scale {scale}"


def copy_counts(source):
    """For each new index of a copy map `source`, how many copies its source has."""
    return np.bincount(source)[source]


def _along(vector, axis, ndim):
    """`vector` shaped to broadcast along `axis` of an `ndim`-d array."""
    shape = [1] * ndim
    shape[axis] = -1
    return np.reshape(vector, shape)


def as_factor(k, name="k"):
    """A growth factor ≥ 1: an int, or a `Fraction` when it is not whole."""
    if isinstance(k, np.floating):
        k = float(k)
    problem = (
        f"`{name}` must be a number >= 1 (2 doubles the width; fractions.Fraction(4, 3) grows "
        f"384 to 512), got {name}={k!r}"
    )
    if isinstance(k, bool) or not isinstance(k, (int, np.integer, fractions.Fraction, float)):
        raise ValueError(problem + ".")
    if isinstance(k, float) and not np.isfinite(k):
        raise ValueError(problem + ", which is not a finite number.")
    ratio = fractions.Fraction(k).limit_denominator(4096) if isinstance(k, float) else fractions.Fraction(k)
    if isinstance(k, float) and abs(float(ratio) - k) > 1e-12:
        raise ValueError(problem + ", which is no simple ratio: pass a Fraction, or target sizes.")
    if ratio < 1:
        raise ValueError(problem + ".")
    return int(ratio) if ratio.denominator == 1 else ratio


UNCHANGED = Space()


def grown_size(n, factor, what):
    """`n · factor` as an int; a `GrowthError` naming `what` if it is not whole."""
    size = n * factor
    if int(size) != size:
        raise GrowthError(
            f"{what} is {n}, and {n} × {factor} = {float(size):.4g} is not a whole number. "
            "Choose target sizes that are whole multiples of the same ratio, or an integer factor."
        )
    return int(size)


HEAD_MODES = ("size", "count")
ROPE_MODES = ("exact", "standard")


@dataclasses.dataclass(frozen=True)
class Growth:
    """What one growth does to each kind of width.

    `k` multiplies the hidden size (residual stream, embeddings, norms); a
    `Fraction` (4/3) gives unequal copy counts (docs/non-integer.md). `ffn` multiplies
    the feed-forward width (default `k`). `heads="size"` multiplies each
    attention head's size by `k` (docs/widening.md#attention-wider-heads); `heads="count"` multiplies the number
    of heads instead (docs/widening.md#attention-more-heads), and is what a non-integer `k` needs. `rope="exact"`
    keeps rotary frequencies copied pair-wise; `"standard"` gives grown heads
    the standard schedule of their new size, which is approximate (docs/widening.md#rotary-position-embedding).
    `allow_approximate` lets layers that cannot stay exact (that schedule,
    LayerNorm under unequal copies) grow anyway. Layers accept a `Growth`
    wherever they accept an integer `k`.
    """

    k: int | fractions.Fraction
    ffn: int | fractions.Fraction | None = None
    heads: str = "size"
    rope: str = "exact"
    allow_approximate: bool = False
    # What this growth accepted as approximate, filled in as layers are planned.
    approximations: list = dataclasses.field(default_factory=list, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "k", as_factor(self.k))
        if self.ffn is not None:
            object.__setattr__(self, "ffn", as_factor(self.ffn, "ffn_factor"))
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

    def refuse_approximation(self, what, why, instead):
        """Raise unless `allow_approximate`: `what` would change the function."""
        if not self.allow_approximate:
            raise GrowthError(f"{what}: {why} Pass allow_approximate=True to accept that, or {instead}.")
        self.approximations.append(what)


def query_head_space(k, heads, key_value_heads=None):
    """How whole heads are copied when their number grows (docs/widening.md#attention-more-heads): every
    copy of a head exact (scale 1). With an integer factor copies interleave,
    head `h·k + c` reading head `h`, which keeps grouped-query attention's
    groups. Under unequal copy counts, query heads are copied in their groups
    (each group a key/value head's), so each copy still meets a copy of its own
    key/value head. Attention and per-head score biases share this rule."""
    if isinstance(as_factor(k), int) or key_value_heads is None:
        return Space.copy(k)
    return Space.copy(k, group=heads // key_value_heads)


IN = "in"
OUT = "out"


def spread_weights(shape, axis, source, spread=0.0, rng=None):
    """α over an expanded input axis: weights that sum to 1 over each row's copies.

    `source` gives, for each index along `axis`, the row it copies. `spread=0`
    gives the plain `1/c`, `c` the row's number of copies. Otherwise
    `α = (1 + spread·u)/c` with `u` drawn per element, uniform in [-1, 1],
    then centred over each row's copies (so triangular for two copies, and
    α < 0 happens for spread ≥ 1/2, which stays exact; docs/symmetry.md): every
    output still receives exactly the small model's input, but each copy of
    an input neuron reaches the outputs through different weights, so the
    copies receive different gradients from the first step on, under SGD and
    under Adam alike. A row with one copy keeps α = 1.
    """
    copies = copy_counts(source)
    if spread == 0.0 or copies.max() == 1:
        return _along(1.0 / copies, axis, len(shape))
    if rng is None:
        raise ValueError("`spread` needs a random generator `rng`.")
    axis = axis % len(shape)
    u = rng.uniform(-1.0, 1.0, shape)
    k = int(copies[0])
    if np.array_equal(source, np.repeat(np.arange(len(source) // k), k)):
        # Every row copied k times side by side: the copies of a row are a view's axis (no index arrays).
        runs = u.reshape(shape[:axis] + (len(source) // k, k) + tuple(shape[axis + 1 :]))
        centre = runs.sum(axis=axis + 1, keepdims=True)
        centre /= k
        runs -= centre
        del centre, runs
        u *= spread
        u += 1.0
        u /= k
        return u
    u = np.moveaxis(u, axis, -1)
    means = np.zeros(u.shape[:-1] + (source.max() + 1,))
    np.add.at(np.moveaxis(means, -1, 0), source, np.moveaxis(u, -1, 0))
    # In place, the same operations as `(1 + spread·(u - mean)) / c`: one array of `shape` at a time.
    centre = means[..., source]
    centre /= copies
    u -= centre
    del centre
    u *= spread
    u += 1.0
    u = np.moveaxis(u, -1, axis)
    u /= _along(copies, axis, len(shape))
    return u


def _check_axes(weight, axes):
    if len(axes) != weight.ndim:
        raise ValueError(f"`axes` names {len(axes)} axes but the weight has shape {weight.shape}.")
    for spec in axes:
        if spec is not None and spec[1] not in (IN, OUT):
            raise ValueError(f"Axis role must be {IN!r} or {OUT!r}, got {spec[1]!r}.")


def _even(axes):
    return all(spec is None or spec[0].even for spec in axes)


def expand(weight, axes, spread=0.0, rng=None):
    """Expand one weight tensor.

    `axes` gives, for each axis of `weight`, `None` (left alone) or a pair
    `(space, role)`. An `OUT` axis is a space the weight writes into: it is
    copied and its scale multiplies the weight. An `IN` axis is a space the
    weight reads from: each row is spread over its copies with weights summing
    to 1 (docs/widening.md#linear-maps; unequal when `spread > 0`, docs/symmetry.md) and its scale divides
    the weight. So a Dense kernel `(in, out)` becomes
    `(s_out / s_in) · S_in W P_outᵀ` and a bias `s_out · P b`; with unequal
    copy counts the scales and splits are per index (docs/non-integer.md).
    Computed in float64 and returned in the weight's dtype.
    """
    weight = np.asarray(weight)
    _check_axes(weight, axes)
    if spread == 0.0 and _even(axes):
        # Equal splits: scale the small tensor, then copy (k² times less work).
        return _copy(weight.astype(np.float64) * growth_scale(axes), axes).astype(weight.dtype)
    result = weight.astype(np.float64)
    for axis, spec in enumerate(axes):
        if spec is not None:
            space, role = spec
            n = result.shape[axis]
            source = space.source(n)
            result = np.take(result, source, axis=axis)  # a new array: scaled in place below
            scales = _along(space.scales(n), axis, result.ndim)
            if role == OUT:
                result *= scales
            else:
                splits = spread_weights(result.shape, axis, source, spread, rng)
                splits /= scales
                result *= splits
                del splits
    return result.astype(weight.dtype)


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
    equal splits). docs/optimizer-state.md#learning-rate-multipliers: Adam's learning rate for it times `c` keeps
    the first steps after growth on the small model's trajectory. Under
    unequal copy counts `c` differs from element to element: a `GrowthError`."""
    if not _even(axes):
        raise GrowthError(
            "Under a non-integer factor each element of a grown tensor has its own scale: "
            "no one scale c describes the tensor (docs/non-integer.md, docs/optimizer-state.md#learning-rate-multipliers)."
        )
    c = 1.0
    for spec in axes:
        if spec is not None:
            space, role = spec
            c *= space.scale if role == OUT else 1.0 / (space.scale * space.factor)
    return c


def copy_count(axes):
    """K: how many copies of each source element the grown tensor holds."""
    return int(np.prod([spec[0].factor for spec in axes if spec is not None]))


def first_copies(axes, shape):
    """Per axis of a small-model tensor of `shape`, a 0/1 vector over the
    grown axis: 1 at the first copy of each source index, 0 at the others
    (None where the axis does not grow). Their product marks the grown
    tensor's original slice; the rest are new copies."""
    _check_axes(np.broadcast_to(np.int8(0), shape), axes)
    vectors = []
    for spec, n in zip(axes, shape):
        if spec is None or spec[0].factor == 1:
            vectors.append(None)
            continue
        source = spec[0].source(n)
        first = np.zeros(len(source))
        first[np.unique(source, return_index=True)[1]] = 1.0
        vectors.append(first)
    return vectors


def outer_product(vectors, ndim):
    """The product of per-axis vectors (None: 1 along that axis), shaped to
    broadcast over an `ndim`-d tensor: `first_copies`' vectors give the
    original slice's 0/1 mask."""
    result = np.ones([1] * ndim)
    for axis, vector in enumerate(vectors):
        if vector is not None:
            result = result * _along(vector, axis, ndim)
    return result


def expand_gradient_like(value, axes, power=1):
    """An optimizer slot grown with its weight (docs/optimizer-state.md#growing-the-moments).

    With equal splits the grown weight's gradient is the source's copied and
    multiplied, along each axis, by `s_i` where the weight reads the space
    (`IN`) and by `1/(c_i·s_i)` where it writes it (`OUT`), `c_i` the number
    of copies: with equal copies, `1/(c·K)` in all (`growth_scale`,
    `copy_count`). First moments (`power=1`) grow like that, second moments
    (`power=2`) like its square.
    """
    value = np.asarray(value)
    _check_axes(value, axes)
    if _even(axes):
        result = value.astype(np.float64) * (1.0 / (growth_scale(axes) * copy_count(axes))) ** power
        return _copy(result.astype(value.dtype), axes)
    result = value.astype(np.float64)
    for axis, spec in enumerate(axes):
        if spec is not None:
            space, role = spec
            n = result.shape[axis]
            result = np.take(result, space.source(n), axis=axis)
            scales = space.scales(n)
            factor = scales if role == IN else 1.0 / (space.copies(n) * scales)
            result = result * _along(factor, axis, result.ndim) ** power
    return result.astype(value.dtype)


def spread_variance_factor(axes, shape, spread):
    """How much larger, in mean square, the gradients of a tensor that writes
    a split space are than the equal-split rule says: `1 + spread²·(c − 1)/(3c)`
    along each `OUT` axis with `c` copies (1 where a coordinate has one copy),
    the larger where a tensor writes two such axes, 1 without one. The readers
    of a copy sum the downstream signals through their own `α`, whose centred
    draw has variance `(c − 1)/(3c)` (`spread_weights`); for signals that do
    not line up this adds `spread²` times that variance to each copy's mean
    square (docs/optimizer-state.md#under-a-spread). An array that broadcasts
    over the grown tensor of a small tensor of `shape`, or 1.0."""
    _check_axes(np.broadcast_to(np.int8(0), shape), axes)
    factor = 1.0
    if spread == 0.0:
        return factor
    for axis, (spec, n) in enumerate(zip(axes, shape)):
        if spec is None or spec[1] != OUT or spec[0].factor == 1:
            continue
        copies = spec[0].copies(n).astype(np.float64)
        along = _along(1.0 + spread**2 * (copies - 1.0) / (3.0 * copies), axis, len(shape))
        factor = np.maximum(factor, along)
    return factor


class GrowthError(ValueError):
    """A model that kwiden cannot grow exactly, or a grown model that is not exact."""


POSITIVELY_HOMOGENEOUS = (None, "linear", "relu", "leaky_relu")
ELEMENTWISE = POSITIVELY_HOMOGENEOUS + (
    "celu", "elu", "exponential", "gelu", "gelu_tanh", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh",
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
