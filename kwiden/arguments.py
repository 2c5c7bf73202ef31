"""Options declared once, as data, the one way every entry point declares
them: a dataclass whose fields are `option(...)`, each with its default,
its kind and range, its help, its flag and whether a resume may change it.
From such a dataclass come the command's flags and their `--help`
(`add_flags`), the checks of every value (`checked`), and what a command
line gives (`given`); the entry point's signature spells the same names and
defaults, and tests/test_architecture.py fails when they part. One dataclass
may declare the options of several functions a command calls (growth's:
`kwiden.grow` and `kwiden.grow_checkpoint`): each field says which take it
and where one's default is its own (`taken_by`, `default_in`). Also the one
whole-number check (`is_count`), which every layer may import."""

import argparse
import dataclasses
import fractions
import math
import numbers
import pathlib

# Whether a resume may give another value: "same" (it would compute another run), "free" (how often it
# evaluates or backs up, where its folder is: nothing the run computes).
SAME, FREE = "same", "free"
# The real numbers' kinds: (whether 0 is included, their bound above, whether it is included), and how an error
# spells their range.
RANGES = {
    "positive": (False, math.inf, False, "a positive number"),
    "fraction": (False, 1, False, "in (0, 1)"),
    "share": (False, 1, True, "in (0, 1]"),
    "portion": (True, 1, True, "in [0, 1]"),
    "weight": (True, math.inf, False, "a finite number of at least 0"),
}


def is_count(value, least=0):
    """Whether `value` is a whole number (a NumPy one too, not a bool) of at least `least`."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= least


def option(default, help, kind="text", least=None, most=None, choices=None, resume=SAME, flag=None, metavar=None,
           command=dataclasses.MISSING, why="", parse=None, many=False, takers=None, own=None):  # fmt: skip
    """A field of an options dataclass: `kind` is "count" (a whole number from `least` to `most`), "positive" (a
    finite number above 0), "fraction" (in (0, 1)), "share" (in (0, 1]), "portion" (in [0, 1]), "weight" (a finite
    number of at least 0), "factor" (a number above 0 such as 2, 1.5 or 4/3, read exactly), "choice" (one of
    `choices`), "switch", "text", "path", "checkpoint" (a folder that exists) or "object" (any value: the function
    checks it). `flag`: False where no command offers it; `command`: the command line's own default, for the reason
    `why` says; `parse`: how the command reads a value's text (by default, by its kind); `many`: the flag repeats,
    each a value of a list. Where one dataclass declares the options of several functions: `takers`, those whose
    signatures take it (None: every one), and `own`, `{function: its own default}`, for the reason `why` says."""
    rules = dict(help=help, kind=kind, least=least, most=most, choices=choices, resume=resume, flag=flag,
                 metavar=metavar, command=command, why=why, parse=parse, many=many, takers=takers,
                 own=own or {})  # fmt: skip
    return dataclasses.field(default=default, metadata=rules)


def flag_of(field):
    """The flag of an option: its own, else its name with dashes; None where no command offers it."""
    if field.metadata["flag"] is False:
        return None
    return field.metadata["flag"] or "--" + field.name.replace("_", "-")


def taken_by(options, taker):
    """The fields of `options` that `taker` (one of the functions whose options they declare) takes, in order."""
    return [
        field for field in fields_of(options) if field.metadata["takers"] is None or taker in field.metadata["takers"]
    ]


def default_in(field, taker):
    """An option's default in `taker`: its own where the declaration gives it one, else the field's."""
    return field.metadata["own"].get(taker, field.default)


def factor(text):
    """A factor such as 2, 1.5 or 4/3, read exactly (a `Fraction`)."""
    try:
        return fractions.Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a factor such as 2, 1.5 or 4/3") from None


def reader(field):
    """How a command reads an option's text: its `parse`, else by its kind."""
    kind = field.metadata["kind"]
    return field.metadata["parse"] or (int if kind == "count" else float if kind in RANGES else
                                       factor if kind == "factor" else str)  # fmt: skip


def command_default(field):
    """The default the command line gives an option: the function's, unless the declaration says why not."""
    command = field.metadata["command"]
    return field.default if command is dataclasses.MISSING else command


def defaults(options):
    """`{name: default}` of an options dataclass (or its fields)."""
    return {field.name: field.default for field in fields_of(options)}


def fields_of(options):
    return options if isinstance(options, (list, tuple)) else dataclasses.fields(options)


def checked(options, values, refused=None):
    """`values` (by name; those missing take their defaults) each checked by its field, as its kind's Python value
    (NumPy scalars become Python numbers). `refused(field, value, span)` is the exception raised where a value is not
    of its field's kind or range (`span` says what it must be: "a whole number of at least 1"); by default a
    ValueError that names its flag (`flag_refusal`; `keyword_refusal` names it as a Python caller does)."""
    unknown = sorted(set(values) - {field.name for field in fields_of(options)})
    if unknown:
        raise TypeError(f"unexpected option {unknown[0]!r}; the options are {', '.join(defaults(options))}.")
    return {
        field.name: checked_value(field, values.get(field.name, field.default), refused) for field in fields_of(options)
    }


def flag_refusal(field, value, span):
    shown = str(value) if isinstance(value, fractions.Fraction) else repr(value)  # as the command line gave it
    return ValueError(f"{flag_of(field) or field.name} must be {span}, got {shown}.")


def keyword_refusal(field, value, span):
    span += ", or None" if field.default is None else ""  # what a Python caller may also give
    return ValueError(f"`{field.name}` must be {span} ({field.metadata['help']}), got {field.name}={value!r}.")


