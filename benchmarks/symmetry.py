"""Training on after growth: plain copies vs exact symmetry breaking vs noisy copies.

A byte-level GPT (Pre-LN, hidden 64, 4 layers) is trained on the Python tutorial
that ships with kwiden, grown x2 (hidden 128), and trained on from the same
point in several ways. For each: the validation loss right after growth, after
100 and after all steps, and the effective rank of a grown weight matrix (plain
copies keep the small model's rank). The last two rows compare one learning
rate for all tensors with the per-tensor multipliers of docs/optimizer-state.md#learning-rate-multipliers; the
last row is the big model trained from scratch for about the same FLOPs.

    python benchmarks/symmetry.py            # about 6 minutes on 2 cores
    python benchmarks/symmetry.py --quick
"""

import argparse
import time

import keras
import numpy as np
from common import CHECKOUT  # noqa: F401  (puts this checkout's kwiden first)

import kwiden
from kwiden import optimizers
from kwiden.text import corpus

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
WATCHED = "Transformer-1-FeedForward/inner_kernel"


def effective_rank(matrix):
    """exp of the entropy of the normalised singular values (Roy & Vetterli)."""
    s = np.linalg.svd(np.asarray(matrix, np.float64), compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def weight(model, path):
    return next(w for w in model.weights if w.path == path).numpy()


def add_noise(model, relative, seed):
    """Non-exact symmetry breaking: Gaussian noise on every kernel."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if w.path.endswith("kernel"):
            value = w.numpy()
            w.assign(value + rng.normal(0, relative * value.std(), value.shape).astype(value.dtype))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-steps", type=int, default=600)
    parser.add_argument("--big-steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.small_steps, args.big_steps = 150, 120
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    ids = corpus.encode(corpus.load_text())
    split = int(0.9 * len(ids))
    x_valid, y_valid = corpus.windows(ids[split:], args.length, 256, rng)
    x_small, y_small = corpus.windows(ids[:split], args.length, args.small_steps * args.batch, rng)
    x_big, y_big = corpus.windows(ids[:split], args.length, args.big_steps * args.batch, rng)
    config = corpus.gpt_config(64, 4, args.length)
    small = kwiden.build_transformer_model(config, model="gpt")
    small.compile(optimizers.AdamW(args.lr, weight_decay=0.0), LOSS)
    small.fit(x_small, y_small, batch_size=args.batch, verbose=0)
    small_loss = small.evaluate(x_valid, y_valid, batch_size=128, verbose=0)
    small_rank = effective_rank(weight(small, WATCHED))
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}")
    print(
        f"small model: hidden 64, {args.small_steps} steps, valid loss {small_loss:.4f}, "
        f"effective rank of {WATCHED} {small_rank:.1f} (of 64)"
    )

    variants = [
        ("plain copies (spread 0)", dict(spread=0.0), None, True),
        ("exact symmetry breaking, spread 1", dict(spread=1.0), None, True),
        ("exact symmetry breaking, spread 3", dict(spread=3.0), None, True),
        ("noisy copies (5% noise, not exact)", dict(spread=0.0), 0.05, True),
        ("spread 1, one learning rate for all", dict(spread=1.0), None, False),
    ]
    rows = []
    for name, options, noise, scale in variants:
        start = time.perf_counter()
        big, optimizer = kwiden.grow(
            small, 2, seed=1, optimizer=small.optimizer, scale_learning_rates=scale, relax_learning_rates=0, **options
        )
        if noise:
            add_noise(big, noise, seed=2)
        big.compile(optimizer, LOSS)
        losses = [big.evaluate(x_valid, y_valid, batch_size=128, verbose=0)]
        first = min(100, args.big_steps)
        big.fit(x_big[: first * args.batch], y_big[: first * args.batch], batch_size=args.batch, verbose=0)
        losses.append(big.evaluate(x_valid, y_valid, batch_size=128, verbose=0))
        big.fit(x_big[first * args.batch :], y_big[first * args.batch :], batch_size=args.batch, verbose=0)
        losses.append(big.evaluate(x_valid, y_valid, batch_size=128, verbose=0))
        rows.append((name, *losses, effective_rank(weight(big, WATCHED)), time.perf_counter() - start))

    # The real alternative: the big model from scratch, for about the same
    # FLOPs (a hidden-64 step costs about a quarter of a hidden-128 step).
    scratch_steps = args.big_steps + args.small_steps // 4
    keras.utils.set_random_seed(0)
    start = time.perf_counter()
    scratch = kwiden.build_transformer_model(dict(config, hidden_size=128), model="gpt")
    scratch.compile(optimizers.AdamW(args.lr, weight_decay=0.0), LOSS)
    x_scratch, y_scratch = corpus.windows(ids[:split], args.length, scratch_steps * args.batch, rng)
    scratch.fit(x_scratch, y_scratch, batch_size=args.batch, verbose=0)
    scratch_loss = scratch.evaluate(x_valid, y_valid, batch_size=128, verbose=0)
    rows.append(
        (
            f"from scratch at 128, {scratch_steps} steps",
            float("nan"),
            float("nan"),
            scratch_loss,
            effective_rank(weight(scratch, WATCHED)),
            time.perf_counter() - start,
        )
    )

    header = (
        "growth",
        "loss at growth",
        f"after {min(100, args.big_steps)}",
        f"after {args.big_steps}",
        "eff. rank (of 128)",
        "seconds",
    )
    print(
        f"\nGrown x2 to hidden 128 and trained {args.big_steps} more steps (grown AdamW state; "
        f"per-tensor learning-rate multipliers unless stated); loss before growth {small_loss:.4f}"
    )
    print(f"{header[0]:<38}" + "".join(f"{h:>20}" for h in header[1:]))
    for name, at, mid, end, rank, seconds in rows:
        print(f"{name:<38}{at:>20.4f}{mid:>20.4f}{end:>20.4f}{rank:>20.1f}{seconds:>20.0f}")


if __name__ == "__main__":
    main()
