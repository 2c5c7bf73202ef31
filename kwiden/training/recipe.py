"""Which models a pretraining run trains and when it grows them: the `--grow`
spec (`auto`, `none`, or "0.33:k=2 0.67:depth=2"), the small model's config
found from the target's by undoing the growths, and the updates of each stage
chosen so that every run spends the FLOPs the target would on `--budget`
updates from scratch."""

import argparse
import dataclasses
import fractions
import functools
import json
import math
from importlib import resources

from kwiden import arguments as declared
from kwiden.growth.arguments import GROW, taken_by

# What `auto` does, chosen from the sweep of benchmarks/grow_vs_scratch.py (docs/growth-that-pays.md#the-sweep):
# grow once, late, at 80% of the run's updates (the small model takes the cheap updates, the target the last,
# decaying ones); depth ×2 where it is exact (Pre-LN), which ended lowest, else width ×2 with grow's defaults
# (width-aware rates: each grown tensor's step scaled by its growth, as μP scales rates with width, without which
# the loss rose after a late width growth; splits of spread 2: at the highest stable rate, spread 3 made BERT's loss
# rise for a few dozen updates after the growth, by up to 0.13, docs/growth-that-pays.md#no-spike; second moments
# grown, first moments at zero), but with the width-aware rates held to the end, as measured, not relaxed. They are
# asked for as None, grow's default, not True: kwiden's optimizers get them, and Keras' own, which have one rate
# (`fit_growing` trains with those too), train on with it instead of stopping at the growth.
AUTO_FRACTION = 0.8
AUTO_DEPTH = dict(depth=2)
AUTO_WIDTH = dict(k=2, scale_learning_rates=None, spread=2.0, relax_learning_rates=0)
# A target more than this factor from the compute-optimal tokens per parameter is called larger or smaller than
# compute-optimal (the loss is flat near the optimum: within a factor of 2 in tokens, √2 in size, it is "about").
OPTIMAL_WITHIN = 2
# What benchmarks/grow_vs_scratch.py measured (docs/growth-that-pays.md#the-protocol-table), by the budget's tokens
# per parameter of the target, is data shipped beside the code (`measured_table`).
MEASURED_FILE = "growth_protocol.json"  # in kwiden/data
# Arguments that set a size outright: the small model cannot be found from them.
ABSOLUTE = ("hidden_size", "intermediate_size", "num_layers")
# Arguments the trainer gives grow itself.
TRAINER_GIVES = ("optimizer", "check")


@dataclasses.dataclass(frozen=True)
class ScheduledGrowth:
    """A growth during training: after `fraction` of the run's updates (at
    `update`, once `place` has placed it), `kwiden.grow(**arguments)`."""

    fraction: float  # of the run's updates done before it
    arguments: dict  # kwiden.grow's
    update: int = None  # set by `place`


def parse(spec):
    """`"auto"`, `"none"`, or a list of `ScheduledGrowth` from "FRACTION:ARG=VALUE,ARG=VALUE FRACTION:…"."""
    spec = spec.strip() if isinstance(spec, str) else spec
    if spec in ("auto", "none"):
        return spec
    if not isinstance(spec, str) or not spec:
        raise ValueError(f'--grow takes auto, none, or growths such as "0.33:k=2 0.67:depth=2"; got {spec!r}.')
    options = {field.name: field for field in taken_by(GROW) if field.name not in TRAINER_GIVES}
    growths = []
    for item in spec.split():
        fraction_text, colon, pairs_text = item.partition(":")
        if not colon or not pairs_text:
            raise ValueError(f'--grow {spec!r}: {item!r} is not FRACTION:ARG=VALUE (e.g. "0.5:k=2").')
        try:
            fraction = float(fractions.Fraction(fraction_text))
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"--grow {spec!r}: {fraction_text!r} is not a fraction of the run such as 0.5.") from None
        if not 0 < fraction < 1:
            raise ValueError(
                f"--grow {spec!r}: growth points are fractions of the run's updates, between 0 and 1; got {fraction_text}."
            )
        arguments = {}
        for pair in pairs_text.split(","):
            name, equals, value = pair.partition("=")
            if name in ABSOLUTE:
                raise ValueError(
                    f"--grow {spec!r}: {name}= sets a size outright; give factors (k=, ffn_factor=, depth=), from "
                    "which kwiden finds the small model's config by undoing them from the target's."
                )
            if name in arguments:
                raise ValueError(f"--grow {spec!r}: {name} is given twice in {item!r}.")
            if not equals or name not in options:
                raise ValueError(
                    f"--grow {spec!r}: {pair!r} is not one of kwiden.grow's arguments NAME=VALUE ({', '.join(n for n in options if n not in ABSOLUTE)})."
                )
            arguments[name] = _value(options[name], value, spec)
        _check_growing(arguments, item, spec)
        growths.append(ScheduledGrowth(fraction, arguments))
    fractions_given = [g.fraction for g in growths]
    if fractions_given != sorted(set(fractions_given)):
        raise ValueError(f"--grow {spec!r}: growth points must be strictly increasing, got {fractions_given}.")
    return growths


