"""Every use of Keras internals in kwiden, in one small module.

Walking a functional graph, finding the layer that made a tensor and reading
an optimizer's slots need attributes Keras does not export. When Keras
changes them, this file is the one to mend.
"""

import json
import zipfile

from keras.src.models.functional import Functional

# An optimizer's slot lists, and how each grows with its variable: first
# moments like gradients (power 1), second moments like their squares (power
# 2). Keras' SGD keeps −lr·m, still linear in the gradients.
OPTIMIZER_SLOTS = {"momentums": 1, "_momentums": 1, "velocities": 2, "_velocities": 2, "_velocity_hats": 2}


def is_functional(model):
    """Whether `model` is a functional model, whose graph can be walked."""
    return isinstance(model, Functional)


def is_plain_functional(model):
    """Whether `model` is Keras' own functional model (`keras.Model(inputs,
    outputs)`), not one of a subclass."""
    return type(model) is Functional


def nodes_by_depth(model):
    """`{depth: [node]}` of a functional model; inputs at the deepest level."""
    return model._nodes_by_depth


def producer(tensor):
    """The layer whose call made the symbolic `tensor`."""
    return tensor._keras_history.operation


def all_layers(model):
    """Every layer of `model`, nested ones included."""
    return model._flatten_layers()


def optimizer_slots(optimizer):
    """`[(name, slot variables, power)]` of the slot lists `optimizer` keeps."""
    slots = []
    for name, power in OPTIMIZER_SLOTS.items():
        variables = getattr(optimizer, name, None)
        if variables:
            slots.append((name, variables, power))
    return slots


def variable_index(optimizer, variable):
    """Where `variable`'s slots sit in each of `optimizer`'s slot lists."""
    return optimizer._get_variable_index(variable)


def slot_of(optimizer, slots, variable):
    """The slot in `slots` (one of `optimizer`'s lists) that belongs to `variable`."""
    return slots[variable_index(optimizer, variable)]


def compile_arguments(model):
    """The arguments `model.compile` was called with, as given (the live loss
    and metric objects, not their serialised config), or None if it was not."""
    config = getattr(model, "_compile_config", None)
    return None if config is None else dict(config.config)


def saved_optimizer_config(path):
    """The serialised optimizer a `.keras` file was compiled with (the
    archive's `config.json`), or None where it was saved uncompiled."""
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    return (config.get("compile_config") or {}).get("optimizer")


def seed_generator_states(model):
    """The state variables of the random-number generators of `model`'s
    layers (Dropout's), in layer order. `model.save` does not keep them."""
    return [g.state for layer in model._flatten_layers() for g in getattr(layer, "_seed_generators", [])]


def inner_optimizer(optimizer):
    """The optimizer under a `LossScaleOptimizer` (mixed_float16 wraps it), or `optimizer` itself."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def build_for_training(model, batch):
    """Make the variables of `model`'s optimizer and compiled metrics from the shapes of one `batch`, before its
    train step is traced. Keras' fit does so on JAX and PyTorch; on TensorFlow without a distribution strategy it
    leaves them to the first trace, and TensorFlow traces a function that makes variables twice."""
    with model.distribute_strategy.scope():
        model._symbolic_build(data_batch=batch)
