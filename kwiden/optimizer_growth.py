"""Grow an optimizer with its model (DESIGN §1.11, §1.11b)."""

import re

import keras
import numpy as np

from kwiden.expansion import expand_gradient_like, growth_scale
from kwiden.optimizers import SGDM, AccumulatingOptimizer

# Slot lists of Keras' and kwiden's optimizers, and how each grows: first
# moments like gradients (power 1), second moments like their squares (2).
SLOTS = {"momentums": 1, "_momentums": 1, "velocities": 2, "_velocities": 2, "_velocity_hats": 2}


def learning_rate_scale(axes, optimizer):
    """The learning-rate multiplier that keeps a grown tensor's first steps on
    the small model's trajectory. Adam-like steps are normalised, so the step
    must shrink with the tensor: `c`. SGD's step is `lr·g̃` with
    `g̃ = g/(c·K)`, so it needs `c²·K` (K: copies per source element). RAdam
    gets Adam's `c`: its first updates (while ρ_t is small) are momentum steps,
    for which `c` is not the right factor, so growth during them does not
    follow the small trajectory as closely."""
    c = growth_scale(axes)
    if isinstance(optimizer, SGDM):
        copies = int(np.prod([spec[0].factor for spec in axes if spec is not None]))
        return c * c * copies
    return c


def grow_optimizer(optimizer, small, big, axes_by_path, scale_learning_rates=True):
    """An optimizer of `optimizer`'s class for `big`, its slots grown from
    `optimizer`'s (built on `small`), its iteration count kept. For kwiden's
    optimizers, each variable's learning-rate multiplier is multiplied by its
    `learning_rate_scale`."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise ValueError(
            "Pass the inner optimizer (`optimizer.inner_optimizer`) to kwiden.grow; "
            "compile the grown model under the same dtype policy to wrap it again."
        )
    small_variables = small.trainable_variables
    if not optimizer.built:
        optimizer.build(small_variables)
    config = optimizer.get_config()
    if scale_learning_rates and isinstance(optimizer, AccumulatingOptimizer):
        multipliers = {}
        for variable in small_variables:
            scale = learning_rate_scale(axes_by_path[variable.path], optimizer)
            multipliers[f"^{re.escape(variable.path)}$"] = optimizer._multiplier_of(variable) * scale
        config["lr_multipliers"] = multipliers
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
