"""Stage 1 of `grow`: the growth options, declared once (`GrowthArguments`,
`kwiden.arguments`), and `resolve`, which checks them into one `GrowthOptions`.

`GrowthArguments` is the one declaration of what a growth can be asked: each
field an option, with its default, kind, allowed values, one line of help, its
`kwiden grow` flag (or none), and which entry points take it (`takers`):
`kwiden.grow` (a model in memory), `kwiden.grow_checkpoint` (a Hugging Face
folder grown tensor by tensor) or both, where an entry point's default is its
own (`own`) for the reason `why` says. From it come `resolve`'s names and
defaults, the `kwiden grow` command's flags and their `--help` (`kwiden.cli`),
what the `--grow` spec's values are (`kwiden.training.recipe`) and the
arguments a `GrowthSchedule` may set (`kwiden.training.schedule`); `grow`'s and
`grow_checkpoint`'s signatures spell the same names and defaults so that
readers and IDEs see them, and tests/test_architecture.py fails when they part
from `GrowthArguments`.
"""

import dataclasses
import fractions

import numpy as np

from kwiden import arguments as declared
from kwiden.arguments import is_count, option
from kwiden.checkpoints.safetensors import MAX_SHARD_SIZE
from kwiden.growth.expansion import HEAD_MODES, ROPE_MODES, Growth
from kwiden.growth.optimizer import DEFAULT_RELAX, DEFAULT_STATE, STATES
from kwiden.growth.plan import hidden_size_of, intermediate_size_of
from kwiden.growth.verify import check_inputs

# What depth growth's new blocks are: the block with its residual branches ending in zeros (exact), the
# whole block again (G_stack, arXiv 2405.15319), or a newly initialised block (Bu, arXiv 2511.04981).
NEW_BLOCKS = ("identity", "copy", "fresh")

# Beyond this, unequal splits cancel in float32 and the grown model is no longer
# exact (measured on a BERT: 9e-7 at 100, 7e-5 at 1e4).
MAX_SPREAD = 100.0
# The options `resolve` leaves to others: the inputs `check` compares on (a switch to the command;
# `verify.check_inputs` checks them) and the optimizer (`growth.optimizer`).
CHECKED_ELSEWHERE = ("check", "optimizer")

# The entry points that take growth options.
GROW = "grow"  # kwiden.grow: a model in memory
CHECKPOINT = "grow_checkpoint"  # kwiden.grow_checkpoint: a Hugging Face folder, tensor by tensor
# What each is for, as `kwiden grow` (kwiden.grow for a .keras file, kwiden.grow_checkpoint for a folder) says it.
WHERE = {GROW: ".keras models", CHECKPOINT: "folders"}
IN_MEMORY, FOLDER = (GROW,), (CHECKPOINT,)


