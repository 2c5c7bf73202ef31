"""Does growth save compute? A byte-level Transformer pretrained from scratch
against the same model grown from a smaller one on the way, at equal compute,
on real text, every run made by `kwiden.pretrain`: the benchmark, `kwiden demo`
and `kwiden pretrain` run one code path.

Two model styles: `--model gpt` (Pre-LN causal LM, next byte) and `--model bert`
(Post-LN masked LM: 15% of the bytes masked, loss on those). Corpora
(`--corpus`, comma-separated): `en`, the Python tutorial shipped with kwiden;
`zh`, Debian's `fortunes-zh` (`chinese`, `song100`, `tang300`; skipped, saying
so, where the package is not installed); `docs`, Debian's `python3-doc` (11 MB
of English, for targets the 256 kB tutorial would repeat too often); or text
files and folders.

Compute is what `kwiden.pretrain` counts: training FLOPs, Kaplan et al.'s
estimate (`kwiden.compute.flops_per_token`), 6·N + 6·L·T·d per token, with the
small models charged at their own cost. Every run gets `--budget` updates of
the target from scratch: a grown run makes more, cheaper updates until it has
spent as much. The benchmark checks that every run of a table spent the
scratch run's FLOPs (to within one update of the target) and that the
scratch run's FLOPs are `flops_per_token` of the target times its tokens.

The protocol, per target size (`--sizes 32x2,64x2`, widths times `--scale`
on a larger machine) and corpus:

1. The baseline: the target from scratch at every schedule of `--schedules`
   (pretrain's `wsd`: warmup, hold, linear decay to 0 over the last
   `--decay-fraction`; `cosine` to a tenth) and peak rate of `--lrs`, on the
   first `--tune-seeds` seeds. While a schedule's best rate sits at an edge of
   those tried, the range is widened (×2 or ÷2, `--widen` times), so the best
   is strictly inside; the table says so where it is not. The best pair is
   then run on every seed, and every other run uses it. `--scratch wsd:4e-3`
   takes a pair tuned before instead.
2. The grown recipes (`--recipes`, `--grow`: `kwiden.pretrain`'s `--grow`
   specs; the `@rewind`, `@rewarm` and `@learned=N` suffixes of earlier
   results named options measured not to pay, since taken out) on every seed
   at the full budget, equal FLOPs (small models charged). For BERT,
   `allow_approximate=True` is added to each depth growth.
3. The saving as a user budgets it: the recipes of `--fraction-recipes`
   (default `auto`) at fractions of the budget (`--fractions`, bisected), the
   smallest fraction whose mean final loss reaches scratch's mean final loss at
   the full budget. Beside it, the first-crossing saving: the FLOPs at which
   the validation curve first reaches each seed's scratch final loss.
4. The small model alone (`auto`'s start, `grow="none"`) for the full
   budget's FLOPs: the grown model must end below it, or it bought only size.
   With `--starts-alone`, so is every other recipe's own start.
5. Jumps: for each grown run, the validation loss 100 updates after a growth
   minus at the growth. With `--controls`, each grown run also gets its
   control: the model it starts from trained on without growing, on the same
   updates, schedule and batches (identical up to the growth); the table then
   gives how far the grown run rose beyond its control over those 100
   updates, which tells a rise the growth caused from the run's own trend.

`--tokens-per-parameter 20` sets each target's budget to that many tokens per
parameter (the compute-optimal regime); the table gives tokens per parameter
and passes over the training text. A protocol table closes the output: one
row per (model, corpus, size), mean ± sd over the seeds.

    python benchmarks/grow_vs_scratch.py --quick                  # about 3 minutes on 2 cores
    python benchmarks/grow_vs_scratch.py --sizes 32x2 --tokens-per-parameter 20 --corpus en,zh
    python benchmarks/grow_vs_scratch.py --model bert --sizes 32x2 --tokens-per-parameter 20 --corpus zh
    python benchmarks/grow_vs_scratch.py --recipes sweep --fraction-recipes "" --seeds 0,1

`--jobs N` runs N trainings at once, each in a process of its own (on a GPU
they share the card); runs that wait on no other's result start together, and
every budget fraction is run instead of bisected. Results do not depend on it.

Each invocation writes its output to `--results` (default
benchmarks/results/grow_vs_scratch.md, or grow_vs_scratch_quick.md with
`--quick`) and a plot per corpus and size beside it.
"""

import argparse
import concurrent.futures
import contextlib
import dataclasses
import gzip
import multiprocessing
import pathlib
import re
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from importlib import resources

import keras
import numpy as np
from common import environment, table

import kwiden
from kwiden import corpus, recipe
from kwiden.compute import flops_per_token
from kwiden.files import replaced_atomically
from kwiden.models import get_family
from kwiden.pretraining.run import default_warmup
from kwiden.pretraining.tokens import corpus_files
from kwiden.pretraining.vocabulary import byte_tokenizer

RESULTS = pathlib.Path(__file__).parent / "results"
SHIPPED = "python_tutorial.txt.gz"
ZH_FILES = ("chinese", "song100", "tang300")
ZH_FOLDERS = ("/usr/share/games/fortunes", "/usr/share/games/fortunes/zh")
DOCS = "/usr/share/doc/python3.11/html/_sources"  # Debian's python3-doc: 11 MB of English
VOCAB = byte_tokenizer().vocab_size

