"""The compute-optimal size at this scale (issue 48, item 3): an IsoFLOP sweep,
Hoffmann et al.'s approach 2, with `kwiden.pretrain` from scratch.

For each model family (`--models gpt bert`: the byte-level GPT and BERT the
protocol trains, `kwiden.text.corpus.gpt_config`), each training budget in
FLOPs (`--flops`, kwiden's count) and each size (`--sizes`), one run from
scratch (`grow="none"`, WSD) spends the budget on the same text. Each size's
peak rate is tuned once, at the middle budget on seed 0 (a best at an edge adds
the rate beyond it), and used at every budget (`--tuned` gives an earlier
sweep's instead). Per budget, a parabola in log(parameters) through the final
validation losses (the mean over `--seeds`) of the best size and its two
neighbours gives the best size N*; the tokens it would train on (log-linear
between the sizes' own) over N* is the compute-optimal tokens per parameter at
that budget. A best size at an edge of those tried is reported as such: that
budget's optimum is not measured, only bounded. `--batch-size` and `--seq-len`
matter at this scale: a model must make enough updates to leave the loss's
first plateau, so the same FLOPs in larger batches favour smaller models.

    python benchmarks/isoflop.py --models gpt --out isoflop_gpt.md    # about 40 minutes a family on 2 cores
    python benchmarks/isoflop.py --quick                              # a check that it runs, ~2 minutes
"""

import argparse
import contextlib
import math
import pathlib
import statistics
import sys
import tempfile
import time

import common  # noqa: F401  (first: the checkout's kwiden)
import keras
import numpy as np
from common import environment, finish, table
from protocol.corpora import corpus_paths, text_bytes
from protocol.runs import Run
from protocol.tuning import best_pair, rates_beyond_the_edges

import kwiden
from kwiden.pretraining.run import default_warmup
from kwiden.text import corpus
from kwiden.training.compute import flops_per_token

RATES = (2e-3, 4e-3, 8e-3)
SCHEDULE = "wsd"  # pretrain's default; the key `rates_beyond_the_edges` sorts rates under


def config_of(size, seq_len):
    hidden, layers = map(int, size.split("x"))
    config = corpus.gpt_config(hidden, layers, seq_len)
    config.pop("vocab_size")  # the tokenizer's: bytes
    return config


def size_facts(model, size, args):
    """`(parameters, training FLOPs of one update)` of a size."""
    config = dict(config_of(size, args.seq_len), vocab_size=corpus.VOCAB_SIZE)
    built = kwiden.build_transformer_model(config, model=model, **({"with_mlm": True} if model == "bert" else {}))
    facts = built.count_params(), flops_per_token(built, args.seq_len) * args.seq_len * args.batch_size
    keras.backend.clear_session()
    return facts


