"""How fast is `kwiden.grow`? Grow a BERT-base-size model ×k and compare.

Three timings, each the median of `--repeats` runs after one warm-up:

* grow      `kwiden.grow(small, k)`: walk the graph, build the big model,
            compute and assign the grown weights.
* baseline  `kwiden.build_transformer_model(big_config)` + `set_weights` of
            arrays of the same shapes prepared beforehand: what it costs to
            get the big model at all, with weights from elsewhere.
* floor     numpy only: allocate and fill arrays of every big weight's shape
            (`np.empty` + `fill`), the physical cost of writing the bytes.
            A second floor, `np.repeat` of the small weights along the grown
            axes, is shown for reference (a copy-based growth with no scaling).

Peak memory is the peak resident set size (RSS) during the phase above the
RSS at its start: `/proc/self/status` VmHWM after resetting it through
`/proc/self/clear_refs` (Linux); where that is not possible it falls back to
the growth of `resource.getrusage(...).ru_maxrss`, which only sees a new
process-wide high.

Examples:

    python benchmarks/grow_speed.py            # BERT-base ×2 (~2 GB of weights)
    python benchmarks/grow_speed.py --small    # a quick run
    python benchmarks/grow_speed.py --layers 6 --repeats 5 --profile
"""

import argparse
import gc
import os
import platform
import resource
import statistics
import sys
import time

TARGET = 1.0  # grow ≤ 1.0 × baseline


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--ffn", type=int, default=3072, help="intermediate size")
    parser.add_argument("--vocab", type=int, default=21128)
    parser.add_argument("--max-positions", type=int, default=512)
    parser.add_argument("--type-vocab", type=int, default=2)
    parser.add_argument("-k", "--factor", type=int, default=2, help="width factor")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median)")
    parser.add_argument(
        "--small",
        action="store_true",
        help="quick run: 2 layers, hidden 128, 2 heads, FFN 512, vocab 1000, 3 repeats",
    )
    parser.add_argument(
        "--backend", default=None, help="KERAS_BACKEND to use (default: Keras' own setting)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile one grow and print the top calls"
    )
    args = parser.parse_args(argv)
    if args.small:
        args.layers, args.hidden, args.heads, args.ffn = 2, 128, 2, 512
        args.vocab, args.max_positions = 1000, 128
    return args


# Memory.


def _status_kb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _maxrss_kb():
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss // 1024 if sys.platform == "darwin" else rss


class PeakMemory:
    """Peak RSS above the RSS at entry, in bytes (`.peak`); `.method` says how."""

    def __enter__(self):
        gc.collect()
        self.hwm = _reset_peak() and _status_kb("VmHWM") is not None
        self.method = "VmHWM-reset" if self.hwm else "ru_maxrss-delta"
        self.start = _status_kb("VmRSS") if self.hwm else _maxrss_kb()
        return self

    def __exit__(self, *exc):
        end = _status_kb("VmHWM") if self.hwm else _maxrss_kb()
        self.peak = max(0, end - self.start) * 1024


# Timing.


def timed(fn, repeats, cleanup=None):
    """Run `fn` once to warm up, then `repeats` times; median time and max peak."""
    result = fn()
    if cleanup:
        cleanup(result)
    del result
    times, peaks, method = [], [], None
    for _ in range(repeats):
        gc.collect()
        with PeakMemory() as memory:
            start = time.perf_counter()
            result = fn()
            elapsed = time.perf_counter() - start
        times.append(elapsed)
        peaks.append(memory.peak)
        method = memory.method
        if cleanup:
            cleanup(result)
        del result
    return statistics.median(times), times, max(peaks), method


def release_model(model):
    import keras

    del model
    keras.backend.clear_session()
    gc.collect()


def environment(keras, np):
    lines = [
        f"python {platform.python_version()}, numpy {np.__version__}, "
        f"keras {keras.__version__}, backend {keras.backend.backend()}",
    ]
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        lines.append(f"tensorflow {tf.__version__}")
    elif backend == "jax":
        import jax

        lines.append(f"jax {jax.__version__}, devices {jax.devices()}")
    elif backend == "torch":
        import torch

        lines.append(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    lines.append(f"cpu cores: {os.cpu_count()} (usable: {affinity}), {platform.machine()}")
    return "\n".join(lines)


def table(rows, header):
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    out = []
    for n, row in enumerate([header, *rows]):
        cells = [
            str(cell).ljust(widths[i]) if i == 0 else str(cell).rjust(widths[i])
            for i, cell in enumerate(row)
        ]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def gib(nbytes):
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:.2f} GiB"
    return f"{nbytes / 2**20:.0f} MiB"


