"""Stage 5 of `grow`: grow an optimizer with its model
(docs/optimizer-state.md#growing-the-moments, docs/optimizer-state.md#learning-rate-multipliers)."""

import keras

from kwiden.expansion import GrowthError, copy_count, expand_gradient_like, growth_scale
from kwiden.keras_internals import optimizer_slots, slot_of, variable_index
from kwiden.optimizers import AccumulatingOptimizer

# The optimizers whose slots kwiden knows how to grow (`keras_internals.OPTIMIZER_SLOTS`).
SUPPORTED = (AccumulatingOptimizer, keras.optimizers.SGD, keras.optimizers.Adam)


def grow_optimizer(optimizer, small, big, axes_by_path, scale_learning_rates=True, sources=None):
    """An optimizer of `optimizer`'s class for `big`, its slots grown from
    `optimizer`'s (built on `small`), its iteration count kept. For kwiden's
    optimizers, each variable's growth `(c, copies)` is recorded in
    `growth_scales`, from which the optimizer sets its step (and Adam's ε) so
    that the first steps follow the small model's trajectory (docs/optimizer-state.md#learning-rate-multipliers).
    Keras' optimizers get their state grown but keep one learning rate.

    `sources` maps a big variable's path to `(small path, fresh)` where depth
    growth renamed or copied it (`fresh`: its slots start at zero, as for the
    zeroed output projections of new blocks); by default paths are equal.
    """
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
    small_variables = {v.path: v for v in small.trainable_variables}
    if not optimizer.built:
        optimizer.build(list(small_variables.values()))
    _check_built_on(optimizer, small)
    big_variables = big.trainable_variables
    source = {v.path: (sources or {}).get(v.path, (v.path, False)) for v in big_variables}
    config = optimizer.get_config()
    if scale_learning_rates and isinstance(optimizer, AccumulatingOptimizer):
        config["growth_scales"] = _learning_rate_scales(optimizer, big_variables, source, axes_by_path)
    grown = optimizer.__class__.from_config(config)
    grown.build(big_variables)
    grown.iterations.assign(optimizer.iterations)
    _grow_slots(optimizer, grown, small_variables, big_variables, source, axes_by_path)
    return grown


def _check_built_on(optimizer, model):
    """The optimizer must hold state for `model`'s variables, not another model's."""
    try:
        for variable in model.trainable_variables:
            variable_index(optimizer, variable)
    except KeyError:
        raise ValueError(
            f"`optimizer` ({type(optimizer).__name__}) was built on other variables than those of model '{model.name}' "
            f"(its state has no slot for '{variable.path}'): pass the optimizer the small model was trained "
            "with (small.optimizer)."
        ) from None


def _learning_rate_scales(optimizer, big_variables, source, axes_by_path):
    """`{big variable path: (c, copies)}`: each variable's growth scale, on
    top of what earlier growths recorded (docs/optimizer-state.md#learning-rate-multipliers)."""
    scales = {}
    for variable in big_variables:
        small_path = source[variable.path][0]
        axes = axes_by_path[small_path]
        c, copies = optimizer.growth_scales.get(small_path, (1.0, 1))
        try:
            scales[variable.path] = (c * growth_scale(axes), copies * copy_count(axes))
        except GrowthError as error:
            raise GrowthError(
                f"{error} So no one learning-rate multiplier fits '{variable.path}': grow the "
                "optimizer with scale_learning_rates=False, or grow by an integer factor."
            ) from None
    return scales


def _grow_slots(optimizer, grown, small_variables, big_variables, source, axes_by_path):
    """Each slot of `grown` from its source variable's slot in `optimizer`,
    grown like a gradient (first moments) or its square (second moments);
    fresh variables keep zeros."""
    big_slots = {name: slots for name, slots, _ in optimizer_slots(grown)}
    for name, small_slots, power in optimizer_slots(optimizer):
        if name not in big_slots:
            continue
        for variable in big_variables:
            small_path, fresh = source[variable.path]
            if fresh:
                continue
            slot = slot_of(optimizer, small_slots, small_variables[small_path])
            value = expand_gradient_like(keras.ops.convert_to_numpy(slot), axes_by_path[small_path], power)
            slot_of(grown, big_slots[name], variable).assign(value)


def variable_sources(placed):
    """`{big variable path: (small variable path, fresh)}`: where each grown
    variable comes from; the zeroed output weights of new blocks start fresh."""
    sources = {}
    for entry in placed:
        fresh = set(entry.layer.residual_output_weights) if entry.zeroed else set()
        for variable in getattr(entry.layer, "trainable_weights", []):
            small_path = entry.source_name + variable.path[len(entry.layer.name) :]
            sources[variable.path] = (small_path, variable.name in fresh)
    return sources
