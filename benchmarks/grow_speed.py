"""How fast is `kwiden.grow`? Grow a BERT-base-size model ×k and compare.

Three timings, each the median of `--repeats` runs after one warm-up; the
phases run in rotating order within each round so that noise from a shared
machine hits all of them:

* grow      `kwiden.grow(small, k)`: walk the graph, build the big model,
            compute and assign the grown weights.
* baseline  `kwiden.build_transformer_model(big_config)` + `set_weights` of
            arrays of the same shapes prepared beforehand: what it costs to
            get the big model at all, with weights from elsewhere.
* floor     numpy only: allocate and fill arrays of every big weight's shape
            (`np.empty` + `fill`), the physical cost of writing the bytes.
            A second line, `np.repeat` of the small weights along the grown
            axes, is shown for reference (copying growth without any scaling).

Memory, two columns:

* peak RSS Δ  the peak resident set size during a timed run above the RSS at
              its start: `/proc/self/status` VmHWM after resetting it through
              `/proc/self/clear_refs` (Linux); elsewhere the growth of
              `resource.getrusage(...).ru_maxrss` (only sees a new
              process-wide high). Sees the framework's variables; misses
              memory the allocator reuses from an earlier run.
* numpy peak  `tracemalloc` peak of Python/numpy allocations in one extra,
              untimed run (numpy reports its buffers to tracemalloc;
              TensorFlow/JAX buffers are not traced). For grow this is the
              transient cost of computing the grown weights.

Examples:

    python benchmarks/grow_speed.py            # BERT-base ×2 (1.4 GiB of big weights)
    python benchmarks/grow_speed.py --small    # a quick run
    python benchmarks/grow_speed.py --layers 6 --repeats 5 --profile
"""

import argparse
import gc
import os
import resource
import statistics
import sys
import time

from common import add_bert_arguments, bert_config, environment, table

TARGET = 1.0  # grow ≤ 1.0 × baseline


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_bert_arguments(parser, 12, 768, 12, 3072)
    parser.add_argument("--type-vocab", type=int, default=2)
    parser.add_argument("-k", "--factor", type=int, default=2, help="width factor")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median)")
    parser.add_argument(
        "--small",
        action="store_true",
        help="quick run: 2 layers, hidden 128, 2 heads, FFN 512, vocab 1000, 128 positions",
    )
    parser.add_argument("--backend", default=None, help="KERAS_BACKEND to use (default: Keras' own setting)")
    parser.add_argument("--no-tracemalloc", action="store_true", help="skip the untimed tracemalloc runs")
    parser.add_argument("--profile", action="store_true", help="also cProfile one grow and print the top calls")
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


def alternate(phases, repeats):
    """Time each phase once to warm up, then `repeats` rounds in rotating order.

    `phases` maps a name to `(fn, cleanup)`; `fn()` returns what `cleanup`
    releases. Returns name -> (sorted-by-round times, max peak RSS Δ, method).
    """
    names = list(phases)
    for name in names:
        fn, cleanup = phases[name]
        result = fn()
        cleanup(result)
        del result
    times = {name: [] for name in names}
    peaks = {name: 0 for name in names}
    method = None
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            fn, cleanup = phases[name]
            gc.collect()
            with PeakMemory() as memory:
                start = time.perf_counter()
                result = fn()
                elapsed = time.perf_counter() - start
            times[name].append(elapsed)
            peaks[name] = max(peaks[name], memory.peak)
            method = memory.method
            cleanup(result)
            del result
    return times, peaks, method


def numpy_peak(fn, cleanup):
    """Peak of numpy/Python allocations during `fn()` (tracemalloc), in bytes."""
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    cleanup(result)
    return peak


def release_model(model):
    import keras

    keras.backend.clear_session()


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
    config = bert_config(args, type_vocab_size=args.type_vocab)
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
        f"params: small {small_params / 1e6:.1f} M, big {big_params / 1e6:.1f} M ({gib(big_bytes)} of float32 weights)"
    )
    sys.stdout.flush()

    def run_grow():
        return kwiden.grow(small, k)

    def run_baseline():
        model = kwiden.build_transformer_model(big_config, model="bert")
        model.set_weights(prepared)
        return model

    def run_fill():
        arrays = []
        for shape in big_shapes:
            a = np.empty(shape, dtype="float32")
            a.fill(0.5)
            arrays.append(a)
        return arrays

    def run_repeat():
        arrays = []
        for a, shape in zip(small_weights, big_shapes, strict=True):
            for axis, (n_small, n_big) in enumerate(zip(a.shape, shape)):
                if n_big != n_small:
                    a = np.repeat(a, n_big // n_small, axis=axis)
            arrays.append(a)
        return arrays

    def drop(result):
        pass

    phases = {
        "grow": (run_grow, release_model),
        "baseline": (run_baseline, release_model),
        "fill": (run_fill, drop),
        "repeat": (run_repeat, drop),
    }
    times, peaks, method = alternate(phases, args.repeats)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    traced = {}
    if not args.no_tracemalloc:
        for name, (fn, cleanup) in phases.items():
            traced[name] = numpy_peak(fn, cleanup)

    labels = {
        "grow": "grow",
        "baseline": "baseline: build + set_weights",
        "fill": "floor: np.empty + fill",
        "repeat": "ref: np.repeat of small",
    }
    header = ["phase", "median s", "runs s", "× baseline", "× floor", "peak RSS Δ", "numpy peak"]
    rows = []
    for name, label in labels.items():
        rows.append(
            [
                label,
                f"{median[name]:.3f}",
                " ".join(f"{t:.2f}" for t in times[name]),
                f"{median[name] / median['baseline']:.2f}",
                f"{median[name] / median['fill']:.1f}",
                gib(peaks[name]),
                gib(traced[name]) if name in traced else "-",
            ]
        )
    ratio_base = median["grow"] / median["baseline"]
    ratio_floor = median["grow"] / median["fill"]
    print()
    print(table(rows, header))
    print()
    verdict = "MET" if ratio_base <= TARGET else "NOT MET"
    print(
        f"grow / baseline = {ratio_base:.2f}  (target ≤ {TARGET:.1f}: {verdict});  "
        f"grow / floor = {ratio_floor:.1f};  big weights = {gib(big_bytes)}"
    )
    print(
        f"peak RSS Δ: peak resident memory during the phase above that at its start "
        f"({method}), max over the timed runs; it includes the framework's variables but "
        "misses memory the allocator reuses from earlier runs."
    )
    if traced:
        print(
            "numpy peak: tracemalloc peak of Python/numpy allocations in one extra, "
            "untimed run (TensorFlow/JAX buffers are not traced)."
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
