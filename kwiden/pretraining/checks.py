"""What `kwiden.pretrain` refuses before it trains, each check naming the
flag: numbers of the wrong kind or range, a target whose training would not
fit in memory."""

import math
import numbers
import pathlib

from kwiden import recipe
from kwiden.compute import parameters_of, training_memory
from kwiden.memory import available_memory
from kwiden.optimizers.schedules import SCHEDULES


def numbers_and_names(a):
    """Refuse numbers of the wrong kind or range, naming the flag; NumPy scalars become Python numbers
    (run.json keeps them)."""

    def flag(name):
        return "--" + name.replace("_", "-")

    def whole(name, smallest, largest=None):
        value = a[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or value < smallest
            or (largest is not None and value > largest)
        ):
            span = f"from {smallest} to {largest}" if largest is not None else f"of at least {smallest}"
            raise ValueError(f"{flag(name)} must be a whole number {span}, got {value!r}.")
        a[name] = int(value)

    def real(name, low, high, high_included):
        value = a[name]
        fits = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if not (fits and low < value and (value <= high if high_included else value < high)):
            span = "a positive number" if high == math.inf else f"in (0, {high}{']' if high_included else ')'}"
            raise ValueError(f"{flag(name)} must be {span}, got {value!r}.")
        a[name] = float(value)

    for name in ("budget", "seq_len", "batch_size", "accum_steps"):
        whole(name, 1 if name != "seq_len" else 4)
    whole("seed", 0, 2**32 - 1)
    for name in ("warmup", "eval_every", "save_every", "build_vocab"):
        if a[name] is not None:
            whole(name, 0 if name == "warmup" else 1)
    real("lr", 0, math.inf, False)
    real("decay_fraction", 0, 1, True)
    real("valid_fraction", 0, 1, False)
    if a["schedule"] not in SCHEDULES:
        raise ValueError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {a['schedule']!r}.")
    if a["tokenizer"] is not None and a["build_vocab"] is not None:
        raise ValueError("Give --tokenizer or --build-vocab, not both.")
    if a["config"] is None and a["from_checkpoint"] is None:
        raise ValueError("Give the target model: --config config.json (with --model), or --from CHECKPOINT.")
    if a["from_checkpoint"] is not None and not pathlib.Path(a["from_checkpoint"]).is_dir():
        state = "is not a folder" if pathlib.Path(a["from_checkpoint"]).exists() else "does not exist"
        raise ValueError(
            f"--from {a['from_checkpoint']} {state}: give a checkpoint folder (Hugging Face: config.json and "
            "model.safetensors; Google: bert_config.json and bert_model.ckpt.*)."
        )
    recipe.parse(a["grow"])


def memory(target, a):
    """Refuse, before building it, a target whose training on the CPU would not fit in the memory available now."""
    available = available_memory()
    weights, activations = training_memory(parameters_of(target), target, a["batch_size"], a["seq_len"])
    if available is not None and weights + activations > available:
        raise ValueError(
            f"The target (hidden_size {target['hidden_size']} × {target['num_hidden_layers']} blocks, about "
            f"{_billions(parameters_of(target))} parameters) needs about {_gb(weights + activations)} to train "
            f"({_gb(weights)} for the weights, their gradients and Adam's moments; {_gb(activations)} for a batch of "
            f"{a['batch_size']} × {a['seq_len']} tokens), and {_gb(available)} is available: give a smaller --config, "
            "or a smaller --batch-size with more --accum-steps (the same update, in smaller pieces)."
        )


def _billions(count):
    return f"{count / 1e9:.3g} billion" if count < 1e12 else f"{count:.3g}"


def _gb(size):
    return f"{size / 1e9:.3g} GB" if size < 1e12 else f"{size / 1e12:.3g} TB"
