"""Stage 1 of `grow`: resolve its arguments into one `GrowthOptions`."""

import dataclasses
import fractions

import numpy as np

from kwiden.expansion import Growth
from kwiden.growth.optimizer import STATES
from kwiden.growth.plan import hidden_size_of, intermediate_size_of
from kwiden.verify import check_inputs


@dataclasses.dataclass
class GrowthOptions:
    """Everything `grow` was asked to do, checked."""

    growth: Growth  # the defaults below are grow's
    spread: float = 3.0
    seed: int | None = None
    depth: int | None = None
    num_layers: int | None = None
    check: object = None
    rtol: float | None = None
    optimizer: object = None
    scale_learning_rates: bool = False
    optimizer_state: str = "source"
    rewarm: int = 0

    @property
    def deepening(self):
        return self.depth is not None or self.num_layers is not None

    def __post_init__(self):
        # `seed=None` draws the seed once: every weight's generator derives from it (`transfer.weight_rng`).
        self.entropy = np.random.SeedSequence().entropy if self.seed is None else int(self.seed)

    def rng(self):
        return np.random.default_rng(self.entropy)


def resolve(model, k, ffn_factor, heads, rope, allow_approximate, hidden_size, intermediate_size, **rest):
    """`GrowthOptions` from `grow`'s arguments."""
    if k is None and hidden_size is None and (rest.get("depth") is not None or rest.get("num_layers") is not None):
        k = 1  # depth alone
    k, ffn_factor = _factors(model, k, ffn_factor, hidden_size, intermediate_size)
    options = GrowthOptions(Growth(k, ffn_factor, heads, rope, allow_approximate), **rest)
    _check_spread(options.spread)
    _check_optimizer_options(options)
    if options.check is not None:
        check_inputs(model, options.check, "check")
    return options


# Beyond this, unequal splits cancel in float32 and the grown model is no longer
# exact (measured on a BERT: 9e-7 at 100, 7e-5 at 1e4).
MAX_SPREAD = 100.0


def _check_spread(spread):
    if isinstance(spread, bool) or not isinstance(spread, (int, float, np.integer, np.floating)):
        raise ValueError(f"`spread` must be a number in [0, {MAX_SPREAD:g}] (0: plain copies), got spread={spread!r}.")
    if not 0 <= spread <= MAX_SPREAD:  # NaN fails both
        raise ValueError(
            f"`spread` must be a number in [0, {MAX_SPREAD:g}] (0: plain copies; values of order 1 are where to "
            f"start), got spread={spread!r}: larger splits cancel in float32 and the grown model would not be exact."
        )


def _check_optimizer_options(options):
    if options.optimizer_state not in STATES:
        raise ValueError(
            f"`optimizer_state` must be one of {', '.join(map(repr, STATES))}, got optimizer_state={options.optimizer_state!r}."
        )
    rewarm = options.rewarm
    if isinstance(rewarm, bool) or not isinstance(rewarm, (int, np.integer)) or rewarm < 0:
        raise ValueError(f"`rewarm` must be an integer >= 0 (updates; 0: none), got rewarm={rewarm!r}.")
    options.rewarm = int(rewarm)
    if options.optimizer is None and (options.rewarm or options.optimizer_state != "source"):
        given = f"rewarm={options.rewarm}" if options.rewarm else f"optimizer_state={options.optimizer_state!r}"
        raise ValueError(
            f"`{given}` says how to grow an optimizer, and none was given: pass the small model's "
            "optimizer (optimizer=small.optimizer)."
        )


def _factors(model, k, ffn_factor, hidden_size, intermediate_size):
    """`(k, ffn_factor)` from factors or from target sizes."""
    if hidden_size is not None:
        if k is not None:
            raise ValueError("Pass `k` (a factor) or `hidden_size` (a target size), not both.")
        k = _target_ratio(hidden_size, hidden_size_of(model), "hidden_size")
    if k is None and intermediate_size is not None:
        k = 1  # the feed-forward width alone
    if k is None:
        raise ValueError(
            "kwiden.grow needs `k` (2 doubles the width), a target `hidden_size`, or `depth`/`num_layers` alone."
        )
    if intermediate_size is not None:
        if ffn_factor is not None:
            raise ValueError("Pass `ffn_factor` or `intermediate_size` (a target size), not both.")
        ffn_factor = _target_ratio(intermediate_size, intermediate_size_of(model), "intermediate_size")
    return k, ffn_factor


def _target_ratio(target, size, name):
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or target < size:
        raise ValueError(f"`{name}` must be an integer >= the model's {size}, got {name}={target!r}.")
    return fractions.Fraction(int(target), size)
