"""Peak memory (max RSS) of `kwiden.pretrain` before its first update: a GPT 768×8 target (57M parameters,
217 MiB of float32 weights) grown from 384×8 at half the run. Planning should hold about the first model, not
the target (nor two). Run it against a checkout: `PYTHONPATH=CHECKOUT python benchmarks/plan_memory.py LABEL`.

Measured (2 shared CPU cores, TensorFlow 2.21): before the one loop and the planner (5f81e16) +630 MiB over
the import; after, +131 MiB."""

import importlib
import pathlib
import resource
import sys
import tempfile

import kwiden

# Where the first stretch of updates starts: the one loop's runner, or the older pretraining's.
RUNNERS = [("kwiden.training.loop", "run_stretch"), ("kwiden.pretraining.trainer", "train_stretch")]
CONFIG = dict(hidden_size=768, num_hidden_layers=8, num_attention_heads=12, intermediate_size=3072,
              max_position_embeddings=64)  # fmt: skip


class FirstUpdate(Exception):
    pass


def stop_at_the_first_update():
    def stop(*args, **kwargs):
        raise FirstUpdate()

    for module_name, attribute in RUNNERS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, attribute):
            setattr(module, attribute, stop)


def main(label):
    stop_at_the_first_update()
    after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    folder = pathlib.Path(tempfile.mkdtemp())
    (folder / "text.txt").write_text("kwiden grows models. " * 4000)
    try:
        kwiden.pretrain([str(folder / "text.txt")], str(folder / "run"), model="gpt", config=CONFIG, grow="0.5:k=2",
                        budget=20, seq_len=16, batch_size=2, verbose=0)  # fmt: skip
    except FirstUpdate:
        pass
    else:
        raise SystemExit("the run trained without reaching a stretch runner this script knows")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{label}: max RSS before the first update {peak / 1024:.0f} MiB, {(peak - after_import) / 1024:+.0f} MiB "
          f"over the import ({after_import / 1024:.0f} MiB)")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "kwiden")
