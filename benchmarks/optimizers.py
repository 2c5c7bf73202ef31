"""Optimizers with accumulation inside momentum, measured side by side with Keras'.

1. Memory: float slots per weight and bytes for a BERT-base-size model, against
   Keras' own `gradient_accumulation_steps` (one extra buffer per weight).
2. Step time against `keras.optimizers.Adam`, same model and batch, same
   process, alternating rounds, as a ratio (target <= 1.05), with and without
   accumulation, through `fit` and `train_on_batch`, and the first call's time
   (tracing and compiling; target <= 1.1), on TensorFlow and on JAX: the
   section runs once per backend in a subprocess (`--backends`), since Keras
   fixes the backend per process, and prints one table.
3. Quality on real text (the Python tutorial shipped with kwiden, byte-level
   GPT): batch 8 x accumulation 8 vs batch 64 vs batch 8 without accumulation,
   the same number of examples; final validation loss.

    python benchmarks/optimizers.py                      # all three, about 15 minutes on 2 cores
    python benchmarks/optimizers.py --quick              # smaller sizes
    python benchmarks/optimizers.py --only step-time     # the step-time table alone
"""

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import keras
import numpy as np
from common import environment, table

import kwiden
from kwiden import optimizers
from kwiden.text import corpus


def print_table(title, header, rows):
    print(f"\n{title}")
    print(table(rows, header))


def bert_config(args):
    return dict(
        vocab_size=21128,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        intermediate_size=4 * args.hidden,
    )


def memory(args):
    model = kwiden.build_transformer_model(bert_config(args))
    weights = model.trainable_variables
    params = sum(int(np.prod(w.shape)) for w in weights)
    k = args.accum
    candidates = [
        ("kwiden SGDM(accum_steps=k)", optimizers.SGDM(0.01, accum_steps=k)),
        (
            "keras SGD(momentum, gradient_accumulation_steps=k)",
            keras.optimizers.SGD(0.01, momentum=0.9, gradient_accumulation_steps=k),
        ),
        ("kwiden Adam(accum_steps=k)", optimizers.Adam(accum_steps=k)),
        ("keras Adam(gradient_accumulation_steps=k)", keras.optimizers.Adam(gradient_accumulation_steps=k)),
    ]
    rows = []
    for name, optimizer in candidates:
        optimizer.build(weights)
        floats = sum(int(np.prod(v.shape)) for v in optimizer.variables if len(v.shape))
        rows.append((name, f"{floats / params:.2f}", f"{floats * 4 / 2**20:,.0f} MiB"))
    print_table(
        f"Optimizer memory, BERT {args.layers}x{args.hidden} ({params / 1e6:.1f}M weights), k={k}",
        ("optimizer", "float slots per weight", "slot bytes"),
        rows,
    )


STEP_BACKENDS = ("tensorflow", "jax")
PATHS = ("fit", "train_on_batch")