@dataclasses.dataclass(frozen=True)
class GrowthArguments:
    """The options of `kwiden.grow` and `kwiden.grow_checkpoint` (each takes
    those whose `takers` name it, in this order), and the `kwiden grow` flags."""

    k: object = option(None, "width factor k (2 doubles; 4/3 is 384 -> 512)", "factor", 1, flag="--factor")
    check: object = option(None, "verify on random inputs; do not save if not exact", "switch", takers=IN_MEMORY,
                           command=False, why="kwiden.grow compares on the inputs given; the command, a switch, on "
                           "random inputs (verify.sample_inputs)")  # fmt: skip
    rtol: float = option(None, "relative error --check accepts (default: 1e-5 in float32)", "positive",
                         takers=IN_MEMORY)  # fmt: skip
    ffn_factor: object = option(None, "the FFN width's own factor (default: --factor)", "factor", 1)
    # kwiden.grow widens each head, exact for every family (rotary ones with rope="exact", their frequencies copied
    # pair-wise); a folder's config.json can say only head_dim and rope_theta, so a LLaMA, Mistral or Qwen2 grown
    # there must keep both, as growing the number of heads does (models.hf.refuse_copied_rotary). The command
    # leaves it to the function it calls.
    heads: str = option("size", "grow head size or head count", "choice", choices=HEAD_MODES, own={CHECKPOINT: "count"},
                        command=None, why="count keeps head_dim and the RoPE schedule, which LLaMA's, Mistral's and "
                        "Qwen2's config.json need")  # fmt: skip
    rope: str = option("exact", "rotary frequencies when heads grow", "choice", choices=ROPE_MODES)
    spread: float = option(2.0, "exact symmetry breaking, of order 1; 0: plain copies; larger than 100, the splits "
                           "cancel in float32", "weight", most=MAX_SPREAD)  # fmt: skip
    seed: int = option(None, "seed of the random splits (and of --check's inputs)", "count", 0, command=0,
                       why="the same command writes the same model; kwiden.grow's None draws the splits afresh")  # fmt: skip
    optimizer: object = option(None, "the small model's optimizer, grown with the model", "object",
                               takers=IN_MEMORY, flag=False)  # fmt: skip
    scale_learning_rates: bool = option(None, "growth scales as learning-rate multipliers (None: where each tensor "
                                        "has one)", "switch", takers=IN_MEMORY, flag=False)  # fmt: skip
    relax_learning_rates: int = option(DEFAULT_RELAX, "updates over which the width-aware rates move to one rate; 0: "
                                       "they hold", "count", 0, takers=IN_MEMORY, flag=False)  # fmt: skip
    optimizer_state: str = option(DEFAULT_STATE, "what the grown optimizer slots hold", "choice", choices=STATES,
                                  takers=IN_MEMORY, flag=False)  # fmt: skip
    rewarm: int = option(0, "updates over which the new copies' learning rate climbs", "count", 0, takers=IN_MEMORY,
                         flag=False)  # fmt: skip
    depth: int = option(None, "multiply the number of Transformer blocks", "count", 1)
    new_blocks: str = option("identity", "new blocks: identity (exact), copy (whole copies, G_stack) or fresh (newly "
                             "initialised): both approximate", "choice", choices=NEW_BLOCKS, takers=IN_MEMORY,
                             flag=False)  # fmt: skip
    num_layers: int = option(None, "make the number of Transformer blocks this", "count", 1)
    allow_approximate: bool = option(False, "accept growth that is not exact (reported)", "switch")
    hidden_size: int = option(None, "target hidden size instead of --factor", "count", 1)
    intermediate_size: int = option(None, "target FFN width instead of --ffn-factor", "count", 1)
    # Python takes "float64" too (streaming.DTYPES); the command offers the dtypes checkpoints are shared in.
    dtype: str = option(None, "the grown tensors' dtype (default: the source's)", "choice",
                        choices=("float32", "bfloat16", "float16"), takers=FOLDER)  # fmt: skip
    max_shard_size: str = option(MAX_SHARD_SIZE, "the largest weight file", takers=FOLDER)
    model: str = option(None, "the model family, where config.json's model_type does not name it", takers=FOLDER,
                        flag=False)  # fmt: skip
    allow_nonfinite: bool = option(False, "grow tensors with NaN or infinite values", "switch", takers=FOLDER,
                                   flag=False)  # fmt: skip
    progress: bool = option(False, "show a progress bar (bytes written)", "switch", takers=FOLDER, flag=False,
                            command=True, why="a command growing a folder shows how far it is")  # fmt: skip


def taken_by(entry):
    """The options `entry` (GROW or CHECKPOINT) takes, in its signature's order: the fields of `GrowthArguments`."""
    return declared.taken_by(GrowthArguments, entry)


def names(entry):
    return tuple(field.name for field in taken_by(entry))


def defaults(entry):
    """`{name: default}` of the options `entry` takes, its own defaults where it has them."""
    return {field.name: declared.default_in(field, entry) for field in taken_by(entry)}


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