BEFORE = "0.5:k=2,spread=0,optimizer_state=grown,scale_learning_rates=True,relax_learning_rates=0"  # grow's defaults before this benchmark
MAIN = [
    "auto",
    "0.5:k=2",
    "0.67:k=2",
    "0.67:depth=2",
    "0.33:k=2 0.67:depth=2",
    BEFORE,
]
# Each of grow's settings changed alone, and the other arms of the sweep (width x2 at 50% unless said). These
# and SWEEP were measured under grow's former defaults, one rate and spread 3 (`scale_learning_rates=False,
# spread=3`); an arm that names neither now runs the current ones (docs/growth-that-pays.md#the-sweep).
ABLATIONS = [
    "0.5:k=2,spread=0",
    "0.5:k=2,spread=1",
    "0.5:k=2,spread=10",
    "0.5:k=2,optimizer_state=grown",
    "0.5:k=2,optimizer_state=zero",
    "0.5:k=2,scale_learning_rates=True,relax_learning_rates=0",
    "0.5:k=2,optimizer_state=grown,scale_learning_rates=True,relax_learning_rates=0",
    "0.5:k=2,rewarm=100",
    "0.5:k=2,optimizer_state=grown,rewarm=100",
    "0.25:k=2",
    "0.8:k=2",
    "0.5:depth=2",
    "0.67:depth=2,optimizer_state=zero",
    "0.67:depth=2,rewarm=100",
    "0.67:k=2,depth=2",
    "0.67:k=2,depth=2,optimizer_state=grown",
    "0.4:k=2 0.8:depth=2",
    "0.33:k=2 0.67:k=2",
]
# The sweep behind `auto` (docs/growth-that-pays.md): growth time, width vs depth vs both, optimizer state,
# per-slice re-warmup and width-aware rates, new blocks copied whole (G_stack) or newly initialised (Bu), the
# rate after growth rewound or re-warmed, at grow's defaults unless said.
SWEEP = [
    "0.25:k=2",
    "0.5:k=2",
    "0.7:k=2",
    "0.8:k=2",
    "0.9:k=2",
    "0.8:k=2,optimizer_state=grown",
    "0.8:k=2,optimizer_state=source",
    "0.8:k=2,rewarm=100",
    "0.8:k=2,scale_learning_rates=True,relax_learning_rates=0",
    "0.5:depth=2",
    "0.8:depth=2",
    "0.8:k=2,depth=2",
    "0.6:k=2 0.85:depth=2",
    "0.8:depth=2,new_blocks=copy,allow_approximate=True",
    "0.8:depth=2,new_blocks=fresh,allow_approximate=True",
]
GROUPS = {
    "main": MAIN,
    "sweep": SWEEP,
    "ablations": ABLATIONS,
    "all": MAIN + [r for r in ABLATIONS if r not in MAIN],
    "none": [],
}


def pretrain_options(recipe):
    """`(grow spec, pretrain's other options)` of a recipe. The `@rewind`, `@rewarm` and `@learned=N` suffixes of
    earlier results named `after_growth` and `learned_growth`, measured not to pay and taken out of kwiden."""
    if "@" in recipe:
        raise SystemExit(
            f"--grow {recipe!r}: the @ suffixes named --after-growth and --learned-growth, options measured not to "
            "pay and taken out of kwiden (docs/growth-that-pays.md keeps their results)."
        )
    return recipe, {}


@dataclasses.dataclass
class Run:
    """One `kwiden.pretrain` run: its validation curve against FLOPs."""

    label: str
    seed: int
    metrics: list
    flops: float
    updates: int
    wall: float
    error: str = None

    @property
    def final(self):
        return self.metrics[-1]["valid_loss"]

    @property
    def seconds(self):
        """Training seconds, as pretrain counts them (evaluations and saves left out)."""
        return self.metrics[-1]["seconds"]

    def _after_growths(self):
        """For each growth followed by 100 updates: (its row, the evaluations up to 100 updates later as
        (update, loss), the loss 100 updates later, linear between evaluations)."""
        windows = []
        for index, row in enumerate(self.metrics):
            if row.get("grew"):
                later = [r for r in self.metrics[index + 1 :] if r["update"] > row["update"]]
                if later and later[-1]["update"] >= row["update"] + 100:
                    updates = [row["update"]] + [r["update"] for r in later]
                    losses = [row["valid_loss"]] + [r["valid_loss"] for r in later]
                    within = [(u, v) for u, v in zip(updates[1:], losses[1:]) if u <= row["update"] + 100]
                    windows.append((row, within, float(np.interp(row["update"] + 100, updates, losses))))
        return windows

    @property
    def jump(self):
        """The largest rise of the validation loss from a growth to 100 updates later (linear between evaluations)."""
        rises = [at_100 - row["valid_loss"] for row, _, at_100 in self._after_growths()]
        return max(rises) if rises else None

    def against(self, control):
        """`(rise, control's change, gap)` after this run's first growth (the two are one run up to it, and only
        up to it): the rise from the growth to 100 updates later, `control`'s change from this run's loss at the
        growth, and how far apart they were at this run's last evaluation before it (0 when they were one run);
        None where the first growth is not followed by 100 updates."""
        by_update = {r["update"]: r["valid_loss"] for r in control.metrics}
        updates, losses = list(by_update), list(by_update.values())
        first = next((r["update"] for r in self.metrics if r.get("grew")), None)
        for row, _, at_100 in self._after_growths():
            if row["update"] == first:
                before = [r for r in self.metrics if r["update"] < row["update"] and r["update"] in by_update]
                gap = abs(before[-1]["valid_loss"] - by_update[before[-1]["update"]]) if before else float("nan")
                change = float(np.interp(row["update"] + 100, updates, losses)) - row["valid_loss"]
                return at_100 - row["valid_loss"], change, gap
        return None

    @property
    def peak(self):
        """The largest rise of the validation loss at an evaluation within the 100 updates after a growth."""
        rises = [max(v for _, v in within) - row["valid_loss"] for row, within, _ in self._after_growths() if within]
        return max(rises) if rises else None

    def flops_to_reach(self, loss, unit="flops"):
        """FLOPs (or, with `unit="seconds"`, training seconds) at which the curve first reaches `loss` (linear
        between evaluations), or None."""
        previous = None
        for row in self.metrics:
            spent, value = row[unit], row["valid_loss"]
            if value <= loss:
                if previous is None or previous[1] == value:
                    return spent
                fraction = (previous[1] - loss) / (previous[1] - value)
                return previous[0] + fraction * (spent - previous[0])
            previous = (spent, value)
        return None


