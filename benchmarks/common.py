"""What the benchmark scripts share: the environment line and the table printer.

Importing this module puts the checkout it sits in first on `sys.path`, so that
a benchmark imported after it measures this checkout's kwiden: `python
benchmarks/x.py` puts only `benchmarks/` there, and kwiden would otherwise come
from the editable install, which may be another worktree's code.
"""

import os
import pathlib
import platform
import sys
import time

CHECKOUT = pathlib.Path(__file__).resolve().parent.parent
if sys.path[:1] != [str(CHECKOUT)]:
    sys.path.insert(0, str(CHECKOUT))
if "kwiden" in sys.modules and not sys.modules["kwiden"].__file__.startswith(str(CHECKOUT / "kwiden")):
    raise RuntimeError(
        f"kwiden was imported from {sys.modules['kwiden'].__file__} before benchmarks/common.py; "
        "import common first, so that the benchmark measures this checkout's kwiden."
    )


def environment(keras, np, extra=()):
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
    kwiden = sys.modules.get("kwiden")
    if kwiden is not None:
        lines.append(f"kwiden from {pathlib.Path(kwiden.__file__).parent}")
    lines.extend(extra)
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    lines.append(f"cpu cores: {os.cpu_count()} (usable: {affinity}), {platform.machine()}")
    return "\n".join(lines)


def table(rows, header):
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    out = []
    for n, row in enumerate([header, *rows]):
        cells = [str(cell).ljust(widths[i]) if i == 0 else str(cell).rjust(widths[i]) for i, cell in enumerate(row)]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def add_bert_arguments(parser, layers, hidden, heads, ffn):
    """The BERT size options both speed benchmarks take, with their defaults."""
    parser.add_argument("--layers", type=int, default=layers)
    parser.add_argument("--hidden", type=int, default=hidden)
    parser.add_argument("--heads", type=int, default=heads)
    parser.add_argument("--ffn", type=int, default=ffn, help="intermediate size")
    parser.add_argument("--vocab", type=int, default=21128)
    parser.add_argument("--max-positions", type=int, default=512)


def bert_config(args, **extra):
    """The `build_transformer_model` config of the `add_bert_arguments` options."""
    return dict(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.ffn,
        max_position_embeddings=args.max_positions,
        **extra,
    )


def finish(text, started, out=None):
    """Print a benchmark's report with its wall time since `started` (`time.perf_counter()`), and write it to
    `out` where given."""
    text += f"\n\nWall time: {(time.perf_counter() - started) / 60:.0f} minutes.\n"
    print(text)
    if out:
        out.write_text(text, encoding="utf-8")