# The arguments that make a model bigger; each a factor of at least 1.
FACTORS = ("k", "ffn_factor", "depth")


def _check_growing(arguments, item, spec):
    """Refuse a factor below 1, and a growth in which nothing grows (it would change the run for nothing)."""
    for name in FACTORS:
        if name in arguments and not arguments[name] >= 1:
            raise ValueError(
                f"--grow {spec!r}: {name}={arguments[name]} in {item!r}: a factor must be at least 1 (2 doubles)."
            )
    if all(arguments.get(name, 1) == 1 for name in FACTORS):
        raise ValueError(
            f"--grow {spec!r}: nothing grows in {item!r} ({', '.join(FACTORS)} are 1): give a factor above 1 "
            "(such as k=2 or depth=2), or leave the growth out."
        )


def _value(option, text, spec):
    """`text`, the value of `option` (a field of `growth.arguments.GrowthArguments`), read as its kind."""
    kind, choices = option.metadata["kind"], option.metadata["choices"]
    if kind == "switch":
        if text not in ("True", "False", "true", "false", "1", "0"):
            raise ValueError(f"--grow {spec!r}: {option.name}={text} is not True or False.")
        return text in ("True", "true", "1")
    try:
        value = declared.reader(option)(text)
    except (ValueError, ZeroDivisionError, argparse.ArgumentTypeError):
        kind = "an integer" if kind == "count" else "a fraction" if kind == "factor" else "a number"
        raise ValueError(f"--grow {spec!r}: {option.name}={text} is not {kind}.") from None
    if choices is not None and value not in choices:
        raise ValueError(f"--grow {spec!r}: {option.name}={text}; it takes {', '.join(map(str, choices))}.")
    if isinstance(value, fractions.Fraction) and value.denominator == 1:
        value = int(value)
    return value


def auto(target_config):
    """`(growths, why)`: the growths `--grow auto` makes for this target (a
    complete config, `Family.config`'s): depth ×2 late for Pre-LN targets of
    an even number of blocks (exact), width ×2 late otherwise (exact for every
    family), none where neither halves."""
    post_ln = target_config.get("residual") == "post_ln"  # whose depth growth is not exact
    heads = target_config["num_attention_heads"]
    hidden = target_config["hidden_size"]
    layers = target_config["num_hidden_layers"]
    when = f"at {AUTO_FRACTION:.0%} of the updates"
    if not post_ln and layers % 2 == 0:
        return [ScheduledGrowth(AUTO_FRACTION, dict(AUTO_DEPTH))], (
            f"depth ×2 {when}, from {layers // 2} block{'s' * (layers > 2)}: late depth growth ended lowest of the "
            "growth recipes in the sweep, below the target from scratch (docs/growth-that-pays.md#the-sweep)"
        )
    # Rotary heads grow in number: a config.json can say only the standard RoPE schedule of a head size.
    rotary = target_config.get("rotary_base") is not None
    growth = {**AUTO_WIDTH, **({"heads": "count"} if rotary else {})}
    try:
        undone(target_config, [ScheduledGrowth(AUTO_FRACTION, growth)])
    except ValueError:
        return [], (
            f"none: the target (width {hidden}, {heads} heads, {layers} blocks) halves in neither width nor "
            f"depth{' (Post-LN: depth growth is not exact)' if post_ln else ''}"
        )
    more_heads = f", heads ×2 ({heads // 2} → {heads}, rotary)" if rotary else ""
    reason = "Post-LN, whose depth growth is not exact" if post_ln else f"{layers} blocks do not halve"
    return [ScheduledGrowth(AUTO_FRACTION, growth)], (
        f"width ×2 {when}, from a {hidden // 2}-wide model{more_heads}, with width-aware learning rates held "
        f"to the end and splits of spread {AUTO_WIDTH['spread']:g} ({reason}; docs/growth-that-pays.md#the-sweep, #no-spike)"
    )


