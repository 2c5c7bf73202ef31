"""Deep Post-LN, Pre-LN and Admin, after Liu et al. (2020), on a byte-level LM.

A GPT-style decoder (`kwiden.build_transformer_model(model="gpt", residual=...)`)
on the Python tutorial that ships with kwiden (or any text, `--text`), Xavier-
scale weights (std 1/√hidden), no dropout. Admin's ω are profiled on one batch
(`kwiden.training.admin.initialize`).

1. Output change: E‖F(x, w) − F(x, w + δ)‖² at initialisation, F the final
   normalised hidden states, δ Gaussian with 1% of each kernel's std, mean over
   draws, positions and the batch. The paper: O(N) for Post-LN, O(log N) for
   Admin and Pre-LN.
2. Training stability: validation loss after `--steps` updates for Adam
   without warmup, Adam with linear warmup, and RAdam; "diverged" where the
   loss became infinite or NaN, "did not train" where it ends no better than
   the byte unigram model (what a model that ignores its context can do).

Prints both tables and saves PNG plots under benchmarks/results/ (matplotlib:
`pip install -e .[benchmarks]`).

    python benchmarks/admin_study.py           # about 70 minutes on 2 cores
    python benchmarks/admin_study.py --quick   # about 15 minutes
"""

import argparse
import pathlib
import time

import keras
import numpy as np
from common import environment, table

import kwiden
from kwiden import optimizers
from kwiden.files import replaced_atomically
from kwiden.text import corpus

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
RESIDUALS = ("post_ln", "pre_ln", "admin")
RESULTS = pathlib.Path(__file__).parent / "results"
UNTRAINED_MARGIN = 0.05  # nats per byte below the unigram loss a trained model must reach


def build(residual, depth, args, profile_batch):
    config = corpus.gpt_config(
        args.hidden, depth, args.length, num_attention_heads=args.heads, initializer_range=args.hidden**-0.5
    )
    model = kwiden.build_transformer_model(config, model="gpt", residual=residual)
    if residual == "admin":
        kwiden.training.admin.initialize(model, profile_batch)
    return model


def final_hidden(model, residual, depth):
    name = "Output-Norm" if residual == "pre_ln" else f"Transformer-{depth - 1}-FeedForward-Norm"
    return keras.Model(model.input, model.get_layer(name).output)


def output_change(model, residual, depth, x, args, rng):
    """E‖F(x, w) − F(x, w + δ)‖² over `args.draws` perturbations δ."""
    probe = final_hidden(model, residual, depth)
    reference = keras.ops.convert_to_numpy(probe(x))
    perturbed = [w for w in model.trainable_weights if "kernel" in w.path or "embeddings" in w.path]
    originals = [w.numpy() for w in perturbed]
    changes = []
    for _ in range(args.draws):
        for w, value in zip(perturbed, originals):
            w.assign(value + rng.normal(0.0, args.delta * value.std(), value.shape).astype(value.dtype))
        changes.append(np.mean(np.sum((keras.ops.convert_to_numpy(probe(x)) - reference) ** 2, axis=-1)))
    for w, value in zip(perturbed, originals):
        w.assign(value)
    return float(np.mean(changes))


def make_optimizer(name, args):
    if name == "Adam":
        return optimizers.Adam(args.lr)
    if name == "Adam + warmup":
        return optimizers.Adam(optimizers.WarmupDecay(args.lr, args.warmup, args.steps, end=args.lr))
    return optimizers.RAdam(args.lr)


def train(model, optimizer, data, args):
    """Validation losses every `args.eval_every` updates; stops at a non-finite loss."""
    (x, y), (x_valid, y_valid) = data
    model.compile(optimizer, LOSS)
    curve = []
    for step in range(args.steps):
        batch = slice(step * args.batch, (step + 1) * args.batch)
        loss = float(model.train_on_batch(x[batch], y[batch]))
        if not np.isfinite(loss):
            curve.append((step + 1, float("nan")))
            break
        if (step + 1) % args.eval_every == 0:
            curve.append((step + 1, float(model.evaluate(x_valid, y_valid, batch_size=128, verbose=0))))
    return curve


def unigram_loss(ids_train, ids_valid):
    counts = np.bincount(ids_train, minlength=corpus.VOCAB_SIZE) + 1.0
    p = counts / counts.sum()
    return float(-np.mean(np.log(p[ids_valid])))


def plot_output_change(depths, changes):
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    for residual in RESIDUALS:
        ax.plot(depths, [changes[residual, d] for d in depths], marker="o", label=residual)
    ax.set(xlabel="layers N", ylabel="E‖F(x,w) − F(x,w+δ)‖²", xscale="log", yscale="log",
           title="Output change under a random 1% perturbation")  # fmt: skip
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend()
    fig.tight_layout()
    with replaced_atomically(RESULTS / "admin_output_change.png") as temporary:
        fig.savefig(temporary, dpi=120)


