"""What the benchmark scripts share: the environment line and the table printer."""

import os
import platform


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
