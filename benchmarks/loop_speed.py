"""Training speed of `kwiden pretrain` against Keras `fit` on the same model,
side by side in one process, with the model FLOPs utilisation (MFU) against
a matrix product measured in the same run.

Both train the same GPT (bytes, seq 128, batch 16, AdamW) from scratch on
the shipped text. `kwiden pretrain` runs as a user runs it (`--grow none`,
its own evaluations and their stretches; its `seconds` count the training
calls, not the evaluations); Keras `fit` gets the same batches as numpy
arrays with `steps_per_execution=32`. Both rates are steady: the tracing of
the first call is left out (kwiden's from its metrics rows after the first,
`fit`'s by a first call that is not timed). The two alternate `--repeats`
times and the ratio is the median's, since these machines are shared.

    python benchmarks/loop_speed.py                         # TensorFlow
    KERAS_BACKEND=jax python benchmarks/loop_speed.py
    python benchmarks/loop_speed.py --sizes 64x2 --seconds 5  # quicker
"""

import argparse
import gzip
import pathlib
import statistics
import tempfile
import time

import common  # noqa: F401  (first: the checkout's kwiden)
import keras
import numpy as np
from common import environment, table

import kwiden
from kwiden.text import corpus
from kwiden.training.compute import flops_per_token

SEQ_LEN, BATCH_SIZE, STEPS_PER_EXECUTION = 128, 16, 32
TOKENS_PER_UPDATE = SEQ_LEN * BATCH_SIZE


def matmul_rate(size=1024, repeats=20):
    """FLOP/s of a float32 matrix product of `size`², compiled as Keras compiles a train step, best of three."""
    a = keras.random.normal((size, size), seed=0)
    b = keras.random.normal((size, size), seed=1)
    if keras.backend.backend() == "jax":
        import jax

        product = jax.jit(lambda a, b: a @ b)
    else:
        import tensorflow as tf

        product = tf.function(lambda a, b: a @ b)
    keras.ops.convert_to_numpy(product(a, b))
    best = np.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            c = product(a, b)
        keras.ops.convert_to_numpy(c)
        best = min(best, (time.perf_counter() - start) / repeats)
    return 2 * size**3 / best


def config(hidden, layers):
    settings = corpus.gpt_config(hidden, layers, SEQ_LEN)
    settings.pop("vocab_size")  # the tokenizer's: bytes
    return settings


def kwiden_rate(text, hidden, layers, updates, folder):
    """Tokens/s of `kwiden.pretrain` after its first metrics row's stretch (whose first call traces)."""
    result = kwiden.pretrain(text, folder, model="gpt", config=config(hidden, layers), budget=updates,
                             seq_len=SEQ_LEN, batch_size=BATCH_SIZE, grow="none", verbose=0)  # fmt: skip
    first, last = result.metrics[1], result.metrics[-1]
    return (last["tokens"] - first["tokens"]) / (last["seconds"] - first["seconds"]), result.model


def fit_rate(ids, hidden, layers, updates):
    """Tokens/s of Keras `fit` on `updates` batches, after an untimed first call."""
    model = kwiden.build_transformer_model({**config(hidden, layers), "vocab_size": 257}, model="gpt")
    model.compile(keras.optimizers.AdamW(1e-3, weight_decay=0.01),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=STEPS_PER_EXECUTION)  # fmt: skip
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(ids) - SEQ_LEN - 1, (updates + STEPS_PER_EXECUTION) * BATCH_SIZE)
    windows = np.stack([ids[s : s + SEQ_LEN + 1] for s in starts]).astype(np.int32)
    warm, timed = windows[: STEPS_PER_EXECUTION * BATCH_SIZE], windows[STEPS_PER_EXECUTION * BATCH_SIZE :]
    model.fit(warm[:, :-1], warm[:, 1:], batch_size=BATCH_SIZE, shuffle=False, verbose=0)
    start = time.perf_counter()
    model.fit(timed[:, :-1], timed[:, 1:], batch_size=BATCH_SIZE, shuffle=False, verbose=0)
    return updates * TOKENS_PER_UPDATE / (time.perf_counter() - start)


def measure(size, args, text, ids, peak):
    hidden, layers = (int(n) for n in size.split("x"))
    # Updates for about --seconds each, from a short probe of fit.
    probe = fit_rate(ids, hidden, layers, STEPS_PER_EXECUTION)
    updates = max(4 * STEPS_PER_EXECUTION, int(args.seconds * probe / TOKENS_PER_UPDATE))
    rates = {"kwiden": [], "fit": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as folder:
            rate, model = kwiden_rate(text, hidden, layers, updates, pathlib.Path(folder) / "run")
        rates["kwiden"].append(rate)
        rates["fit"].append(fit_rate(ids, hidden, layers, updates))
    kwiden_median, fit_median = statistics.median(rates["kwiden"]), statistics.median(rates["fit"])
    flops = flops_per_token(model, SEQ_LEN)
    return [
        f"{hidden} × {layers}",
        f"{model.count_params():,}",
        updates,
        f"{kwiden_median:,.0f}",
        f"{fit_median:,.0f}",
        f"{kwiden_median / fit_median:.2f}×",
        f"{min(r / f for r, f in zip(rates['kwiden'], rates['fit'])):.2f}–"
        f"{max(r / f for r, f in zip(rates['kwiden'], rates['fit'])):.2f}×",
        f"{100 * kwiden_median * flops / peak:.0f}%",
        f"{100 * fit_median * flops / peak:.0f}%",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["64x2", "128x4", "256x4"], help="width x blocks")
    parser.add_argument("--seconds", type=float, default=15, help="training time per run, about")
    parser.add_argument("--repeats", type=int, default=3, help="kwiden and fit alternated this many times")
    parser.add_argument("--output", type=pathlib.Path, help="also write the report here")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    with gzip.open(pathlib.Path(kwiden.__file__).parent / "data" / "python_tutorial.txt.gz", "rb") as f:
        raw = f.read()
    ids = np.frombuffer(raw, dtype=np.uint8).astype(np.int32) + 1
    with tempfile.TemporaryDirectory() as folder:
        text = pathlib.Path(folder) / "text.txt"
        text.write_bytes(raw)
        peak = matmul_rate()
        rows = [measure(size, args, text, ids, peak) for size in args.sizes]
    header = ["model", "parameters", "updates", "kwiden tok/s", "fit tok/s", "kwiden/fit", "range", "kwiden MFU",
              "fit MFU"]  # fmt: skip
    report = "\n".join([
        environment(keras, np, [f"matmul 1024² float32: {peak / 1e9:.1f} GFLOP/s (the MFU's 100%)"]),
        "",
        table(rows, header),
    ])  # fmt: skip
    print(report)
    if args.output:
        args.output.write_text(report + "\n")


if __name__ == "__main__":
    main()
