"""Stage 1 of `grow`: `resolve` checks the growth options (declared once in
`kwiden.growth.arguments.GrowthArguments`) into one `GrowthOptions`."""

import dataclasses
import fractions

import numpy as np

from kwiden import arguments as declared
from kwiden.arguments import is_count
from kwiden.growth.arguments import CHECKED_ELSEWHERE, DEFAULT_RELAX, DEFAULT_STATE, GROW, defaults, names, taken_by
from kwiden.growth.expansion import Growth
from kwiden.growth.plan import hidden_size_of, intermediate_size_of
from kwiden.growth.verify import check_inputs


@dataclasses.dataclass
class GrowthOptions:
    """Everything `grow` was asked to do, checked (`resolve`)."""

    growth: Growth  # k, ffn_factor, heads, rope, allow_approximate
    spread: float
    seed: int | None
    depth: int | None
    num_layers: int | None
    check: object
    rtol: float | None
    optimizer: object
    scale_learning_rates: bool | None
    relax_learning_rates: int
    optimizer_state: str
    rewarm: int
    new_blocks: str

    @property
    def deepening(self):
        return self.depth is not None or self.num_layers is not None

    def __post_init__(self):
        # `seed=None` draws the seed once: every weight's generator derives from it (`transfer.weight_rng`).
        self.entropy = np.random.SeedSequence().entropy if self.seed is None else int(self.seed)

    def rng(self):
        return np.random.default_rng(self.entropy)


def resolve(model, **given):
    """`GrowthOptions` from `kwiden.grow`'s options, by name; those not
    given take `grow`'s defaults (`GrowthArguments`)."""
    unknown = sorted(set(given) - set(names(GROW)))
    if unknown:
        raise TypeError(f"resolve() got {unknown[0]!r}, no option of kwiden.grow's: {', '.join(names(GROW))}.")
    rest = {name: given.get(name, default) for name, default in defaults(GROW).items()}
    fields = [field for field in taken_by(GROW) if field.name not in CHECKED_ELSEWHERE]
    rest.update(declared.checked(fields, {f.name: rest[f.name] for f in fields}, declared.keyword_refusal))
    k, ffn_factor = rest.pop("k"), rest.pop("ffn_factor")
    hidden_size, intermediate_size = rest.pop("hidden_size"), rest.pop("intermediate_size")
    if k is None and hidden_size is None and (rest["depth"] is not None or rest["num_layers"] is not None):
        k = 1  # depth alone
    k, ffn_factor = _factors(model, k, ffn_factor, hidden_size, intermediate_size)
    growth = Growth(k, ffn_factor, rest.pop("heads"), rest.pop("rope"), rest.pop("allow_approximate"))
    options = GrowthOptions(growth, **rest)
    _check_optimizer_options(options)
    _check_new_blocks(options)
    if options.check is not None:
        check_inputs(model, options.check, "check")
    return options


def _check_new_blocks(options):
    if options.new_blocks != "identity" and not options.growth.allow_approximate:
        raise ValueError(
            f"new_blocks={options.new_blocks!r} adds blocks that change the function: pass allow_approximate=True "
            "to accept that (the check then measures by how much), or keep new_blocks='identity', which is exact."
        )


def _check_optimizer_options(options):
    if options.scale_learning_rates is False and options.relax_learning_rates not in (0, DEFAULT_RELAX):
        raise ValueError(
            f"`relax_learning_rates={options.relax_learning_rates}` relaxes width-aware learning rates, and "
            "scale_learning_rates=False gives none: leave scale_learning_rates at None, or drop relax_learning_rates."
        )
    if options.optimizer is None and (options.rewarm or options.optimizer_state != DEFAULT_STATE):
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
    if not is_count(target, size):
        raise ValueError(f"`{name}` must be an integer >= the model's {size}, got {name}={target!r}.")
    return fractions.Fraction(int(target), size)
