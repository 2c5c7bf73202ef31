"""Optimizers with accumulation inside momentum, measured side by side with Keras'.

1. Memory: float slots per weight and bytes for a BERT-base-size model, against
   Keras' own `gradient_accumulation_steps` (one extra buffer per weight).
2. Step time against `keras.optimizers.Adam`, same model and batch, same
   process, alternating rounds, as a ratio (target <= 1.05).
3. Quality on real text (the Python tutorial shipped with kwiden, byte-level
   GPT): batch 8 x accumulation 8 vs batch 64 vs batch 8 without accumulation,
   the same number of examples; final validation loss.

    python benchmarks/optimizers.py            # all three, about 5 minutes on 2 cores
    python benchmarks/optimizers.py --quick    # smaller sizes
"""

import argparse
import statistics
import time

import keras
import numpy as np
from common import table

import kwiden
from kwiden import corpus, optimizers


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


def step_time(args):
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
    ids = rng.integers(1, 8000, (16, 128)).astype("int32")
    x, y = [ids, np.zeros_like(ids)], rng.normal(size=(16, 128, args.time_hidden)).astype("float32")
    makers = {
        "keras Adam": lambda: keras.optimizers.Adam(1e-4),
        "kwiden Adam": lambda: optimizers.Adam(1e-4),
        "kwiden Adam, accum_steps=4": lambda: optimizers.Adam(1e-4, accum_steps=4),
    }
    models = {}
    for name, make in makers.items():
        keras.utils.set_random_seed(0)
        model = kwiden.build_transformer_model(config)
        model.compile(make(), "mse")
        for _ in range(3):
            model.train_on_batch(x, y)
        models[name] = model
    times = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            start = time.perf_counter()
            model.train_on_batch(x, y)
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["keras Adam"])
    rows = [
        (name, f"{statistics.median(t) * 1e3:.1f}", f"{statistics.median(t) / base:.3f}") for name, t in times.items()
    ]
    print_table(
        f"Training-step time, BERT {args.time_layers}x{args.time_hidden}, batch 16x128, median of {args.rounds} alternating rounds",
        ("optimizer", "ms/step", "ratio to keras Adam"),
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
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--examples", type=int, default=9600)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    if args.quick:
        args.layers, args.hidden, args.rounds, args.examples = 2, 256, 10, 2048
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}")
    memory(args)
    step_time(args)
    quality(args)


if __name__ == "__main__":
    main()
