"""Grow an optimizer with its model (DESIGN §1.11, §1.11b)."""

import keras

from kwiden.expansion import copy_count, expand_gradient_like, growth_scale
from kwiden.optimizers import AccumulatingOptimizer

# The optimizers whose slots kwiden knows how to grow: first moments like
# gradients (power 1), second moments like their squares (power 2). Keras' SGD
# keeps −lr·m, still linear in the gradients.
SLOTS = {"momentums": 1, "_momentums": 1, "velocities": 2, "_velocities": 2, "_velocity_hats": 2}
SUPPORTED = (AccumulatingOptimizer, keras.optimizers.SGD, keras.optimizers.Adam)


def grow_optimizer(optimizer, small, big, axes_by_path, scale_learning_rates=True):
    """An optimizer of `optimizer`'s class for `big`, its slots grown from
    `optimizer`'s (built on `small`), its iteration count kept. For kwiden's
    optimizers, each variable's growth `(c, copies)` is recorded in
    `growth_scales`, from which the optimizer sets its step (and Adam's ε) so
    that the first steps follow the small model's trajectory (DESIGN §1.11b).
    Keras' optimizers get their state grown but keep one learning rate."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise ValueError(
            "Pass the inner optimizer (`optimizer.inner_optimizer`) to kwiden.grow; "
            "compile the grown model under the same dtype policy to wrap it again."
        )
    if not isinstance(optimizer, SUPPORTED):
        raise ValueError(
            f"kwiden.grow cannot grow the state of {type(optimizer).__name__}: it knows "
            "kwiden's optimizers and Keras' SGD, Adam and AdamW. Grow without "
            "`optimizer=` and compile the grown model with a new optimizer."
        )
    small_variables = small.trainable_variables
    if not optimizer.built:
        optimizer.build(small_variables)
    config = optimizer.get_config()
    if scale_learning_rates and isinstance(optimizer, AccumulatingOptimizer):
        scales = dict(optimizer.growth_scales)
        for variable in small_variables:
            axes = axes_by_path[variable.path]
            c, copies = scales.get(variable.path, (1.0, 1))
            scales[variable.path] = (c * growth_scale(axes), copies * copy_count(axes))
        config["growth_scales"] = scales
    grown = optimizer.__class__.from_config(config)
    big_variables = {v.path: v for v in big.trainable_variables}
    grown.build(list(big_variables.values()))
    grown.iterations.assign(optimizer.iterations)
    for name, power in SLOTS.items():
        small_slots, big_slots = getattr(optimizer, name, None), getattr(grown, name, None)
        if not small_slots or not big_slots:
            continue
        for variable in small_variables:
            slot = small_slots[optimizer._get_variable_index(variable)]
            target = big_variables[variable.path]
            value = expand_gradient_like(keras.ops.convert_to_numpy(slot), axes_by_path[variable.path], power)
            big_slots[grown._get_variable_index(target)].assign(value)
    return grown