def advice(parameters, tokens, flops, continued=False, tokenizer=None, tokens_per_update=None):
    """What `--budget` means for the target: its tokens per parameter against
    the compute-optimal ratio (`compute_optimal`: measured here for byte-level
    models up to the largest budget swept, at the nearest `tokens_per_update`
    measured, a range beyond, Chinchilla's 20 for other tokenizers; a factor of
    2 either side is "about"), the size that
    would be compute-optimal (C = 6·N·D, D = ratio·N), and what the measured
    table says growth does there. For a `continued` run (`--from` a pretrained
    model) none of that applies: its pretraining is not in the budget; it gets
    what was measured for growing a trained model first instead
    (`measured_reuse`).

    >>> print(advice(1_000_000, 2_000_000, 1.2e13, continued=True).split(". ")[0])
    the budget is 2,000,000 tokens, 2.0 a parameter of the target (1,000,000 parameters), on top of the pretraining of the --from model, which it does not count: the compute-optimal size and the measured table apply to runs from scratch, not to this one

    >>> print(advice(1_000_000, 2_000_000, 6 * 1_000_000 * 2_000_000).split(". ")[0])
    the budget is 2.0 tokens per parameter of the target (1,000,000 parameters): the target is larger than compute-optimal
    """
    ratio = tokens / parameters
    if continued:
        return (
            f"the budget is {tokens:,} tokens, {ratio:.1f} a parameter of the target ({parameters:,} parameters), on top "
            "of the pretraining of the --from model, which it does not count: the compute-optimal size and the "
            f"measured table apply to runs from scratch, not to this one. {measured_reuse()}"
        )
    low, high, source = compute_optimal(flops, tokenizer, tokens_per_update)
    text = f"the budget is {ratio:.1f} tokens per parameter of the target ({parameters:,} parameters)"
    if ratio < low / OPTIMAL_WITHIN:
        text += (
            ": the target is larger than compute-optimal. For the lowest loss on this compute, train a smaller target "
            "or give a larger --budget."
        )
    elif ratio > high * OPTIMAL_WITHIN:
        text += ": the target is smaller than compute-optimal; a larger one would reach a lower loss on this compute."
    else:
        text += ": the target is about compute-optimal for the budget."
    size = {r: f"{math.sqrt(flops / (6 * r)):,.0f}" for r in (low, high)}  # the more tokens, the smaller the model
    ratios, sizes = (
        (f"about {low:g}", f"about {size[low]}")
        if low == high
        else (f"{low:g} to {high:g}", f"{size[low]} to {size[high]}")
    )
    return (
        f"{text} The compute-optimal ratio is {ratios} tokens per parameter, {sizes} parameters for these FLOPs "
        f"({source}). {measured(ratio)}"
    )


def compute_optimal(flops, tokenizer=None, tokens_per_update=None):
    """`(low, high, where they come from)`: the compute-optimal tokens per parameter for a run of `flops` training
    FLOPs with a tokenizer of this kind (`Tokenizer.kind`: "bytes", "wordpiece", "json") and `tokens_per_update`.

    For bytes up to the largest budget benchmarks/isoflop.py swept, the ratio it measured at the tokens an update
    nearest the run's (at this scale a larger batch favours a smaller model: a model must make enough updates),
    or the range of those measured where the run's are not said. For bytes beyond, a range whose high end stays
    there and whose low end falls to Chinchilla's 20 (Hoffmann et al. 2022) at the smallest budget they measured,
    log-linearly in FLOPs: an assumption, the scales between are not measured. For other tokenizers, Chinchilla's,
    not measured here.

    >>> compute_optimal(1e12, "bytes", 1024)[:2], compute_optimal(1e12, "bytes", 4096)[:2]
    ((70, 70), (170, 170))
    >>> compute_optimal(1e14, "bytes", 4096)[:2], compute_optimal(1e20, "bytes", 4096)[:2]
    ((83, 170), (20, 170))
    >>> compute_optimal(1e12, "bytes")[:2]  # no batch said: those measured
    (70, 170)
    >>> compute_optimal(1e12, "wordpiece", 4096)[:2], compute_optimal(1e12)[:2]  # not measured, or not said
    ((20, 20), (20, 20))
    """
    figures = _measured()["compute_optimal"]
    chinchilla = figures["chinchilla"]
    if tokenizer != figures["measured_for"]["tokenizer"]:
        return chinchilla["tokens_per_parameter"], chinchilla["tokens_per_parameter"], chinchilla["says"]
    sweeps = figures["measured"]
    if tokens_per_update is not None and tokens_per_update > 0:
        sweeps = [min(sweeps, key=lambda sweep: abs(math.log(sweep["tokens_per_update"] / tokens_per_update)))]
    low, high = (f(sweep["tokens_per_parameter"] for sweep in sweeps) for f in (min, max))
    says = "; ".join(sweep["says"] for sweep in sweeps)
    edge = figures["measured_for"]["flops_up_to"]
    if flops <= edge:
        return low, high, says
    # How far from the sweep's largest budget to Chinchilla's smallest, in log FLOPs.
    way = min(1.0, math.log(flops / edge) / math.log(chinchilla["from_flops"] / edge))
    low = round(math.exp((1 - way) * math.log(low) + way * math.log(chinchilla["tokens_per_parameter"])))
    return low, high, f"{figures['beyond']['says']}: {says}"


def measured(ratio):
    """What the measured table says at `ratio` tokens per parameter of the target."""
    return next(says for up_to, says in measured_table() if ratio <= up_to)