def corpus_paths(name, stack):
    """`(paths, description)` of a `--corpus` entry, or `(None, why)` where it is not there."""
    if name == "en":
        path = stack.enter_context(resources.as_file(resources.files("kwiden").joinpath("data", SHIPPED)))
        return [path], f"en: the shipped Python tutorial ({SHIPPED}, {text_bytes([path]):,} bytes)"
    if name == "zh":
        for folder in map(pathlib.Path, ZH_FOLDERS):
            paths = [folder / file for file in ZH_FILES]
            if all(p.is_file() for p in paths):
                return paths, f"zh: Debian's fortunes-zh ({', '.join(map(str, paths))}; {text_bytes(paths):,} bytes)"
        return None, (
            f"skipping corpus zh: Debian's fortunes-zh is not installed (no {'/'.join(ZH_FILES)} in "
            f"{' or '.join(ZH_FOLDERS)}); `apt-get install fortunes-zh` provides it"
        )
    if name == "docs":
        if not pathlib.Path(DOCS).is_dir():
            return None, f"skipping corpus docs: {DOCS} is not there; `apt-get install python3-doc` provides it"
        return [pathlib.Path(DOCS)], f"docs: Debian's python3-doc ({DOCS}, {text_bytes([DOCS]):,} bytes)"
    path = pathlib.Path(name)
    if not path.exists():
        return None, f"skipping corpus {name}: no such file or folder"
    return [path], f"{name}: {text_bytes([path]):,} bytes"


def text_bytes(paths):
    """The bytes of the text `kwiden.pretrain` reads from `paths` (its `corpus_files`): the byte tokenizer's tokens."""
    total = 0
    for path in corpus_files(paths):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as file:
            total += len(file.read())
    return total


def bert_spec(spec):
    """The spec with `allow_approximate=True` on each depth growth (Post-LN depth growth is not exact)."""
    if spec in ("auto", "none"):
        return spec
    items = [
        item + ",allow_approximate=True" if "depth=" in item and "allow_approximate" not in item else item
        for item in spec.split()
    ]
    return " ".join(items)


def slug(text):
    return re.sub(r"[^A-Za-z0-9.=]+", "_", text).strip("_")