def main(argv=None):
    args = parse_args(argv)
    if args.backend:
        os.environ["KERAS_BACKEND"] = args.backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    import keras
    import numpy as np

    import kwiden

    k = args.factor
    config = dict(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.ffn,
        max_position_embeddings=args.max_positions,
        type_vocab_size=args.type_vocab,
    )
    big_config = dict(
        config,
        hidden_size=args.hidden * k,
        intermediate_size=args.ffn * k,
        attention_head_size=(args.hidden // args.heads) * k,
    )

    print("== kwiden.grow speed ==")
    print(environment(keras, np))
    print(
        f"small: layers={args.layers} hidden={args.hidden} heads={args.heads} "
        f"ffn={args.ffn} vocab={args.vocab} positions={args.max_positions} "
        f"type_vocab={args.type_vocab}; grow ×{k}; median of {args.repeats} after 1 warm-up"
    )
    sys.stdout.flush()

    small = kwiden.build_transformer_model(config, model="bert")
    small_weights = small.get_weights()

    # Shapes of the big model and arrays to assign, prepared beforehand. The
    # grown model also checks that grow and the builder agree on every shape.
    grown = kwiden.grow(small, k)
    reference = kwiden.build_transformer_model(big_config, model="bert")
    big_shapes = [tuple(w.shape) for w in reference.weights]
    grown_shapes = [tuple(w.shape) for w in grown.weights]
    if grown_shapes != big_shapes:
        raise SystemExit(
            "The grown model's weights differ in shape from the model built from the "
            f"big config:\n{grown_shapes}\n{big_shapes}"
        )
    prepared = grown.get_weights()
    big_bytes = sum(a.nbytes for a in prepared)
    small_params = sum(a.size for a in small_weights)
    big_params = sum(a.size for a in prepared)
    del grown, reference
    keras.backend.clear_session()
    gc.collect()
    print(
        f"params: small {small_params / 1e6:.1f} M, big {big_params / 1e6:.1f} M "
        f"({gib(big_bytes)} of float32 weights)"
    )
    sys.stdout.flush()

    # 1. grow
    def run_grow():
        return kwiden.grow(small, k)

    grow_t, grow_all, grow_mem, method = timed(run_grow, args.repeats, release_model)

    # 2. baseline: build from config + set_weights of prepared arrays
    def run_baseline():
        model = kwiden.build_transformer_model(big_config, model="bert")
        model.set_weights(prepared)
        return model

    base_t, base_all, base_mem, _ = timed(run_baseline, args.repeats, release_model)

    # 3a. floor: allocate + fill every big weight
    def run_fill():
        arrays = []
        for shape in big_shapes:
            a = np.empty(shape, dtype="float32")
            a.fill(0.5)
            arrays.append(a)
        return arrays

    fill_t, fill_all, fill_mem, _ = timed(run_fill, args.repeats)

    # 3b. reference: repeat the small weights along the grown axes
    def run_repeat():
        arrays = []
        for a, shape in zip(small_weights, big_shapes, strict=True):
            for axis, (n_small, n_big) in enumerate(zip(a.shape, shape)):
                if n_big != n_small:
                    a = np.repeat(a, n_big // n_small, axis=axis)
            arrays.append(a)
        return arrays

    rep_t, rep_all, rep_mem, _ = timed(run_repeat, args.repeats)

    def fmt_times(ts):
        return " ".join(f"{t:.2f}" for t in ts)

    header = ["phase", "median s", "runs s", "× baseline", "× floor", f"peak mem ({method})"]
    rows = [
        ["grow", f"{grow_t:.3f}", fmt_times(grow_all), f"{grow_t / base_t:.2f}",
         f"{grow_t / fill_t:.1f}", gib(grow_mem)],
        ["baseline: build + set_weights", f"{base_t:.3f}", fmt_times(base_all), "1.00",
         f"{base_t / fill_t:.1f}", gib(base_mem)],
        ["floor: np.empty + fill", f"{fill_t:.3f}", fmt_times(fill_all),
         f"{fill_t / base_t:.2f}", "1.0", gib(fill_mem)],
        ["ref: np.repeat of small", f"{rep_t:.3f}", fmt_times(rep_all),
         f"{rep_t / base_t:.2f}", f"{rep_t / fill_t:.1f}", gib(rep_mem)],
    ]
    print()
    print(table(rows, header))
    print()
    verdict = "MET" if grow_t / base_t <= TARGET else "NOT MET"
    print(
        f"grow / baseline = {grow_t / base_t:.2f}  (target ≤ {TARGET:.1f}: {verdict});  "
        f"grow / floor = {grow_t / fill_t:.1f};  big weights = {gib(big_bytes)}"
    )
    print(
        "peak mem: peak RSS during the phase above the RSS at its start, max over runs "
        "(includes the framework's variables; the floor rows are pure numpy)."
    )
    sys.stdout.flush()

    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        model = kwiden.grow(small, k)
        profiler.disable()
        release_model(model)
        print("\n== cProfile of one grow (top 25 by cumulative time) ==")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
