"""Stage 6 of `grow`: measure the grown model against the small one."""

from kwiden.growth import hub
from kwiden.growth.expansion import GrowthError
from kwiden.growth.graph import is_keras_hub
from kwiden.growth.verify import sample_inputs, verify
from kwiden.messages import warn

ROUNDING = {"float16": 1e-2, "bfloat16": 5e-2}


def default_rtol(model):
    """1e-5 for float32 models; what their rounding allows for half precision."""
    dtypes = {getattr(layer, "compute_dtype", "float32") for layer in model.layers}
    return max([ROUNDING.get(d, 1e-5) for d in dtypes], default=1e-5)


def needs_check(options, approximations):
    """Measure when asked to, when the growth is approximate, and after depth
    growth, whose blocks are found by structure: a wrongly found block shows."""
    return options.check is not None or bool(approximations) or options.deepening


def check(small, big, options, plan=None, approximations=()):
    """Measure `big` against `small` and keep the `VerifyReport` as
    `big.growth_report`: raise if an exact growth is not, warn if an
    approximate one departs."""
    rtol = default_rtol(small) if options.rtol is None else options.rtol
    inputs = options.check
    if is_keras_hub(small):
        if inputs is None:
            raise GrowthError(
                f"This growth of a KerasHub {type(small).__name__} is approximate "
                f"({', '.join(dict.fromkeys(approximations))}); pass `check=` inputs to measure it."
            )
        report = hub.compare(small, big, inputs, options.growth, rtol)
    else:
        report = verify(small, big, sample_inputs(small) if inputs is None else inputs, rtol=rtol, plan=plan)
    big.growth_report = report
    if report.ok:
        return report
    if not options.growth.allow_approximate:
        raise GrowthError(f"The grown model is not exact:\n{report}")
    warn(f"kwiden.grow (allow_approximate=True): the grown model is approximate.\n{report}")
    return report
