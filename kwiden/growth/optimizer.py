"""Stage 5 of `grow`: grow an optimizer with its model
(docs/optimizer-state.md#growing-the-moments, docs/optimizer-state.md#learning-rate-multipliers)."""

import typing

import keras

from kwiden.growth.arguments import DEFAULT_STATE
from kwiden.growth.expansion import (
    GrowthError,
    copy_count,
    expand_gradient_like,
    first_copies,
    growth_scale,
    outer_product,
    spread_variance_factor,
)
from kwiden.keras_internals import optimizer_slots, slot_of, variable_index
from kwiden.optimizers import AccumulatingOptimizer

# The optimizers whose slots kwiden knows how to grow (`keras_internals.OPTIMIZER_SLOTS`).
SUPPORTED = (AccumulatingOptimizer, keras.optimizers.SGD, keras.optimizers.Adam)


class VariableSource(typing.NamedTuple):
    """Where a grown variable comes from."""

    path: str  # the small model's variable
    fresh: bool = False  # a copied block's zeroed output weight: no state to carry
    copy: bool = False  # in a copied block (depth growth)


def grow_optimizer(
    optimizer,
    small,
    big,
    axes_by_path,
    scale_learning_rates=None,
    sources=None,
    state=DEFAULT_STATE,
    rewarm=0,
    relax=0,
    spread=0.0,
):
    """An optimizer of `optimizer`'s class for `big`, its slots grown from
    `optimizer`'s (built on `small`), its iteration count kept. For kwiden's
    optimizers, each variable's growth `(c, copies)` is recorded in
    `growth_scales`, from which the optimizer sets its step (and Adam's ε) so
    that the first steps follow the small model's trajectory (docs/optimizer-state.md#learning-rate-multipliers).
    Keras' optimizers get their state grown but keep one learning rate.

    `sources` maps a big variable's path to its `VariableSource` where depth
    growth renamed or copied it (`fresh`: its slots start at zero, as for the
    zeroed output projections of new blocks); by default paths are equal.

    `state`: `"grown"` grows every slot with its weight; `"source"` keeps the
    grown slots on each tensor's original slice and zeroes them on the new
    copies (and in copied blocks); `"grown_v"` grows the second moments
    only (a fresh weight's from the weight it copies) and starts the first
    moments at zero, so the first steps after growth are small and follow
    the gradients seen since; `"zero"` starts every slot at zero.
    `spread`: the spread the weights were split with; the second moments of
    the tensors that write a split space are raised by what it adds to their
    gradients' mean square (`spread_variance_factor`), so that the copies'
    first steps are not larger than the small model's.
    `rewarm > 0` (kwiden's optimizers) gives the new copies a learning-rate
    multiplier that climbs from 0 to 1 over `rewarm` updates, through
    `slice_multipliers` and `slice_warmup` (docs/optimizer-state.md#per-slice-multipliers).
    `relax > 0` (with `scale_learning_rates`) moves the step multipliers to 1
    over `relax` updates from now, through `growth_relax`
    (docs/optimizer-state.md#relaxing-to-one-rate).
    """
    _check_growable(optimizer)
    small_variables = {v.path: v for v in small.trainable_variables}
    if not optimizer.built:
        optimizer.build(list(small_variables.values()))
    _check_built_on(optimizer, small)
    big_variables = big.trainable_variables
    source = {v.path: (sources or {}).get(v.path, VariableSource(v.path)) for v in big_variables}
    config = optimizer.get_config()
    if isinstance(optimizer, AccumulatingOptimizer):
        config.update(_rate_settings(optimizer, small_variables, big_variables, source, axes_by_path,
                                     scale_learning_rates, relax, rewarm))  # fmt: skip
    else:
        _check_one_rate(optimizer, scale_learning_rates, rewarm)
    grown = optimizer.__class__.from_config(config)
    grown.build(big_variables)
    # A copy, not the small optimizer's buffer (which JAX would donate to the big model's training).
    grown.iterations.assign(keras.ops.convert_to_numpy(optimizer.iterations))
    if state != "zero":
        _grow_slots(optimizer, grown, small_variables, big_variables, source, axes_by_path, state, spread)
    return grown


def _check_growable(optimizer):
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


def _rate_settings(optimizer, small_variables, big_variables, source, axes_by_path, scale_learning_rates, relax,
                   rewarm):  # fmt: skip
    """The grown kwiden optimizer's per-tensor and per-slice learning-rate settings (its config's keys)."""
    settings = {}
    updates = int(keras.ops.convert_to_numpy(optimizer.iterations)) // optimizer.accum_steps
    if scale_learning_rates is not False:
        try:
            settings["growth_scales"] = _learning_rate_scales(optimizer, big_variables, source, axes_by_path, updates)
            # This growth's relaxation replaces an earlier one, which `_learning_rate_scales` folded in.
            settings["growth_relax"] = (updates, relax) if relax else None
        except GrowthError:
            if scale_learning_rates:
                raise  # asked for; None: one rate where no one multiplier fits a tensor
    # An earlier growth's slice multipliers do not fit the grown shapes: this growth's replace them.
    settings["slice_multipliers"], settings["slice_warmup"] = None, None
    if rewarm:
        settings["slice_multipliers"] = _new_copies(small_variables, big_variables, source, axes_by_path)
        settings["slice_warmup"] = (updates, rewarm)
    return settings