def checked_value(field, value, refused=None):
    """`value` checked as `field` declares, as its kind's Python value; `refused` as `checked` takes it."""
    if value is None and field.default is None:
        return None
    fits, value = _fits(field, value)
    if not fits:
        raise (refused or flag_refusal)(field, value, span_of(field))
    if field.metadata["kind"] == "checkpoint" and not pathlib.Path(value).is_dir():
        state = "is not a folder" if pathlib.Path(value).exists() else "does not exist"
        raise ValueError(
            f"{flag_of(field) or field.name} {value} {state}: give a checkpoint folder (Hugging Face: config.json and "
            "model.safetensors; Google: bert_config.json and bert_model.ckpt.*)."
        )
    return value


def _bounds(field):
    """A real kind's `(low, whether it is included, high, whether it is included)`, `least` and `most` (included)
    in place of the kind's where the declaration gives them."""
    rules = field.metadata
    zero, high, high_included, _ = RANGES.get(rules["kind"], (False, math.inf, False, ""))
    low, low_included = (0, zero) if rules["least"] is None else (rules["least"], True)
    if rules["most"] is not None:
        high, high_included = rules["most"], True
    return low, low_included, high, high_included


def _real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _fits(field, value):
    """`(whether value is of field's kind and range, the value as its kind's Python value)`."""
    rules, kind = field.metadata, field.metadata["kind"]
    if kind == "count":
        fits = is_count(value, rules["least"] or 0) and (rules["most"] is None or value <= rules["most"])
        return fits, int(value) if fits else value
    if kind in RANGES or kind == "factor":
        low, low_included, high, high_included = _bounds(field)
        fits = _real(value) and (value >= low if low_included else value > low)
        fits = fits and (value <= high if high_included else value < high)
        return fits, (float(value) if kind in RANGES else value) if fits else value
    if kind == "choice":
        return value in rules["choices"], value
    if kind == "switch":
        fits = isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b" and value.ndim == 0
        return fits, bool(value) if fits else value
    return True, value


def span_of(field):
    """What a value of `field` must be, as a refusal says it."""
    rules, kind = field.metadata, field.metadata["kind"]
    if kind == "count":
        most = rules["most"]
        return f"a whole number from {rules['least'] or 0} to {most}" if most is not None else (
            f"a whole number of at least {rules['least'] or 0}")  # fmt: skip
    if kind == "choice":
        return "one of " + ", ".join(map(str, rules["choices"]))
    if kind == "switch":
        return "True or False"
    if kind in RANGES and rules["least"] is None and rules["most"] is None:
        return RANGES[kind][3]
    if kind in RANGES or kind == "factor":
        low, low_included, high, high_included = _bounds(field)
        such = " such as 2, 1.5 or 4/3" if kind == "factor" else ""
        if high == math.inf:
            return f"a number {'of at least' if low_included else 'above'} {low:g}{such}"
        return f"a number from {low:g} to {high:g}{such}" if low_included and high_included else (
            f"in {'[' if low_included else '('}{low:g}, {high:g}{']' if high_included else ')'}")  # fmt: skip
    return "a " + kind


def help_of(field, known=None, prefix="", where=None):
    """An option's help after `prefix`, with its command-line default (and why it is not the function's, where it
    is not); `known` fills in what it lists (`{name}` in its help, a registry's names). `where`: `{taker: what it
    is for}`, where the command calls one taker or another; an option with defaults of their own, which the command
    leaves to the one it calls, says each."""
    default, text = command_default(field), prefix + field.metadata["help"]
    for name, value in (known or {}).items():
        text = text.replace("{" + name + "}", value)
    if where and field.metadata["own"] and default is None:
        default = ", ".join(f"{default_in(field, taker)} for {label}" for taker, label in where.items())
    if default is not None and default is not False:
        text += f" (default: {default}{': ' + field.metadata['why'] if field.metadata['why'] else ''})"
    return text.replace("%", "%%")


def add_flags(parser, options, skip=(), known=None, prefix=None, where=None):
    """The flags of every option of `options` (a dataclass or its fields) but those named in `skip` and those no
    command offers, with their command-line defaults and help (`known`: what it lists, `help_of`; `prefix(field)`:
    what it starts with; `where`: `{taker: what it is for}`, see `help_of`); returns `{name: flag}`."""
    flags = {}
    for field in fields_of(options):
        if field.name in skip or flag_of(field) is None:
            continue
        rules, flags[field.name] = field.metadata, flag_of(field)
        given = dict(dest=field.name, help=help_of(field, known, prefix(field) if prefix else "", where))
        if rules["kind"] == "switch":
            parser.add_argument(flag_of(field), action="store_true", **given)
            continue
        parser.add_argument(flag_of(field), type=reader(field), default=command_default(field),
                            metavar=rules["metavar"], choices=rules["choices"],
                            action="append" if rules["many"] else "store", **given)  # fmt: skip
    return flags


def given(args, options):
    """The options of `options` an `argparse` namespace holds (those a command offers)."""
    return {field.name: getattr(args, field.name) for field in fields_of(options) if flag_of(field) is not None}


__all__ = [
    "FREE",
    "SAME",
    "add_flags",
    "checked",
    "flag_refusal",
    "keyword_refusal",
    "default_in",
    "defaults",
    "factor",
    "flag_of",
    "given",
    "is_count",
    "option",
    "reader",
    "taken_by",
]