def plot_curves(curves, depths, optimizer_names, unigram):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(optimizer_names), len(depths), figsize=(4 * len(depths), 3 * len(optimizer_names)),
                             sharey=True, squeeze=False)  # fmt: skip
    for row, name in enumerate(optimizer_names):
        for col, depth in enumerate(depths):
            ax = axes[row][col]
            for residual in RESIDUALS:
                steps, losses = zip(*curves[residual, depth, name]) if curves[residual, depth, name] else ((), ())
                ax.plot(steps, losses, label=residual)
            ax.axhline(unigram, color="grey", lw=0.8, ls="--")
            ax.set_title(f"{name}, {depth} layers", fontsize=9)
            ax.set_ylim(top=unigram + 0.5)
    axes[0][0].legend(fontsize=8)
    fig.supxlabel("updates")
    fig.supylabel("validation loss (nats per byte)")
    fig.tight_layout()
    with replaced_atomically(RESULTS / "admin_training.png") as temporary:
        fig.savefig(temporary, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--change-depths", type=int, nargs="+", default=[6, 12, 24, 48])
    parser.add_argument("--train-depths", type=int, nargs="+", default=[6, 18, 36])
    parser.add_argument("--draws", type=int, default=3, help="perturbations per output-change figure")
    parser.add_argument("--delta", type=float, default=0.01, help="perturbation std, relative to each kernel's")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=None, help="warmup updates (default: a quarter of --steps)")
    parser.add_argument(
        "--text", type=pathlib.Path, default=None, help="a UTF-8 text file (default: the shipped tutorial)"
    )
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.change_depths, args.train_depths, args.steps = [6, 12, 24], [6, 18], 100
    args.warmup = args.steps // 4 if args.warmup is None else args.warmup
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    ids = corpus.encode(args.text.read_text("utf-8") if args.text else corpus.load_text())
    split = int(0.9 * len(ids))
    valid = corpus.windows(ids[split:], args.length, 256, rng)
    train_data = corpus.windows(ids[:split], args.length, args.steps * args.batch, rng)
    profile_batch = train_data[0][: args.batch]
    unigram = unigram_loss(ids[:split], ids[split:])
    print(environment(keras, np, [f"text: {args.text or 'kwiden/data/python_tutorial.txt.gz'}, {len(ids):,} bytes"]))
    print(f"hidden {args.hidden}, heads {args.heads}, FFN {4 * args.hidden}, length {args.length}, "
          f"batch {args.batch}, byte unigram loss {unigram:.3f}")  # fmt: skip

    changes = {}
    x = valid[0][:8]
    for depth in args.change_depths:
        for residual in RESIDUALS:
            keras.utils.set_random_seed(depth)
            model = build(residual, depth, args, profile_batch)
            changes[residual, depth] = output_change(model, residual, depth, x, args, np.random.default_rng(depth))
    rows = [(residual, *(f"{changes[residual, d]:.3e}" for d in args.change_depths),
             f"{changes[residual, args.change_depths[-1]] / changes[residual, args.change_depths[0]]:.2f}")
            for residual in RESIDUALS]  # fmt: skip
    print(f"\n1. Output change E‖F(x,w) − F(x,w+δ)‖², δ = {args.delta:g}·std per kernel, at initialisation")
    header = ("residual", *(f"N={d}" for d in args.change_depths),
              f"N={args.change_depths[-1]} / N={args.change_depths[0]}")  # fmt: skip
    print(table(rows, header))

    optimizer_names = ("Adam", "Adam + warmup", "RAdam")
    curves, rows = {}, []
    for depth in args.train_depths:
        for residual in RESIDUALS:
            row = [f"{residual}, {depth} layers"]
            for name in optimizer_names:
                keras.utils.set_random_seed(depth)
                start = time.perf_counter()
                model = build(residual, depth, args, profile_batch)
                curve = train(model, make_optimizer(name, args), (train_data, valid), args)
                curves[residual, depth, name] = curve
                final = curve[-1][1] if curve else float("nan")
                if not np.isfinite(final):
                    row.append(f"diverged at {curve[-1][0]}")
                elif final > unigram - UNTRAINED_MARGIN:
                    row.append(f"{final:.3f} did not train")
                else:
                    row.append(f"{final:.3f}")
                print(f"  {row[0]}, {name}: {row[-1]} ({time.perf_counter() - start:.0f} s)", flush=True)
            rows.append(row)
    print(f"\n2. Validation loss after {args.steps} updates, lr {args.lr:g} (warmup: linear over "
          f"{args.warmup} updates); unigram loss {unigram:.3f}")  # fmt: skip
    print(table(rows, ("model", *optimizer_names)))

    if not args.no_plots:
        RESULTS.mkdir(exist_ok=True)
        plot_output_change(args.change_depths, changes)
        plot_curves(curves, args.train_depths, optimizer_names, unigram)
        print(f"\nplots: {RESULTS / 'admin_output_change.png'}, {RESULTS / 'admin_training.png'}")


if __name__ == "__main__":
    main()