def _check_one_rate(optimizer, scale_learning_rates, rewarm):
    """Keras' optimizers have one learning rate: refuse what needs more."""
    if rewarm:
        raise ValueError(
            f"`rewarm` needs one of kwiden's optimizers (per-slice learning rates); {type(optimizer).__name__} "
            "has one learning rate per model: grow with rewarm=0."
        )
    if scale_learning_rates:
        kwiden_name = {"SGD": "SGDM"}.get(type(optimizer).__name__, type(optimizer).__name__)
        raise ValueError(
            f"`scale_learning_rates=True` needs one of kwiden's optimizers (per-tensor learning rates); "
            f"{type(optimizer).__name__} has one learning rate per model: grow with scale_learning_rates=None "
            f"(one rate here) or train with kwiden.optimizers.{kwiden_name}."
        )


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


def _learning_rate_scales(optimizer, big_variables, source, axes_by_path, updates):
    """`{big variable path: (c, copies)}`: each variable's growth scale, on
    top of what earlier growths recorded, as far as their relaxation had
    moved it to 1 by `updates` (docs/optimizer-state.md#learning-rate-multipliers)."""
    relaxed = optimizer.relaxed_after(updates)
    scales = {}
    for variable in big_variables:
        small_path = source[variable.path].path
        axes = axes_by_path[small_path]
        c, copies = optimizer.growth_scales.get(small_path, (1.0, 1))
        if relaxed:
            c, copies = optimizer.relaxed_growth(c, copies, relaxed)
        try:
            scales[variable.path] = (c * growth_scale(axes), copies * copy_count(axes))
        except GrowthError as error:
            raise GrowthError(
                f"{error} So no one learning-rate multiplier fits '{variable.path}': grow the "
                "optimizer with scale_learning_rates=False, or grow by an integer factor."
            ) from None
    return scales


def _grow_slots(optimizer, grown, small_variables, big_variables, source, axes_by_path, state, spread):
    """Each slot of `grown` from its source variable's slot in `optimizer`,
    grown like a gradient (first moments) or its square (second moments,
    raised for the spread);
    what `state` leaves out keeps zeros: fresh variables (but their second
    moments under "grown_v"), new copies under "source", first moments under
    "grown_v"."""
    big_slots = {name: slots for name, slots, _ in optimizer_slots(grown)}
    source_slice_only = state == "source"
    for name, small_slots, power in optimizer_slots(optimizer):
        if name not in big_slots or (state == "grown_v" and power == 1):
            continue
        for variable in big_variables:
            origin = source[variable.path]
            if (origin.fresh and state != "grown_v") or (source_slice_only and origin.copy):
                continue
            small = small_variables[origin.path]
            slot = slot_of(optimizer, small_slots, small)
            axes = axes_by_path[origin.path]
            value = expand_gradient_like(keras.ops.convert_to_numpy(slot), axes, power)
            if power == 2:
                value = (value * spread_variance_factor(axes, tuple(small.shape), spread)).astype(value.dtype)
            if source_slice_only:
                value = value * outer_product(first_copies(axes, tuple(small.shape)), value.ndim).astype(value.dtype)
            slot_of(grown, big_slots[name], variable).assign(value)


def _new_copies(small_variables, big_variables, source, axes_by_path):
    """`slice_multipliers` that are 0 on the new copies of each grown
    variable (every element of a copied block) and 1 on its original slice."""
    multipliers = {}
    for variable in big_variables:
        origin = source[variable.path]
        if origin.copy and len(variable.shape):
            multipliers[variable.path] = [[0.0] * variable.shape[0]] + [None] * (len(variable.shape) - 1)
            continue
        vectors = first_copies(axes_by_path[origin.path], tuple(small_variables[origin.path].shape))
        if any(vector is not None for vector in vectors):
            multipliers[variable.path] = [None if v is None else v.tolist() for v in vectors]
    return multipliers


def variable_sources(placed):
    """`{big variable path: VariableSource}`: where each grown variable comes
    from; the zeroed output weights of new blocks start fresh, and so does
    every weight of a newly initialised block."""
    sources = {}
    for entry in placed:
        fresh = set(entry.layer.residual_output_weights) if entry.zeroed else set()
        if entry.fresh:
            fresh = {variable.name for variable in entry.layer.trainable_weights}
        for variable in getattr(entry.layer, "trainable_weights", []):
            small_path = entry.source_name + variable.path[len(entry.layer.name) :]
            sources[variable.path] = VariableSource(small_path, variable.name in fresh, entry.copy)
    return sources
