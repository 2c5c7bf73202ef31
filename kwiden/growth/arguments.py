"""The growth options, declared once: `GrowthArguments` (`kwiden.arguments`
fields), which `kwiden.growth.options.resolve` checks into one `GrowthOptions`.

Each field is an option, with its default, kind, allowed values, one line of
help, its `kwiden grow` flag (or none), and which entry points take it
(`takers`): `kwiden.grow` (a model in memory), `kwiden.grow_checkpoint` (a
Hugging Face folder grown tensor by tensor) or both, where an entry point's
default is its own (`own`) for the reason `why` says. From it come `resolve`'s
names and defaults, the `kwiden grow` command's flags and their `--help`
(`kwiden.cli`), what the `--grow` spec's values are (`kwiden.training.recipe`)
and the arguments a `GrowthSchedule` may set (`kwiden.training.schedule`);
`grow`'s and `grow_checkpoint`'s signatures spell the same names and defaults
so that readers and IDEs see them, and tests/test_architecture.py fails when
they part from `GrowthArguments`. Declarations only: the command line reads
them without importing Keras.
"""

import dataclasses

from kwiden import arguments as declared
from kwiden.arguments import option
from kwiden.checkpoints.safetensors import MAX_SHARD_SIZE
from kwiden.growth.expansion import HEAD_MODES, ROPE_MODES

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

# What the grown slots hold (docs/optimizer-state.md#asymmetric-state).
STATES = ("grown", "grown_v", "source", "zero")
# grow's: the second moments say how large the first steps on the new copies and blocks are, and with the
# first moments at zero they climb from small ones, so the loss does not jump after growth under any schedule
# (docs/growth-that-pays.md#no-spike; "source" jumped after a late growth).
DEFAULT_STATE = "grown_v"
DEFAULT_RELAX = 1000  # updates: 1/(1 - β₂) for Adam's default β₂


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
