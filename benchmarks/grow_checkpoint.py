"""Growing a checkpoint tensor by tensor (`kwiden.grow_checkpoint`) against
loading it, `kwiden.grow` and `kwiden.save_checkpoint`: peak memory and time.

A LLaMA-shaped float32 checkpoint (hidden 2048, FFN 5632, 16 heads of 128
with 4 key/value heads, vocabulary 32000, 3 blocks: about 1.06 GB; `--quick`:
hidden 512, FFN 1408, vocabulary 8000, 2 blocks) is written tensor by tensor
into a temporary folder, then grown ×2 (`heads="count"`, `spread=3`, seed 0)
by each method in a fresh subprocess, so that each peak RSS (VmHWM of that
process) is the method's own. A third subprocess only imports kwiden:
the fixed cost both pay (Python, TensorFlow, Keras). Both results are
compared tensor by tensor (they must be equal bit for bit); the folders are
deleted afterwards.

    python benchmarks/grow_checkpoint.py            # ~1 GB -> ~4.2 GB
    python benchmarks/grow_checkpoint.py --quick    # ~60 MB
    python benchmarks/grow_checkpoint.py --output benchmarks/results/grow_checkpoint.txt
"""

import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
FULL = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=16, num_key_value_heads=4,
            vocab_size=32000, num_hidden_layers=3)  # fmt: skip
QUICK = dict(hidden_size=512, intermediate_size=1408, num_attention_heads=8, num_key_value_heads=2,
             vocab_size=8000, num_hidden_layers=2)  # fmt: skip
OPTIONS = dict(k=2, heads="count", spread=3.0, seed=0)


def make_checkpoint(folder, sizes):
    """A random LLaMA checkpoint, written one tensor at a time (the maker holds one)."""
    import keras
    import numpy as np

    import kwiden
    from kwiden import checkpoints
    from kwiden.models import llama
    from kwiden.models.layout import Layout, checkpoint_shape

    config = {"model_type": "llama", "rms_norm_eps": 1e-5, "tie_word_embeddings": False, **sizes}
    with keras.StatelessScope(initialize_variables=False):  # shapes only
        model = kwiden.build_transformer_model(config)
        hf_config = llama.to_hf_config(model)
        names = llama.checkpoint_names(sizes["num_hidden_layers"])
        specs = []
        for layer in model.layers:
            for variable in layer.weights:
                name, kind = names[layer.name, variable.name]
                specs.append((name, "float32", checkpoint_shape(variable.shape, Layout.of(kind, "hf"))))
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2))
    rng = np.random.default_rng(0)
    with checkpoints.SafetensorsWriter(folder / checkpoints.SAFETENSORS, specs) as writer:
        for name, dtype, shape in specs:
            writer.write(name, rng.normal(0.0, 0.02, shape).astype(dtype))
    return sum(int(np.prod(shape)) * 4 for _, _, shape in specs)


def run_method(method, src, dst):
    """In this (child) process: grow `src` into `dst`; print time and peak RSS as JSON."""
    start = time.perf_counter()
    import kwiden

    imported = time.perf_counter()
    if method == "stream":
        kwiden.grow_checkpoint(src, dst, **OPTIONS)
    elif method == "keras":
        small = kwiden.build_transformer_model(checkpoint_path=src)
        big = kwiden.grow(small, **OPTIONS)
        del small
        kwiden.save_checkpoint(big, dst)
    end = time.perf_counter()
    print(json.dumps({"seconds": end - imported, "import_seconds": imported - start, "peak_bytes": peak_rss()}))


def peak_rss():
    """This process's peak resident set size: VmHWM, which starts afresh at exec (Linux). `ru_maxrss` would
    start from the RSS of the parent at the fork, here the parent that wrote the checkpoint."""
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def child(method, src, dst):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, __file__, "--child", method, str(src), str(dst)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode:
        raise RuntimeError(f"{method} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def same_tensors(a, b):
    from kwiden.checkpoints import SAFETENSORS, SAFETENSORS_INDEX, read_tensors

    def reader(folder):
        index = folder / SAFETENSORS_INDEX
        return read_tensors("hf", index if index.exists() else folder / SAFETENSORS)

    a, b = reader(a), reader(b)
    return sorted(a) == sorted(b) and all(a[name].tobytes() == b[name].tobytes() for name in a)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a ~60 MB checkpoint")
    parser.add_argument("--workdir", default=None, help="where the checkpoints go (default: a new folder in /tmp)")
    parser.add_argument("--output", default=None, help="also write the report to this file")
    parser.add_argument("--child", nargs=3, metavar=("METHOD", "SRC", "DST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return run_method(*args.child)
    import keras
    import numpy as np
    from common import environment, table

    sizes = QUICK if args.quick else FULL
    work = pathlib.Path(tempfile.mkdtemp(prefix="kwiden-bench-", dir=args.workdir))
    try:
        source_bytes = make_checkpoint(work / "small", sizes)
        baseline = child("import", work / "small", work / "none")
        results = {}
        for method in ("stream", "keras"):
            results[method] = child(method, work / "small", work / method)
        grown_bytes = sum(p.stat().st_size for p in (work / "stream").glob("*.safetensors"))
        identical = same_tensors(work / "stream", work / "keras")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    gb = 1e9
    stream, keras_path = results["stream"], results["keras"]
    base = baseline["peak_bytes"]
    rows = [
        ("import kwiden only", f"{base / gb:.2f}", "-", f"{baseline['import_seconds']:.1f}"),
        *(
            (
                title,
                f"{r['peak_bytes'] / gb:.2f}",
                f"{(r['peak_bytes'] - base) / gb:.2f}",
                f"{r['seconds']:.1f}",
            )
            for title, r in (("grow_checkpoint (tensor by tensor)", stream), ("load, grow, save (Keras)", keras_path))
        ),
    ]
    shape = ", ".join(f"{key} {value}" for key, value in sizes.items())
    report = "\n".join(
        [
            "kwiden.grow_checkpoint vs load -> kwiden.grow -> save_checkpoint, LLaMA-shaped float32 checkpoint",
            f"source: {shape}; {source_bytes / gb:.2f} GB -> grown x2 (heads='count', spread=3): {grown_bytes / gb:.2f} GB",
            environment(keras, np),
            "",
            table(rows, ("method", "peak RSS GB", "above import GB", "seconds")),
            "",
            f"peak RSS, Keras / tensor by tensor: {keras_path['peak_bytes'] / stream['peak_bytes']:.2f}x "
            f"(above the import: {(keras_path['peak_bytes'] - base) / max(stream['peak_bytes'] - base, 1):.2f}x)",
            f"time, Keras / tensor by tensor: {keras_path['seconds'] / stream['seconds']:.2f}x",
            f"grown tensors identical bit for bit: {identical}",
        ]
    )
    print(report)
    if args.output:
        pathlib.Path(args.output).write_text(report + "\n")
    return 0 if identical else 1


if __name__ == "__main__":
    # This checkout's kwiden ahead of the editable install (which may be another
    # worktree's), in the children too; not through `common`, which the
    # children do not import (they measure kwiden's memory alone).
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    sys.exit(main())