def train(args, paths, corpus_name, label, config, grow, budget, schedule, lr, seed, valid_fraction, options):
    """One `kwiden.pretrain` run: `(Run's fields, the lines to report)`. Plain values, so that `--jobs` can run it
    in a process of its own."""
    lines = []
    name = f"{args.model}-{corpus_name}-{config['hidden_size']}x{config['num_hidden_layers']}/"
    name += f"{slug(label)}-b{budget}-{schedule}-lr{lr:g}-seed{seed}"
    with contextlib.ExitStack() as stack:
        if args.work_dir:
            folder = args.work_dir / name
        else:
            folder = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="grow_vs_scratch-")))
        start = time.perf_counter()
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        try:
            result = kwiden.pretrain(
                paths, folder, model=args.model, config=config, budget=budget, seq_len=args.seq_len,
                batch_size=args.batch_size, lr=lr, schedule=schedule, decay_fraction=args.decay_fraction,
                grow=grow, valid_fraction=valid_fraction, seed=seed, verbose=0,
                **{"eval_every": max(1, budget // args.evaluations), "warmup": default_warmup(budget), **options},
            )  # fmt: skip
        except Exception as error:  # noqa: BLE001 - a recipe pretrain refuses is reported, not fatal
            lines.append(f"  {label}, seed {seed}: FAILED: {type(error).__name__}: {error}")
            return dict(label=label, seed=seed, metrics=[], flops=0.0, updates=0,
                        wall=time.perf_counter() - start, error=str(error)), lines  # fmt: skip
        run = Run(label, seed, result.metrics, result.flops, result.updates, time.perf_counter() - start)
    kwiden_warnings = [w for w in caught if not issubclass(w.category, DeprecationWarning)]  # not numpy's, TF's
    for first_line in dict.fromkeys(str(w.message).splitlines()[0] for w in kwiden_warnings):
        lines.append(f"  ({label}, seed {seed}: warned: {first_line})")
    lines.append(
        f"  {label}, budget {budget}, seed {seed}: final valid loss {run.final:.4f}, "
        f"{run.updates} updates, {run.flops:.4g} FLOPs ({run.seconds:.0f} s training, {run.wall:.0f} s wall)"
    )
    return dataclasses.asdict(run), lines


class InProcess:
    """`concurrent.futures`' `submit`, run here and now: `--jobs 1`."""

    def submit(self, function, *arguments):
        future = concurrent.futures.Future()
        future.set_result(function(*arguments))
        return future


class Bench:
    def __init__(self, args, say, pool):
        self.args, self.say, self.pool = args, say, pool
        self.summaries = []

    def cost(self, config):
        """FLOPs of one update of the model of `config`, counted here apart from pretrain."""
        model = self.build(config)
        return flops_per_token(model, self.args.seq_len) * self.args.batch_size * self.args.seq_len

    def build(self, config):
        mlm = {"with_mlm": True} if self.args.model == "bert" else {}
        return kwiden.build_transformer_model(dict(config, vocab_size=VOCAB), model=self.args.model, **mlm)

    def start(self, calls):
        """Start each of `calls` (`train`'s arguments but `args`), at most `--jobs` at once; their futures."""
        return [self.pool.submit(train, self.args, *call) for call in calls]

    def collect(self, futures):
        """The runs of `futures`, in order, each reported as it is collected."""
        runs = []
        for future in futures:
            fields, lines = future.result()
            for line in lines:
                self.say(line)
            runs.append(Run(**fields))
        return runs

    def tune(self, call, seeds):
        """`{(schedule, lr): [runs]}` over `--schedules` × `--lrs` on `seeds`,
        each schedule's range widened (×2 or ÷2, at most `--widen` times) while
        its best rate sits at an edge of the rates tried. Each round's runs start at once."""
        args, say = self.args, self.say
        sweep = {}

        def try_rates(pairs):
            futures = {pair: self.start([call(f"scratch, {pair[0]} lr {pair[1]:g}", "none", *pair, s) for s in seeds])
                       for pair in pairs}  # fmt: skip
            sweep.update({pair: self.collect(runs) for pair, runs in futures.items()})

        try_rates([(schedule, lr) for schedule in args.schedules for lr in sorted(args.lrs)])
        widening = list(args.schedules)
        for _ in range(args.widen):
            more = []
            for schedule in widening:
                tried = sorted(lr for s, lr in sweep if s == schedule)
                finished = {lr: runs for (s, lr), runs in sweep.items() if s == schedule and _finished(runs)}
                if not finished:
                    continue
                best = min(finished, key=lambda lr: _mean_final(finished[lr]))
                if tried[0] < best < tried[-1]:
                    continue
                lr = best * 2 if best == tried[-1] else best / 2
                say(f"  ({schedule}: the best rate {best:g} is at the edge of those tried; trying {lr:g})")
                more.append((schedule, lr))
            if not more:
                break
            widening = [schedule for schedule, _ in more]
            try_rates(more)
        return sweep

    def section(self, paths, corpus_name, description, hidden, layers):
        args, say = self.args, self.say
        config = corpus.gpt_config(hidden, layers, args.seq_len)
        config.pop("vocab_size")  # the tokenizer's: bytes
        target = self.build(config)
        parameters = target.count_params()
        tokens_per_update = args.batch_size * args.seq_len
        if args.tokens_per_parameter:
            budget = max(args.evaluations, round(args.tokens_per_parameter * parameters / tokens_per_update))
        else:
            budget = args.budget
        _, why = recipe.auto(get_family(args.model).config(dict(config, vocab_size=VOCAB)))
        small_config = self.start_of(config, "auto")
        corpus_tokens = text_bytes(paths)
        valid_fraction = min(args.valid_fraction, args.valid_tokens / corpus_tokens)
        tokens = budget * tokens_per_update
        epochs = tokens / (corpus_tokens * (1 - valid_fraction))
        say(f"\n=== {args.model} {hidden}x{layers} on {description}\n")
        say(
            f"target {parameters:,} parameters; budget {budget} updates of {tokens_per_update} tokens = {tokens:,} "
            f"tokens = {tokens / parameters:.1f} tokens per parameter, {epochs:.1f} passes over the training text; "
            f"{valid_fraction:.3g} of the corpus held out; auto: {why}"
        )

        def call(label, recipe, schedule, lr, seed, run_config=config, run_budget=budget, **more):
            grow, options = pretrain_options(recipe)
            grow = bert_spec(grow) if args.model == "bert" else grow
            return (paths, corpus_name, label, run_config, grow, run_budget, schedule, lr, seed, valid_fraction,
                    {**options, **more})  # fmt: skip

        tune_seeds = args.seeds[: args.tune_seeds]
        say("scratch runs (the rates tuned on seed" + "s" * (len(tune_seeds) > 1) + f" {_join(tune_seeds)}):")
        if args.scratch:  # tuned before: its seeds start with every other run
            (schedule, lr), sweep, tuned = args.scratch, {}, []
        else:
            sweep, tuned = self.tune(call, tune_seeds), tune_seeds
            finished = {key: runs for key, runs in sweep.items() if _finished(runs)}
            if not finished:
                say("no scratch run finished: nothing to compare")
                return
            schedule, lr = min(finished, key=lambda key: _mean_final(finished[key]))
        scratch_label = f"scratch, {schedule} lr {lr:g}"
        target_cost = self.cost(config)
        small_budget = int(budget * target_cost // self.cost(small_config))
        small_label = f"small {small_config['hidden_size']}x{small_config['num_hidden_layers']} alone"
        # every run that waits on no other run's result starts now; they are collected below in the report's order
        rest = self.start([call(scratch_label, "none", schedule, lr, s) for s in args.seeds[len(tuned) :]])
        grown = {spec: self.start([call(f"grow {spec}", spec, schedule, lr, s) for s in args.seeds])
                 for spec in args.recipe_specs}  # fmt: skip

        def start_fraction(spec, fraction):
            label = f"grow {spec} on {fraction:g} of the budget"
            part = max(1, round(fraction * budget))
            return self.start([call(label, spec, schedule, lr, s, run_budget=part) for s in args.seeds])

        pending = {(spec, f): start_fraction(spec, f) for spec in args.fraction_recipes for f in self.first_fractions()}
        starts = []  # before the small model alone, which the summary takes as the last group
        for start in self.starts(config, small_config) if args.starts_alone else []:
            label = f"start {start['hidden_size']}x{start['num_hidden_layers']} alone"
            start_budget = int(budget * target_cost // self.cost(start))
            starts.append(
                (label, self.start([call(label, "none", schedule, lr, s, start, start_budget) for s in args.seeds]))
            )
        small = self.start([call(small_label, "none", schedule, lr, s, small_config, small_budget) for s in args.seeds])

        scratch = sweep.get((schedule, lr), []) + self.collect(rest)
        if not _finished(scratch):
            say("a scratch run failed: nothing to compare")
            return
        sweep.setdefault((schedule, lr), scratch[: len(tune_seeds)])
        rows = [
            (f"{s} lr {r:g}" + (" (best)" if (s, r) == (schedule, lr) else ""), final_losses(runs))
            for (s, r), runs in sorted(sweep.items())
        ]
        say("\n" + table(rows, ("scratch: schedule, peak lr", f"final loss, seed {_join(tune_seeds)}")) + "\n")
        tried = sorted(r for s, r in sweep if s == schedule)  # a rate that diverged was tried, and lost
        edge = not tried[0] < lr < tried[-1]
        if edge and not args.scratch:
            say(f"WARNING: the baseline's best rate {lr:g} is at the edge of those tried ({_join(tried)}): widen --lrs")

        say(f"grown runs at {schedule} lr {lr:g}:")
        groups = [(scratch_label, scratch)]
        groups += [(f"grow {spec}", self.collect(futures)) for spec, futures in grown.items()]
        controls = {}
        if args.controls:
            say("controls: each grown run's start trained on without growing, on the same updates and schedule:")
            started = {
                label: self.start([self.control(call, config, label.removeprefix("grow "), run, schedule, lr, budget)
                                   for run in runs if run.error is None])
                for label, runs in groups[1:]
            }  # fmt: skip
            controls = {label: self.collect(futures) for label, futures in started.items()}
        fractions = {}
        scratch_mean = _mean_final(scratch)
        for spec in args.fraction_recipes:
            for fraction in self.fractions_to_try(spec, scratch_mean, fractions):
                futures = pending.pop((spec, fraction), None) or start_fraction(spec, fraction)
                fractions[spec, fraction] = self.collect(futures)
        groups += [(label, self.collect(futures)) for label, futures in starts]
        groups.append((small_label, self.collect(small)))
        self.report(groups, fractions, scratch, schedule, lr, corpus_name, hidden, layers, budget, target_cost)
        if controls:
            self.report_controls(groups, controls)
        self.summaries.append(
            self.summary(
                groups,
                fractions,
                scratch,
                schedule,
                lr,
                edge,
                corpus_name,
                hidden,
                layers,
                parameters,
                tokens / parameters,
                epochs,
            )  # fmt: skip
        )

    def start_of(self, config, spec):
        """The config (`config`'s keys) of the model the `--grow` spec `spec` starts from."""
        family_config = get_family(self.args.model).config(dict(config, vocab_size=VOCAB))
        growths = recipe.parse(pretrain_options(spec)[0])
        growths = recipe.auto(family_config)[0] if growths == "auto" else growths
        start = recipe.undone(family_config, growths)
        return {key: start[key] for key in config}

    def starts(self, config, small_config):
        """The starts of `--grow`'s recipes other than `auto`'s (`small_config`, run anyway), each once."""
        found = []
        for spec in self.args.recipe_specs:
            start = self.start_of(config, spec)
            if start != small_config and start != config and start not in found:
                found.append(start)
        return found

    def control(self, call, config, spec, run, schedule, lr, budget):
        """`run`'s control: the model `spec` starts from, without growing, for `run`'s updates, with its warmup
        and evaluations (which pretrain sets from the budget), so the two are identical up to the first growth."""
        return call(f"control of grow {spec}", "none", schedule, lr, run.seed, self.start_of(config, spec),
                    run.updates, warmup=default_warmup(budget), eval_every=max(1, budget // self.args.evaluations))  # fmt: skip

    def report_controls(self, groups, controls):
        rows = []
        for label, runs in groups[1:]:
            done = [run for run in runs if run.error is None]  # the runs that have a control
            pairs = [run.against(control) for run, control in zip(done, controls.get(label, []))
                     if control.error is None]  # fmt: skip
            pairs = [pair for pair in pairs if pair is not None]
            if pairs:
                rows.append((
                    label,
                    spread([rise for rise, _, _ in pairs], 3, "%+.3f"),
                    spread([change for _, change, _ in pairs], 3, "%+.3f"),
                    spread([rise - change for rise, change, _ in pairs], 3, "%+.3f"),
                    ", ".join(f"{rise - change:+.3f}" for rise, change, _ in pairs),
                    f"{max(abs(gap) for _, _, gap in pairs):.1e}",
                ))  # fmt: skip
        if rows:
            self.say("\nafter the first growth, against its control (the start trained on without growing):\n")
            self.say(
                table(rows, ("run", "after 100", "control's change", "beyond control", "beyond, by seed", "gap before"))
            )
            self.say("(after 100: the loss 100 updates after the growth minus at it; the control's change over the")
            self.say(" same updates, from the grown run's loss at the growth; beyond: the first minus the second, the")
            self.say(" rise the growth caused; gap before: the two runs' largest difference at the last evaluation")
            self.say(" before the growth, 0 where they were one run up to it)")

    def first_fractions(self):
        """The fractions `fractions_to_try` runs whatever the results: the middle one, or all with `--jobs`."""
        ordered = sorted(self.args.fractions)
        middle = (len(ordered) - 1) // 2  # the bisection's first; none of none
        return ordered if self.args.jobs > 1 else ordered[middle : middle + 1]

    def fractions_to_try(self, spec, scratch_mean, fractions):
        """The budget fractions to run, one at a time: bisecting `--fractions`
        (sorted) for the smallest whose mean final loss reaches `scratch_mean`;
        with `--jobs`, all of them (started at once, bisecting would only wait)."""
        if self.args.jobs > 1:
            yield from self.first_fractions()
            return
        low, high = 0, len(self.args.fractions) - 1
        while low <= high:
            middle = (low + high) // 2
            fraction = sorted(self.args.fractions)[middle]
            yield fraction
            runs = fractions[spec, fraction]
            if _finished(runs) and _mean_final(runs) <= scratch_mean:
                high = middle - 1
            else:
                low = middle + 1

    def report(self, groups, fractions, scratch, schedule, lr, corpus_name, hidden, layers, budget, target_cost):
        args, say = self.args, self.say
        by_seed = {run.seed: run for run in scratch}
        targets = {seed: run.final for seed, run in by_seed.items()}
        references = {seed: run.flops_to_reach(targets[seed]) for seed, run in by_seed.items()}
        clock = {seed: run.flops_to_reach(targets[seed], "seconds") for seed, run in by_seed.items()}
        self.check_flops(groups, by_seed, target_cost)
        rows = []
        for label, runs in groups:
            done = [r for r in runs if r.error is None]
            if not done:
                rows.append((label, "failed", "-", "-", "-", "-", "-", "-", "-", "-"))
                continue
            reached = [(r, r.flops_to_reach(targets[r.seed])) for r in done]
            reached = [(r, cost) for r, cost in reached if cost is not None]
            savings = [100 * (1 - cost / references[r.seed]) for r, cost in reached]
            timed = [(r, r.flops_to_reach(targets[r.seed], "seconds")) for r, _ in reached]
            seconds_saved = [100 * (1 - spent / clock[r.seed]) for r, spent in timed if clock[r.seed]]
            rows.append(
                (
                    label,
                    spread([r.final for r in done], 4),
                    f"{statistics.mean(r.flops for r in done):.3g}",
                    "-" if not reached else f"{statistics.mean(c for _, c in reached):.3g}",
                    "never" if not reached else spread(savings, 1, "%+.1f") + "%",
                    "never" if not seconds_saved else spread(seconds_saved, 1, "%+.1f") + "%",
                    f"{len(reached)}/{len(runs)}",
                    "-" if done[0].jump is None else spread([r.jump for r in done], 3, "%+.3f"),
                    "-" if done[0].peak is None else spread([r.peak for r in done], 3, "%+.3f"),
                    f"{statistics.mean(r.seconds for r in done):.0f}",
                )
            )
        title = (
            f"{args.model.upper()} {hidden}x{layers} on {corpus_name}, {schedule} lr {lr:g}, batch {args.batch_size}x"
            f"{args.seq_len}, budget {budget} updates of the target ({scratch[0].flops:.3g} FLOPs), seeds "
            f"{_join(args.seeds)}; target: each seed's scratch final loss (mean {statistics.mean(targets.values()):.4f})"
        )
        say(f"\n{title}\n")
        header = (
            "run",
            "final loss",
            "FLOPs",
            "FLOPs to target",
            "first crossing",
            "in seconds",
            "reached",
            "jump",
            "peak",
            "train s",
        )
        say(table(rows, header))
        say("(mean ± standard deviation over seeds; first crossing: the FLOPs at which the validation curve first")
        say(" reaches that seed's scratch final loss, against scratch's own first arrival, over the seeds that do;")
        say(" in seconds: the same in training seconds, which vary with the machine's load as FLOPs do not;")
        say(" jump: the validation loss 100 updates after a growth minus at the growth, the largest of the run's;")
        say(" peak: the highest evaluation within those 100 updates minus at the growth)")
        if fractions:
            mean_target = statistics.mean(targets.values())
            rows = []
            for (spec, fraction), runs in fractions.items():
                done = [r for r in runs if r.error is None]
                finals = [r.final for r in done]
                rows.append(
                    (
                        f"grow {spec}",
                        f"{fraction:g}",
                        spread(finals, 4) if finals else "failed",
                        "yes" if finals and statistics.mean(finals) <= mean_target else "no",
                        f"{sum(r.final <= targets[r.seed] for r in done)}/{len(runs)}",
                        f"{statistics.mean(r.seconds for r in done):.0f}" if done else "-",
                    )
                )
            say(
                f"\nbudget fractions: does the grown run's final loss reach scratch's at the full budget ({mean_target:.4f})?\n"
            )
            say(table(rows, ("run", "fraction", "final loss", "mean reaches", "seeds reaching", "train s")))
        if args.plot:
            path = args.results.with_name(f"{args.results.stem}_{args.model}_{slug(corpus_name)}_{hidden}x{layers}.png")
            plot(groups, targets[args.seeds[0]], args.seeds[0], title, path)
            say(f"\nplot: {shown(path)}")

    def summary(self, groups, fractions, scratch, schedule, lr, edge, corpus_name, hidden, layers, parameters,
                tokens_per_parameter, epochs):  # fmt: skip
        """One row of the protocol table: the first recipe of `--fraction-recipes` against both baselines."""
        finals = {label: [r.final for r in runs if r.error is None] for label, runs in groups}
        scratch_mean = statistics.mean(r.final for r in scratch)
        spec = (self.args.fraction_recipes or self.args.recipe_specs or ["none"])[0]
        grown = finals.get(f"grow {spec}", [])
        small = finals[groups[-1][0]]
        reached = [f for (s, f), runs in sorted(fractions.items()) if s == spec and _finished(runs)
                   and _mean_final(runs) <= scratch_mean]  # fmt: skip
        seconds = statistics.mean(r.seconds for runs in (g[1] for g in groups) for r in runs if r.error is None)
        in_seconds = "-"
        if reached:  # the fraction's runs' training seconds against scratch's at the full budget
            runs = [r for r in fractions[spec, min(reached)] if r.error is None]
            spent = statistics.mean(r.seconds for r in runs) / statistics.mean(r.seconds for r in scratch)
            in_seconds = f"{100 * (1 - spent):.0f}%"
        return (
            f"{self.args.model} {corpus_name}",
            f"{hidden}x{layers} ({parameters / 1e3:.0f}k)",
            f"{tokens_per_parameter:.1f} ({epochs:.1f})",
            f"{spread([r.final for r in scratch], 4)} ({schedule} {lr:g}{', edge' if edge and not self.args.scratch else ''})",
            spread(small, 4) if small else "failed",
            spread(grown, 4) if grown else "-",
            saving(reached, [f for s, f in fractions if s == spec]),
            in_seconds,
            f"{statistics.mean(grown) - statistics.mean(small):+.4f}" if grown and small else "-",
            f"{seconds:.0f}",
        )

    def check_flops(self, groups, scratch_by_seed, target):
        """Every run spent the scratch run's FLOPs, to within one update of the
        target (`target`: the FLOPs of one, counted here); the scratch run's FLOPs are that cost's."""
        say = self.say
        problems = []
        for run in scratch_by_seed.values():
            if run.flops != target * run.updates:
                problems.append(
                    f"scratch seed {run.seed}: pretrain counts {run.flops:.6g} FLOPs for {run.updates} updates; "
                    f"flops_per_token gives {target * run.updates:.6g}"
                )
        worst = 0.0
        for label, runs in groups:
            for run in runs:
                if run.error is not None:
                    continue
                gap = (scratch_by_seed[run.seed].flops - run.flops) / target  # in updates of the target
                worst = max(worst, abs(gap))
                if not 0 <= gap < 1:
                    problems.append(f"{label}, seed {run.seed}: {run.flops:.6g} FLOPs, {gap:+.3f} target updates off")
        for problem in problems:
            say(f"FLOPS CHECK FAILED: {problem}")
        if not problems:
            say(
                f"\nFLOPs check: every run spent the scratch run's FLOPs to within {worst:.2f} of one target update "
                f"({target:.4g} FLOPs); the scratch runs' FLOPs are flops_per_token's"
            )


SUMMARY = ("cell", "target (params)", "tokens/param (passes)", "scratch, tuned (schedule, lr)", "small alone",
           "grown, equal FLOPs", "saving in FLOPs: smallest fraction reaching scratch", "its saving in seconds",
           "grown − small", "train s/run")  # fmt: skip


def saving(reached, tried):
    """The protocol's saving: 1 − the smallest fraction reached; "<" 1 − the largest tried where none was; "-" untried."""
    if reached:
        return f"{100 * (1 - min(reached)):.0f}% (at {min(reached):g})"
    return f"<{100 * (1 - max(tried)):.0f}%" if tried else "-"


def final_losses(runs):
    """A tuning row's cell: the final losses' spread, or why a run has none."""
    failed = [r.error for r in runs if r.error is not None]
    if failed:
        return "diverged" if all("diverged" in error for error in failed) else "failed"
    return spread([r.final for r in runs], 4)


def _finished(runs):
    return bool(runs) and all(r.error is None for r in runs)


def _mean_final(runs):
    return statistics.mean(r.final for r in runs)


def _join(values):
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def shown(path):
    """`path` relative to the checkout where it is inside it."""
    root = RESULTS.parent.parent
    return path.resolve().relative_to(root) if path.resolve().is_relative_to(root) else path


def spread(values, digits, form=None):
    form = form or f"%.{digits}f"
    if len(values) == 1:
        return form % values[0]
    return f"{form % statistics.mean(values)} ± {statistics.stdev(values):.{digits}f}"


def plot(groups, target, seed, title, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, runs in groups:
        run = next((r for r in runs if r.seed == seed and r.error is None), None)
        if run is not None:
            ax.plot([m["flops"] for m in run.metrics], [m["valid_loss"] for m in run.metrics], label=label)
    ax.axhline(target, color="grey", linestyle=":", label="scratch's final loss")
    ax.set(
        xlabel="training FLOPs (small models charged)",
        ylabel="validation loss",
        title=f"{title}; curves: seed {seed}".replace("; ", "\n"),
    )
    low = min(m["valid_loss"] for _, runs in groups for r in runs if r.error is None for m in r.metrics)
    ax.set_ylim(low - 0.05, target + 0.6)
    ax.title.set_fontsize(8)
    ax.legend(fontsize=6)
    path.parent.mkdir(exist_ok=True, parents=True)
    with replaced_atomically(path) as temporary:
        fig.savefig(temporary, dpi=120)
    plt.close(fig)


def numbers(kind):
    return lambda text: [kind(v) for v in text.split(",") if v]


def sizes(text):
    """`[(hidden, layers)]` from "64x2,128x4"."""
    try:
        return [tuple(int(n) for n in item.lower().split("x")) for item in text.split(",") if item]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes takes WIDTHxBLOCKS,…, such as 64x2,128x4; got {text!r}") from None


def scratch_setting(text):
    schedule, _, lr = text.partition(":")
    try:
        return schedule, float(lr)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--scratch takes SCHEDULE:LR, such as wsd:4e-3; got {text!r}") from None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["gpt", "bert"], default="gpt")
    parser.add_argument("--corpus", default="en", help="comma-separated: en, zh, docs, or text files and folders")
    parser.add_argument("--sizes", type=sizes, default="64x2", help="targets, WIDTHxBLOCKS comma-separated")
    parser.add_argument("--scale", type=int, default=1, help="multiply every target's width (for a GPU)")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--budget", type=int, default=1500, help="updates of the target from scratch")
    parser.add_argument(
        "--tokens-per-parameter", type=float, default=None, help="set each target's budget from this instead"
    )
    parser.add_argument("--lrs", type=numbers(float), default="1e-3,2e-3,4e-3,8e-3", help="peak rates from scratch")
    parser.add_argument(
        "--widen", type=int, default=2, help="times a rate range is widened while its best is at an edge"
    )
    parser.add_argument(
        "--schedules",
        type=lambda t: t.split(","),
        default="wsd,cosine",
        help="schedules tried from scratch: wsd,cosine,constant",
    )
    parser.add_argument(
        "--scratch", type=scratch_setting, default=None, help="SCHEDULE:LR, a baseline tuned before: no sweep"
    )
    parser.add_argument("--decay-fraction", type=float, default=0.2, help="wsd's decay, a fraction of the updates")
    parser.add_argument("--recipes", default="main", choices=sorted(GROUPS))
    parser.add_argument("--grow", action="append", default=[], help="one more --grow spec (repeatable)")
    parser.add_argument(
        "--fractions",
        type=numbers(float),
        default="0.3,0.5,0.7",
        help="budget fractions, bisected for the smallest reaching scratch",
    )
    parser.add_argument(
        "--fraction-recipes", type=lambda t: [x for x in t.split(";") if x], default="auto",
        help="recipes run at each budget fraction (;-separated); the first is the summary's",
    )  # fmt: skip
    parser.add_argument(
        "--controls",
        action="store_true",
        help="also train each grown run's start on without growing, to tell its rise from its trend",
    )
    parser.add_argument(
        "--starts-alone", action="store_true",
        help="also train each --grow recipe's own start (where it is not auto's) alone on the whole budget",
    )  # fmt: skip
    parser.add_argument("--seeds", type=numbers(int), default="0,1,2")
    parser.add_argument(
        "--jobs", type=int, default=1,
        help="runs at once, each in a process of its own (a GPU's); every budget fraction is then run, not bisected",
    )  # fmt: skip
    parser.add_argument("--tune-seeds", type=int, default=1, help="the first N seeds tune the scratch rate")
    parser.add_argument("--evaluations", type=int, default=20, help="validation evaluations a run")
    parser.add_argument("--valid-fraction", type=float, default=0.1, help="the end of the corpus held out")
    parser.add_argument("--valid-tokens", type=int, default=65536, help="at most this many held out")
    parser.add_argument("--work-dir", type=pathlib.Path, default=None, help="keep each run's folder here")
    parser.add_argument("--results", type=pathlib.Path, default=None, help="the output file (.md)")
    parser.add_argument("--no-plot", dest="plot", action="store_false")
    parser.add_argument("--quick", action="store_true", help="32x2, budget 300, wsd at 2e-3, 4e-3, 8e-3, seed 0")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.budget, args.lrs, args.seeds, args.schedules = (
            [(32, 2)],
            300,
            [4e-3, 8e-3, 1.6e-2],
            [0],
            ["wsd"],
        )
        args.fractions, args.widen = [0.5], 0
    args.sizes = [(hidden * args.scale, layers) for hidden, layers in args.sizes]
    args.recipe_specs = list(dict.fromkeys(args.fraction_recipes + GROUPS[args.recipes] + args.grow))
    args.results = args.results or RESULTS / ("grow_vs_scratch_quick.md" if args.quick else "grow_vs_scratch.md")

    lines = []

    def say(line=""):
        print(line, flush=True)
        lines.append(line)

    started = time.perf_counter()
    command = "python benchmarks/grow_vs_scratch.py " + shlex.join(sys.argv[1:])
    with contextlib.ExitStack() as stack:
        pool = InProcess()
        if args.jobs > 1:  # a fresh process a run: no Keras or backend state carried from one run to the next
            spawn = multiprocessing.get_context("spawn")
            pool = stack.enter_context(ProcessPoolExecutor(args.jobs, mp_context=spawn, max_tasks_per_child=1))
        bench = Bench(args, say, pool)
        corpora = [(name, *corpus_paths(name, stack)) for name in args.corpus.split(",") if name]
        say(command.strip())
        say(environment(keras, np, [description for _, _, description in corpora]))
        for name, paths, description in corpora:
            if paths is None:
                say(description)
                continue
            for hidden, layers in args.sizes:
                bench.section(paths, name, description, hidden, layers)
    if bench.summaries:
        say("\nprotocol table (mean ± sd over seeds " + _join(args.seeds) + "; saving: the smallest budget fraction")
        say("whose grown run's mean final loss reaches scratch's at the full budget):\n")
        say(table(bench.summaries, SUMMARY))
    minutes = (time.perf_counter() - started) / 60
    say(f"\ntotal wall time: {minutes:.1f} min")
    body = "\n".join(lines)
    text = f"# {command.strip()}\n\nWritten by benchmarks/grow_vs_scratch.py ({minutes:.1f} min).\n\n```text\n{body}\n```\n"
    args.results.parent.mkdir(parents=True, exist_ok=True)
    with replaced_atomically(args.results) as temporary:
        temporary.write_text(text, "utf-8")
    print(f"results: {shown(args.results)}")


if __name__ == "__main__":
    main()
