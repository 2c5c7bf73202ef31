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
estimate (`kwiden.training.compute.flops_per_token`), 6·N + 6·L·T·d per token, with the
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
import contextlib
import multiprocessing
import pathlib
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import keras
import numpy as np
from common import environment, table
from protocol.arms import GROUPS
from protocol.cells import Bench
from protocol.corpora import corpus_paths
from protocol.runs import InProcess
from protocol.tables import RESULTS, SUMMARY, join, shown

from kwiden.files import replaced_atomically


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


def parser():
    """The command line, its help this module's docstring."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_arguments(parser)
    add_baseline_arguments(parser)
    add_recipe_arguments(parser)
    add_run_arguments(parser)
    return parser


def add_target_arguments(parser):
    """The models, the text and the budget."""
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


def add_baseline_arguments(parser):
    """The scratch baseline: the schedules and rates tuned, or one tuned before."""
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


def add_recipe_arguments(parser):
    """The grown recipes, the budget fractions, the controls and the starts alone."""
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


def add_run_arguments(parser):
    """Seeds, processes, evaluations, held-out text and where the output goes."""
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
    parser.add_argument(
        "--quick",
        action="store_true",
        help="32x2, budget 300, wsd at 2e-3, 4e-3, 8e-3 (widened once off an edge), seed 0",
    )


def settled(args):
    """`args` with `--quick`'s settings, the widths scaled, the recipes gathered and the output file named."""
    if args.quick:
        args.sizes, args.budget, args.lrs, args.seeds, args.schedules = (
            [(32, 2)],
            300,
            [2e-3, 4e-3, 8e-3],
            [0],
            ["wsd"],
        )
        args.fractions, args.widen = [0.5], 1  # widened once: the baseline's best strictly inside
    args.sizes = [(hidden * args.scale, layers) for hidden, layers in args.sizes]
    args.recipe_specs = list(dict.fromkeys(args.fraction_recipes + GROUPS[args.recipes] + args.grow))
    args.results = args.results or RESULTS / ("grow_vs_scratch_quick.md" if args.quick else "grow_vs_scratch.md")
    return args


def run_cells(args, say, command):
    """Every cell of every corpus and size; the bench, with the protocol table's rows."""
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
    return bench


def main():
    args = settled(parser().parse_args())
    lines = []

    def say(line=""):
        print(line, flush=True)
        lines.append(line)

    started = time.perf_counter()
    command = "python benchmarks/grow_vs_scratch.py " + shlex.join(sys.argv[1:])
    bench = run_cells(args, say, command)
    if bench.summaries:
        say("\nprotocol table (mean ± sd over seeds " + join(args.seeds) + "; saving: the smallest budget fraction")
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
