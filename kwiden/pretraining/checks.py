"""What `kwiden.pretrain` refuses before it reads the corpus, beside its
options' own checks (`kwiden.pretraining.options`): a target whose training
would not fit in memory."""

from kwiden.memory import accelerated, available_memory, device_memory
from kwiden.memory import readable_size as _gb
from kwiden.training.compute import parameters_of, training_memory


def memory(target, options):
    """Refuse, before building it, a target whose training would not fit in the memory available now: the
    accelerator's where Keras computes on one and its backend says it (`kwiden.memory.device_memory`), else the
    host's."""
    on_device = device_memory() if accelerated() else None
    available = on_device if on_device is not None else (None if accelerated() else available_memory())
    weights, activations = training_memory(parameters_of(target), target, options.batch_size, options.seq_len)
    if available is not None and weights + activations > available:
        raise ValueError(
            f"The target (hidden_size {target['hidden_size']} × {target['num_hidden_layers']} blocks, about "
            f"{_billions(parameters_of(target))} parameters) needs about {_gb(weights + activations)} to train "
            f"({_gb(weights)} for the weights, their gradients and Adam's moments; {_gb(activations)} for a batch of "
            f"{options.batch_size} × {options.seq_len} tokens), and {_gb(available)} is available: give a smaller --config, "
            "or a smaller --batch-size with more --accum-steps (the same update, in smaller pieces)."
            + (" (The memory is the accelerator's.)" if on_device is not None else "")
        )


def _billions(count):
    return f"{count / 1e9:.3g} billion" if count < 1e12 else f"{count:.3g}"