def step_time_here(args):
    """Step and first-call times on this process' backend: for each path and
    each optimizer a fresh model, traced by its first call (timed), then
    `--rounds` alternating rounds of `--steps` steps. Returns the medians."""
    config = dict(
        bert_config(args),
        num_hidden_layers=args.time_layers,
        hidden_size=args.time_hidden,
        num_attention_heads=args.time_hidden // 64,
        intermediate_size=4 * args.time_hidden,
        vocab_size=8000,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    rng = np.random.default_rng(0)
    batch, steps = 16, args.steps
    ids = rng.integers(1, 8000, (batch, args.time_seq)).astype("int32")
    x, y = [ids, np.zeros_like(ids)], rng.normal(size=(batch, args.time_seq, args.time_hidden)).astype("float32")
    # fit runs `steps` steps per call, over the same batch repeated.
    x_fit, y_fit = [np.tile(a, (steps, 1)) for a in x], np.tile(y, (steps, 1, 1))
    makers = {
        "keras": lambda: keras.optimizers.Adam(1e-4),
        "kwiden": lambda: optimizers.Adam(1e-4),
        "keras accum 4": lambda: keras.optimizers.Adam(1e-4, gradient_accumulation_steps=4),
        "kwiden accum 4": lambda: optimizers.Adam(1e-4, accum_steps=4),
    }

    def model_with(make):
        keras.utils.set_random_seed(0)
        model = kwiden.build_transformer_model(config)
        model.compile(make(), "mse")
        return model

    def run(path, model):
        if path == "fit":
            model.fit(x_fit, y_fit, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        else:
            for _ in range(steps):
                model.train_on_batch(x, y)

    # One untimed model first: the process' one-off costs (XLA, the backend's
    # caches) would otherwise fall on whichever optimizer is traced first.
    warm_up = model_with(makers["keras"])
    for path in PATHS:
        run(path, warm_up)
    first, times = {}, {}
    for p, path in enumerate(PATHS):
        models = {}
        names = list(makers) if p % 2 == 0 else list(makers)[::-1]
        # The fastest of a few fresh models: tracing is fixed work, and on a
        # shared machine anything slower is noise.
        for repeat in range(args.trace_repeats):
            for name in names if repeat % 2 == 0 else names[::-1]:
                model = models[name] = model_with(makers[name])
                # The previous models' garbage (graphs, traces) is collected
                # now, not during the timed call.
                gc.collect()
                start = time.perf_counter()
                if path == "fit":
                    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
                else:
                    model.train_on_batch(x, y)
                seconds = time.perf_counter() - start
                first[path, name] = min(first.get((path, name), seconds), seconds)
        for name in names:
            run(path, models[name])
            times[path, name] = []
        # A round is one accumulation cycle of each model, back to back, so
        # that the ratios below pair times taken under the same load.
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                start = time.perf_counter()
                run(path, models[name])
                times[path, name].append((time.perf_counter() - start) / steps)
    return {
        "backend": keras.backend.backend(),
        "first": {f"{path}|{name}": t for (path, name), t in first.items()},
        "step": {f"{path}|{name}": t for (path, name), t in times.items()},
    }


def paired_ratio(ours, theirs):
    """The median over rounds of each round's ratio."""
    return statistics.median(a / b for a, b in zip(ours, theirs))


def step_time(args):
    """`step_time_here` in one subprocess per backend (Keras fixes the backend
    per process), then one table."""
    results = []
    for backend in args.backends.split(","):
        command = [sys.executable, __file__, "--step-time-json", *sys.argv[1:]]
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    rows = []
    for result in results:
        first, step = result["first"], result["step"]
        for path in PATHS:
            for accum, ours, theirs in ((1, "kwiden", "keras"), (4, "kwiden accum 4", "keras accum 4")):
                kw, ke, plain = (step[f"{path}|{n}"] for n in (ours, theirs, "keras"))
                kw_first, ke_first = first[f"{path}|{ours}"], first[f"{path}|{theirs}"]
                rows.append(
                    (
                        result["backend"],
                        path,
                        accum,
                        f"{statistics.median(kw) * 1e3:.1f}",
                        f"{statistics.median(ke) * 1e3:.1f}",
                        f"{paired_ratio(kw, ke):.3f}",
                        f"{paired_ratio(kw, plain):.3f}",
                        f"{kw_first:.2f}",
                        f"{ke_first:.2f}",
                        f"{kw_first / ke_first:.3f}",
                    )
                )
    print_table(
        f"Training-step time, kwiden Adam / keras Adam (accum 4: Keras' gradient_accumulation_steps=4), "
        f"BERT {args.time_layers}x{args.time_hidden}, batch 16x{args.time_seq}, jit_compile='auto'; "
        f"medians of {args.rounds} alternating rounds of {args.steps} steps (ratios: median of the rounds' ratios); "
        f"first call = tracing and compiling, fastest of {args.trace_repeats} fresh models",
        (
            "backend",
            "path",
            "accum",
            "kwiden ms",
            "keras ms",
            "ratio",
            "ratio to keras, no accum",
            "first call kwiden s",
            "keras s",
            "ratio",
        ),
        rows,
    )


def quality(args):
    ids = corpus.encode(corpus.load_text())
    split = int(0.9 * len(ids))
    rng = np.random.default_rng(0)
    x_valid, y_valid = corpus.windows(ids[split:], 64, 512, rng)
    examples = args.examples
    x_train, y_train = corpus.windows(ids[:split], 64, examples, rng)
    config = corpus.gpt_config(64, 2, 64)
    runs = [("batch 8, accumulation 8", 8, 8), ("batch 64", 64, 1), ("batch 8, no accumulation", 8, 1)]
    rows = []
    for name, batch, accum in runs:
        keras.utils.set_random_seed(0)
        model = kwiden.build_transformer_model(config, model="gpt")
        model.compile(
            optimizers.Adam(args.lr, accum_steps=accum), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        start = time.perf_counter()
        model.fit(x_train, y_train, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        seconds = time.perf_counter() - start
        loss = model.evaluate(x_valid, y_valid, batch_size=128, verbose=0)
        rows.append((name, examples // (batch * accum), f"{loss:.4f}", f"{seconds:.0f}"))
    print_table(
        f"Quality: byte-level GPT 2x64 on the Python tutorial, {examples} examples of 64 bytes, Adam lr {args.lr}",
        ("run", "updates", "valid loss", "seconds"),
        rows,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--accum", type=int, default=4)
    parser.add_argument("--time-layers", type=int, default=4)
    parser.add_argument("--time-hidden", type=int, default=256)
    parser.add_argument("--time-seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=4, help="steps per round (and per fit call)")
    parser.add_argument("--trace-repeats", type=int, default=3, help="fresh models per optimizer for the first call")
    parser.add_argument("--backends", default=",".join(STEP_BACKENDS), help="for the step time, one subprocess each")
    parser.add_argument("--only", choices=["memory", "step-time", "quality"], help="run one section")
    parser.add_argument("--step-time-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--examples", type=int, default=9600)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    if args.quick:
        args.layers, args.hidden, args.examples = 2, 256, 2048
        args.time_layers, args.time_seq, args.rounds, args.trace_repeats = 2, 64, 6, 1
    if args.step_time_json:
        print(json.dumps(step_time_here(args)))
        return
    print(environment(keras, np))
    sections = {"memory": memory, "step-time": step_time, "quality": quality}
    for name, section in sections.items():
        if args.only in (None, name):
            section(args)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