def train(paths, model, size, budget, lr, seed, args, work):
    """One run from scratch of `budget` updates, as a `Run` (one whose validation loss is not finite marked as
    failed, so that the tuning passes over it)."""
    folder = work / f"{model}-{size}-b{budget}-lr{lr:g}-s{seed}"
    result = kwiden.pretrain(paths, folder, model=model, config=config_of(size, args.seq_len), budget=budget,
                             seq_len=args.seq_len, batch_size=args.batch_size, lr=lr, grow="none", seed=seed,
                             eval_every=max(1, budget // args.evaluations), warmup=default_warmup(budget),
                             valid_fraction=args.valid_fraction, verbose=0)  # fmt: skip
    keras.backend.clear_session()
    diverged = None if math.isfinite(result.metrics[-1]["valid_loss"]) else "the validation loss is not finite"
    return Run(f"{model} {size}", seed, result.metrics, result.flops, result.updates, 0.0, diverged)


def tuned_rate(paths, model, size, budget, args, work, log):
    """The rate of `RATES` (widened off an edge that is best, at most `--widen` times) with seed 0's lowest loss."""
    sweep, queue, widened = {}, list(RATES[: 1 if args.quick else None]), 0
    while queue:
        lr = queue.pop(0)
        run = train(paths, model, size, budget, lr, 0, args, work)
        sweep[(SCHEDULE, lr)] = [run]
        log(f"  tune {model} {size}, lr {lr:g}: {run.final:.4f} ({run.seconds:.0f} s)")
        if not queue and not args.quick and widened < args.widen:
            queue, widened = [next_lr for _, _, next_lr in rates_beyond_the_edges(sweep, [SCHEDULE])], widened + 1
    best = best_pair(sweep)
    if best is None:
        raise SystemExit(f"{model} {size}: every rate tried diverged ({', '.join(f'{lr:g}' for _, lr in sweep)})")
    return best[1]


def tuned_rate_given(text):
    """`((model, size), lr)` from `--tuned`'s MODEL:SIZE=LR."""
    model, _, rest = text.partition(":")
    size, _, lr = rest.partition("=")
    try:
        rate = float(lr)
    except ValueError:
        rate = None
    if model not in ("gpt", "bert") or "x" not in size or rate is None or not rate > 0:
        raise argparse.ArgumentTypeError(f"--tuned {text!r} is not MODEL:SIZE=LR, such as gpt:32x2=0.008")
    return (model, size), rate


def optimum(parameters, tokens, losses):
    """`(N*, D*/N*, why not)` from one budget's sizes: the vertex of the parabola in log N through the best size and
    its two neighbours, where the best is not at an edge of the sizes tried. Only those three: far from the optimum
    the curve is no parabola (a size that made too few updates to leave the first plateau sits far above it)."""
    losses = np.nan_to_num(np.asarray(losses, dtype=float), nan=np.inf)  # a diverged size is not the best
    best = int(np.argmin(losses))
    if best in (0, len(losses) - 1):
        return parameters[best], None, f"the {'smallest' if best == 0 else 'largest'} size tried is best"
    if not np.isfinite(losses[best - 1 : best + 2]).all():
        return parameters[best], None, "a neighbour of the best size diverged"
    x = np.log(parameters[best - 1 : best + 2])
    a, b, _ = np.polyfit(x, losses[best - 1 : best + 2], 2)
    if a <= 0:  # three equal losses
        return None, None, "no minimum (the losses are flat)"
    vertex = -b / (2 * a)  # between the neighbours: the middle of three points is the lowest
    best_tokens = math.exp(np.interp(vertex, np.log(parameters), np.log(tokens)))
    return math.exp(vertex), best_tokens / math.exp(vertex), None


def sweep(paths, model, args, work, log):
    """The rows of one family's table and its ratios at the budgets where the optimum is measured."""
    facts = {size: size_facts(model, size, args) for size in args.sizes}
    middle = sorted(args.flops)[len(args.flops) // 2]
    rates = {size: lr for (family, size), lr in args.tuned.items() if family == model and size in args.sizes}
    for size in [size for size in args.sizes if size not in rates]:
        rates[size] = tuned_rate(paths, model, size, max(1, round(middle / facts[size][1])), args, work, log)
    rows, ratios = [], []
    for flops in sorted(args.flops):
        parameters, tokens, losses = [], [], []
        for size in args.sizes:
            budget = max(1, round(flops / facts[size][1]))
            runs = [train(paths, model, size, budget, rates[size], seed, args, work) for seed in args.seeds]
            loss = statistics.mean(run.final for run in runs)
            parameters.append(facts[size][0])
            tokens.append(budget * args.seq_len * args.batch_size)
            losses.append(loss)
            each = " ".join(f"{run.final:.4f}" for run in runs)
            log(
                f"  {model} {size} at {flops:.3g} FLOPs: {budget} updates, lr {rates[size]:g}, loss {loss:.4f} ({each})"
            )
            rows.append([model, f"{flops:.3g}", size, f"{facts[size][0]:,}", f"{rates[size]:g}", budget,
                         f"{tokens[-1] / facts[size][0]:.1f}", f"{loss:.4f}", each])  # fmt: skip
        best, ratio, why = optimum(parameters, tokens, losses)
        said = why or f"N* {best:,.0f}, {ratio:.1f} tokens per parameter"
        rows.append([model, f"{flops:.3g}", "optimum", "", "", "", "", said, ""])
        if ratio is not None:
            ratios.append(ratio)
    return rows, ratios


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gpt", "bert"], choices=["gpt", "bert"])
    parser.add_argument("--corpus", default="docs", help="en, zh, docs, or a text file or folder")
    parser.add_argument("--sizes", nargs="+", default=["16x2", "24x2", "32x2", "48x2", "64x2"], help="WIDTHxBLOCKS")
    parser.add_argument("--flops", nargs="+", type=float, default=[3e11, 1e12], help="budgets")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--evaluations", type=int, default=5, help="evaluations a run")
    parser.add_argument("--valid-fraction", type=float, default=None, help="default: 65,536 tokens of the corpus")
    parser.add_argument("--widen", type=int, default=2, help="rates added beyond an edge that is best, at most")
    parser.add_argument("--tuned", nargs="+", default=[], type=tuned_rate_given,
                        help="MODEL:SIZE=LR: a rate an earlier sweep tuned for that size (e.g. gpt:32x2=0.008), not tuned again")  # fmt: skip
    parser.add_argument("--work-dir", type=pathlib.Path, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--out", type=pathlib.Path, help="also write the report here (markdown)")
    parser.add_argument("--quick", action="store_true", help="tiny budgets, one rate: a check that it runs")
    args = parser.parse_args()
    args.tuned = dict(args.tuned)
    unused = [f"{model}:{size}" for model, size in args.tuned if size not in args.sizes]  # other models' may be given
    if unused:
        parser.error(f"--tuned gives rates for {', '.join(unused)}, which this sweep does not train")
    if args.quick:
        args.flops, args.sizes, args.evaluations, args.corpus = [3e9, 1e10, 3e10], ["16x2", "32x2", "48x2"], 2, "en"
    args.sizes = sorted(args.sizes, key=lambda size: tuple(map(int, size.split("x"))))  # optimum() reads them in order
    started = time.perf_counter()
    lines = [environment(keras, np), "", " ".join(["python", *sys.argv]), ""]
    print("\n".join(lines), flush=True)
    rows, summary = [], []
    with contextlib.ExitStack() as stack:
        paths, description = corpus_paths(args.corpus, stack)
        if paths is None:
            sys.exit(description)
        if args.valid_fraction is None:
            args.valid_fraction = min(0.1, 65536 / text_bytes(paths))
        lines += [description, ""]
        work = args.work_dir or pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="isoflop-")))
        for model in args.models:
            model_rows, ratios = sweep(paths, model, args, work, lambda line: print(line, flush=True))
            rows += model_rows
            if ratios:
                summary.append(f"- {model}: compute-optimal tokens per parameter {', '.join(f'{r:.1f}' for r in ratios)}"
                               f" at the budgets where it is measured (geometric mean "
                               f"{math.exp(statistics.mean(map(math.log, ratios))):.1f})")  # fmt: skip
            else:
                summary.append(f"- {model}: no budget's optimum is inside the sizes tried")
    header = ["model", "FLOPs", "size", "parameters", "lr", "updates", "tokens/param", "final loss", "each seed's"]
    finish("\n".join([*lines, "```", table(rows, header), "```", "", *summary]), started, args.out)


if __name__ == "__main__":
    main()
