"""Reading a `config.json` into the sizes a builder needs.

A config comes from up to three sources: a file, a dict and keyword
overrides, later ones winning. A family translates each source from Hugging
Face's keys to kwiden's on its own (`Family.from_hf_config`), so that an
override in kwiden's words beats the file's key in Hugging Face's.
"""

import json
import math
import numbers
import pathlib

from kwiden.arguments import is_count
from kwiden.files import find_key, read_text

REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
DEFAULTS = {
    "intermediate_size": None,  # 4 × hidden_size
    "attention_head_size": None,  # hidden_size / num_attention_heads
    "hidden_act": "gelu",
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
}


# The numbers a config holds, under Hugging Face's keys and kwiden's, and what
# each must be (`check_numbers`); None is left to the defaults. The REQUIRED
# sizes (under any of their names) are checked once the sources are merged
# (`complete_config`).
EPSILONS = ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps")
ROTARY_BASES = ("rope_theta", "rotary_base")
SIZES = ("intermediate_size", "max_position_embeddings", "num_key_value_heads", "head_dim", "attention_head_size",
         "type_vocab_size", "n_inner", "n_positions", "d_ff", "d_kv")  # fmt: skip
DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout", "resid_pdrop", "attn_pdrop",
            "dropout_rate")  # fmt: skip


def _real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _positive(value):
    return _real(value) and math.isfinite(value) and value > 0


def _probability(value):
    return _real(value) and 0 <= value < 1


# key: (the test its value passes, what the value must be).
NUMBER_RULES = {
    **dict.fromkeys(EPSILONS, (_positive, "a finite number above 0 (the norms divide by √(variance + ε)), such as 1e-05")),
    **dict.fromkeys(ROTARY_BASES, (_positive, "a finite number above 0 (the rotary base), such as 10000.0")),
    **dict.fromkeys(SIZES, (lambda value: is_count(value, 1), "a whole number, at least 1")),
    **dict.fromkeys(DROPOUTS, (_probability, "a probability in [0, 1), such as 0.1")),
}  # fmt: skip


def config_sources(config=None, config_path=None, overrides=None):
    """The file's dict, `config` and `overrides`, in the order they apply,
    each checked (`check_numbers`)."""
    sources = [] if config_path is None else [(read_config_file(config_path), f"the config file {config_path}")]
    sources += [(dict(config or {}), "`config`"), (dict(overrides or {}), "the keyword arguments")]
    for source, where in sources:
        check_numbers(source, where)
    return [source for source, _ in sources]


def check_numbers(config, where="the config"):
    """Refuse, naming the key, a value a model would be built wrong from: an
    ε or a rotary base that is not a finite number above 0 (NaN outputs, or a
    default put in its place), a size that is not a whole number, a dropout
    rate outside [0, 1).

    >>> check_numbers({"rms_norm_eps": -1e-5})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: rms_norm_eps=-1e-05 in the config must be a finite number above 0 (the norms divide ...), such as 1e-05.
    """
    parameters = config.get("rope_parameters")
    nested = {"rope_parameters.rope_theta": parameters.get("rope_theta")} if isinstance(parameters, dict) else {}
    for key, value in {**config, **nested}.items():
        test, wanted = NUMBER_RULES.get(key.rsplit(".", 1)[-1], (None, None))
        if test is not None and value is not None and not test(value):
            raise ValueError(f"{key}={value!r} in {where} must be {wanted}.")


def read_config_file(config_path):
    """The dict in a `config.json`; a one-line error naming the file where it
    is missing, a folder, not JSON (with the error's position) or not an object.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "config.json")
    >>> _ = open(path, "w").write('{"hidden_size": 8,}')
    >>> read_config_file(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: The config file .../config.json is not valid JSON: Expecting property name ... at line 1, column 19 ...
    """
    path = pathlib.Path(config_path)
    text = read_text(
        path,
        "The config file",
        "a config.json, or `config`",
        in_folder="the config.json in it",
        not_utf8=", so not JSON",
    )
    try:
        config = json.loads(text, parse_constant=_Constant, parse_float=_finite_or_constant)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"The config file {path} is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno} "
            f"(character {error.pos}). Fix it, or pass `config` instead."
        ) from None
    if not isinstance(config, dict):
        raise ValueError(
            f"The config file {path} holds a JSON {type(config).__name__}, not an object of keys such as hidden_size."
        )
    constant = find_key(config, lambda value: isinstance(value, _Constant))
    if constant is not None:
        raise ValueError(
            f"The config file {path} holds {constant[0]}: {constant[1]}, which is not JSON (JSON has no NaN or "
            "infinities; a number past float's range reads as one) and no value a model can be built from; write a "
            "finite number there."
        )
    return config


def _finite_or_constant(text):
    """A JSON number, or, where it is past float's range (`1e999`), the text: as refused as `Infinity`."""
    value = float(text)
    return value if math.isfinite(value) else _Constant(text)


class _Constant(str):
    """The `NaN`, `Infinity` or `-Infinity` Python's JSON parser reads, kept
    as its text so that `read_config_file` can name its key."""


def renamed(config, names):
    """`config` with each key of `names` (Hugging Face's) also given under its
    value (kwiden's); a key given in Hugging Face's words wins, as the file
    that spells it that way means it.

    >>> renamed({"rms_norm_eps": 1e-5, "layer_norm_eps": 1e-12}, {"rms_norm_eps": "layer_norm_eps"})
    {'rms_norm_eps': 1e-05, 'layer_norm_eps': 1e-05}
    """
    config = dict(config)
    for hf_key, key in names.items():
        if config.get(hf_key) is not None:
            config[key] = config[hf_key]
    return config


def complete_config(config, defaults=None):
    """Check the required sizes and fill what `config` leaves out: `defaults`
    (a family's own) first, then BERT's. Keys the builders do not use are
    kept (a Hugging Face config has many)."""
    missing = [key for key in REQUIRED if config.get(key) is None]
    if missing:
        raise ValueError(
            f"The transformer config lacks {', '.join(missing)}; give them in "
            "`config`, in the file at `config_path`, or as keyword arguments."
        )
    wrong = {
        key: config[key] for key in REQUIRED if not is_count(config[key], least=0 if key == "num_hidden_layers" else 1)
    }
    if wrong:
        raise ValueError(
            f"The transformer config's {', '.join(f'{key}={value!r}' for key, value in wrong.items())} must be "
            "whole numbers (at least 1; num_hidden_layers at least 0)."
        )
    config = dict(config)
    for key, value in {**DEFAULTS, **(defaults or {})}.items():
        if config.get(key) is None:
            config[key] = value
    if config["intermediate_size"] is None:
        config["intermediate_size"] = 4 * config["hidden_size"]
    if config["attention_head_size"] is None:
        config["attention_head_size"] = _head_size(config["hidden_size"], config["num_attention_heads"])
    return config


def _head_size(hidden, heads):
    if hidden % heads:
        raise ValueError(
            f"hidden_size={hidden} is not a multiple of num_attention_heads="
            f"{heads}; give `attention_head_size` explicitly."
        )
    return hidden // heads


def load_config(config=None, config_path=None, defaults=None, **overrides):
    """Merge a config dict, a `config.json` file and keyword overrides.

    Later sources win: the file, then `config`, then `overrides`; `defaults`
    (a model family's own) fill what none of them gives, then BERT's.

    >>> load_config(dict(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2))["attention_head_size"]
    4
    """
    merged = {}
    for source in config_sources(config, config_path, overrides):
        merged.update(source)
    return complete_config(merged, defaults)