@functools.cache
def measured_table():
    """`((up to this ratio, what the table says), …)` from kwiden/data/growth_protocol.json, read once: each entry
    for the ratios above the previous one's, the last (`up_to` null there) for any ratio beyond."""
    entries = _measured()["measured"]
    return tuple((math.inf if entry["up_to"] is None else entry["up_to"], entry["says"]) for entry in entries)


def measured_reuse():
    """What benchmarks/reuse.py measured for a model that is already trained: grown first, or trained on."""
    return _measured()["reuse"]["says"]


@functools.cache
def _measured():
    return json.loads(resources.files("kwiden").joinpath("data", MEASURED_FILE).read_text(encoding="utf-8"))


def undone(config, growths):
    """The config (complete, `Family.config`'s) of the model the growths
    start from: the target's with each growth undone (last first); a growth the target's sizes do not divide is
    refused, naming it."""
    config = dict(config)
    for growth in reversed(growths):
        config = _undo(config, growth)
    return config


def _undo(config, growth):
    arguments = growth.arguments
    k = fractions.Fraction(arguments.get("k") or 1)
    ffn = fractions.Fraction(arguments.get("ffn_factor") or k)
    depth = arguments.get("depth") or 1
    heads_mode = arguments.get("heads", "size")
    smaller = dict(config)

    def divide(key, factor):
        if key not in config:
            return
        value = fractions.Fraction(config[key]) / factor
        if value.denominator != 1 or value < 1:
            raise ValueError(
                f"--grow: the growth at {growth.fraction:g} ({arguments_text(arguments)}) would need a smaller model with "
                f"{key} {config[key]} / {factor} = {float(value):.3g}; the target's {key} must divide by it. Choose "
                "factors the target's sizes divide by, or another target."
            )
        smaller[key] = int(value)

    divide("hidden_size", k)
    divide("intermediate_size", ffn)
    divide("num_hidden_layers", depth)
    if heads_mode == "count":
        divide("num_attention_heads", k)
        divide("num_key_value_heads", k)
    else:
        divide("attention_head_size", k)
    return smaller


def arguments_text(arguments):
    """`kwiden.grow`'s arguments as a `--grow` spec writes them: "k=2, depth=2"."""
    return ", ".join(f"{name}={value}" for name, value in arguments.items())


def place(growths, budget, cost_of_stage, warmup):
    """`(total updates, the growths with their updates)` of a run whose FLOPs
    (`cost_of_stage[i]`: FLOPs of one update of stage i's model) are as close
    as whole updates allow to `budget` updates of the last stage's model,
    never above. Refuses a budget too small for the warmup or for growth
    points one update apart at least."""
    target_cost = cost_of_stage[-1]
    total_flops = budget * target_cost
    bounds = [0.0, *(g.fraction for g in growths), 1.0]
    per_update = sum((bounds[i + 1] - bounds[i]) * cost for i, cost in enumerate(cost_of_stage))
    updates = total_flops / per_update
    placed = []
    for growth in growths:
        placed.append(dataclasses.replace(growth, update=int(round(growth.fraction * updates))))
        if placed[-1].update <= (placed[-2].update if len(placed) > 1 else 0):
            raise ValueError(
                f"--budget {budget} is too small for the growth points: the growth at {growth.fraction:g} of "
                f"{updates:.0f} updates falls at update {placed[-1].update}, with no update before it. Give a larger "
                "--budget, or fewer growths."
            )
    done = placed[-1].update if placed else 0
    spent = flops_spent(done, [g.update for g in placed], cost_of_stage)
    total = done + int((total_flops - spent) // target_cost)
    if total <= done:
        raise ValueError(f"--budget {budget} is too small: nothing is left for the model after its last growth.")
    if warmup >= total:
        raise ValueError(
            f"--budget {budget} is too small for --warmup {warmup}: the run makes {total} updates. Give a larger "
            "--budget or a shorter --warmup."
        )
    return total, placed


def flops_spent(update, growth_updates, cost_of_stage):
    """Training FLOPs of a run's first `update` updates when it grows at
    `growth_updates`, each stage's updates at its own cost (`cost_of_stage[i]`:
    FLOPs of one update of stage i's model).

    >>> flops_spent(10, [4], [1.0, 3.0])  # 4 updates at 1, then 6 at 3
    22.0
    """
    bounds = [0, *growth_updates, math.inf]
    return float(sum(max(0, min(update, bounds[i + 1]) - bounds[i]) * cost for i, cost in enumerate(cost_of_stage)))


def growth_seed(seed, update):
    """The seed of the splits of a run's growth at `update` (`seed`: the run's): one rule for every loop that
    grows during training, so that a run resumed before a growth grows as it would have."""
    return (seed * 100_003 + update) % 2**31
