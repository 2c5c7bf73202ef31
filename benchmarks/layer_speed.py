"""Training-step and inference time of kwiden's BERT against KerasHub's BertBackbone.

Both models get the same config (vocabulary, layers, heads, hidden size, FFN
size, dropout, maximum sequence length, segments), the same batch, the same
loss (mean square of the sequence output against zeros, `loss="mse"`) and the
same compiled step (`model.compile(optimizer="adam", loss="mse")` +
`model.train_on_batch`; `predict_on_batch` for inference). KerasHub's pooler is
left out (its model is cut at `sequence_output`), as kwiden's BERT is built
without one. Warm-up steps are excluded; the models alternate in rounds (which
goes first alternates too) so that noise from a shared machine hits both; the
table reports the median step time and the ratio kwiden / KerasHub, the median
of each round's ratio (target ≤ 1.0).

Keras fixes the backend per process, so the script runs once per backend
(`--backends`, TensorFlow and JAX by default) in a subprocess and prints one
table of both. `jit_compile` is Keras' default, "auto": XLA on JAX, and on
TensorFlow too when every layer supports it; the table says what it resolved to.

Examples:

    python benchmarks/layer_speed.py                    # 4 layers, hidden 256, seq 128, batch 16
    python benchmarks/layer_speed.py --backends jax     # one backend
    python benchmarks/layer_speed.py --dropout 0        # fused attention in both
    python benchmarks/layer_speed.py --layers 12 --hidden 768 --heads 12 --ffn 3072
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from common import add_bert_arguments, bert_config, environment, table

TARGET = 1.0  # kwiden ≤ 1.0 × KerasHub


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_bert_arguments(parser, 4, 256, 4, 1024)
    parser.add_argument("--segments", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--seq", type=int, default=128, help="sequence length")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per model per round")
    parser.add_argument(
        "--act",
        choices=["default", "gelu", "gelu_approximate"],
        default="default",
        help="kwiden's hidden_act: 'default' is kwiden's own default ('gelu', exact "
        "erf); 'gelu_approximate' matches KerasHub's BERT (tanh approximation)",
    )
    parser.add_argument(
        "--jit-compile",
        choices=["auto", "true", "false"],
        default="auto",
        help="passed to model.compile for both models",
    )
    parser.add_argument("--no-train", action="store_true", help="skip the training step")
    parser.add_argument("--no-infer", action="store_true", help="skip inference")
    parser.add_argument("--backends", default="tensorflow,jax", help="one subprocess per backend")
    parser.add_argument("--backend", default=None, help=argparse.SUPPRESS)  # set in each subprocess
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def make_batch(np, args):
    """Token ids in [1, vocab) with padding (id 0) at the end of some rows,
    segment 0 then segment 1, and the matching padding mask."""
    rng = np.random.default_rng(args.seed)
    token_ids = rng.integers(1, args.vocab, size=(args.batch, args.seq), dtype="int32")
    lengths = rng.integers(args.seq // 2, args.seq + 1, size=args.batch)
    positions = np.arange(args.seq)[None, :]
    padding_mask = positions < lengths[:, None]
    token_ids = np.where(padding_mask, token_ids, 0).astype("int32")
    segment_ids = ((positions >= (lengths[:, None] // 2)) & padding_mask).astype("int32")
    return token_ids, segment_ids, padding_mask.astype("int32")


def alternate(fns, warmup, rounds, steps):
    """Time `fns` (name -> callable) in alternating rounds; step times per name."""
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    times = {name: [] for name in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            for _ in range(steps):
                start = time.perf_counter()
                fns[name]()
                times[name].append(time.perf_counter() - start)
    return times


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.backend:
        return measure(args)
    results = []
    for backend in args.backends.split(","):
        command = [sys.executable, __file__, *argv, "--backend", backend]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
        *lines, last = out.strip().splitlines()
        print("\n".join(line for line in lines if line))
        print()
        results.append(json.loads(last))
    header = ["backend", "jit_compile", "step", "kwiden ms", "keras_hub ms", "kwiden/keras_hub", "spread (p25-p75 ms)"]
    rows = [[r["backend"], r["jit_compile"], *row] for r in results for row in r["rows"]]
    print(table(rows, header))
    print()
    for r in results:
        for what, ratio in r["ratios"].items():
            verdict = "MET" if ratio <= TARGET else "NOT MET"
            print(f"{r['backend']} {what}: kwiden / keras_hub = {ratio:.2f}  (target ≤ {TARGET:.1f}: {verdict})")


def measure(args):
    """The measurement, on `args.backend`; prints its own table, then a JSON
    line for `main`."""
    os.environ["KERAS_BACKEND"] = args.backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    import keras
    import keras_hub
    import numpy as np

    import kwiden

    if args.hidden % args.heads:
        raise SystemExit("--hidden must be a multiple of --heads")
    keras.utils.set_random_seed(args.seed)
    jit = {"auto": "auto", "true": True, "false": False}[args.jit_compile]

    print("== kwiden BERT vs KerasHub BertBackbone: step time ==")
    print(environment(keras, np, [f"keras_hub {keras_hub.__version__}"]))
    print(
        f"config: layers={args.layers} hidden={args.hidden} heads={args.heads} "
        f"ffn={args.ffn} vocab={args.vocab} max_positions={args.max_positions} "
        f"segments={args.segments} dropout={args.dropout}; batch={args.batch} "
        f"seq={args.seq}; jit_compile={args.jit_compile}"
    )
    sys.stdout.flush()

    config = bert_config(
        args,
        type_vocab_size=args.segments,
        hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.dropout,
    )
    if args.act == "gelu_approximate":
        from keras_hub.src.utils.keras_utils import gelu_approximate

        config["hidden_act"] = gelu_approximate
    elif args.act == "gelu":
        config["hidden_act"] = "gelu"
    ours = kwiden.build_transformer_model(config, model="bert")

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=args.vocab,
        num_layers=args.layers,
        num_heads=args.heads,
        hidden_dim=args.hidden,
        intermediate_dim=args.ffn,
        dropout=args.dropout,
        max_sequence_length=args.max_positions,
        num_segments=args.segments,
    )
    # The sequence output only (the pooler is not part of kwiden's BERT).
    theirs = keras.Model(backbone.input, backbone.output["sequence_output"], name="keras_hub")
    for name, model in (("kwiden", ours), ("keras_hub", theirs)):
        print(f"{name}: {model.count_params() / 1e6:.2f} M params")

    token_ids, segment_ids, padding_mask = make_batch(np, args)
    x_ours = [token_ids, segment_ids]
    x_theirs = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
    y = np.zeros((args.batch, args.seq, args.hidden), "float32")
    print(
        f"batch: {args.batch}×{args.seq}, {int(padding_mask.sum())} real tokens "
        f"({padding_mask.mean():.0%}); timing: {args.warmup} warm-up steps each, then "
        f"{args.rounds} rounds × {args.steps} steps, alternating"
    )
    sys.stdout.flush()

    rows = []
    ratios = {}
    for model in (ours, theirs):
        model.compile(optimizer="adam", loss="mse", jit_compile=jit)
    if not args.no_train:
        times = alternate(
            {
                "kwiden": lambda: ours.train_on_batch(x_ours, y),
                "keras_hub": lambda: theirs.train_on_batch(x_theirs, y),
            },
            args.warmup,
            args.rounds,
            args.steps,
        )
        ratios["train"] = _rows(rows, "train step", times, args.steps)
    if not args.no_infer:
        times = alternate(
            {
                "kwiden": lambda: ours.predict_on_batch(x_ours),
                "keras_hub": lambda: theirs.predict_on_batch(x_theirs),
            },
            args.warmup,
            args.rounds,
            args.steps,
        )
        ratios["infer"] = _rows(rows, "inference (predict_on_batch)", times, args.steps)

    header = ["step", "kwiden ms", "keras_hub ms", "kwiden/keras_hub", "spread (p25-p75 ms)"]
    print(table(rows, header))
    jit_compile = f"{args.jit_compile} ({ours.jit_compile})"
    print(json.dumps({"backend": keras.backend.backend(), "jit_compile": jit_compile, "rows": rows, "ratios": ratios}))


def _rows(rows, label, times, steps):
    med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}

    def spread(ts):
        q = statistics.quantiles([t * 1e3 for t in ts], n=4)
        return f"{q[0]:.1f}-{q[2]:.1f}"

    # The ratio pairs each round's medians, taken back to back, so that load
    # from other work on a shared machine falls on both sides of each ratio.
    def rounds(ts):
        return [statistics.median(ts[i : i + steps]) for i in range(0, len(ts), steps)]

    ratio = statistics.median(a / b for a, b in zip(rounds(times["kwiden"]), rounds(times["keras_hub"])))
    rows.append(
        [
            label,
            f"{med['kwiden']:.1f}",
            f"{med['keras_hub']:.1f}",
            f"{ratio:.2f}",
            f"{spread(times['kwiden'])} / {spread(times['keras_hub'])}",
        ]
    )
    return ratio


if __name__ == "__main__":
    main()
