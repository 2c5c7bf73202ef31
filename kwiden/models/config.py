"""Reading a `config.json` into the sizes a builder needs.

A config comes from up to three sources: a file, a dict and keyword
overrides, later ones winning. A family translates each source from Hugging
Face's keys to kwiden's on its own (`Family.from_hf_config`), so that an
override in kwiden's words beats the file's key in Hugging Face's.
"""

import json
import numbers
import pathlib

from kwiden.files import read_text

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


def config_sources(config=None, config_path=None, overrides=None):
    """The file's dict, `config` and `overrides`, in the order they apply."""
    sources = [] if config_path is None else [read_config_file(config_path)]
    return sources + [dict(config or {}), dict(overrides or {})]


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
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"The config file {path} is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno} "
            f"(character {error.pos}). Fix it, or pass `config` instead."
        ) from None
    if not isinstance(config, dict):
        raise ValueError(
            f"The config file {path} holds a JSON {type(config).__name__}, not an object of keys such as hidden_size."
        )
    return config


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
        key: config[key] for key in REQUIRED if not _is_count(config[key], least=0 if key == "num_hidden_layers" else 1)
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


def _is_count(value, least):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= least


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
