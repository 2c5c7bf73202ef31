"""`generation_config.json`: what a checkpoint folder says about generating
from it, as transformers reads it. kwiden reads its `eos_token_id` (one id
or a list) and its `max_length` (the longest sequence, prompt and new tokens
together: where `kwiden pretrain` records the length its run trained), and
writes the second into a run's `final/`."""

import json
import pathlib

from kwiden.arguments import is_count
from kwiden.files import read_json, replaced_atomically

GENERATION_CONFIG = "generation_config.json"
# The token ids transformers' GenerationConfig.from_model_config takes from config.json: a folder that has a
# generation_config.json is read from it alone, so these go in beside max_length.
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def read_generation_config(folder):
    """`(its keys, its path)`: the folder's `generation_config.json`, or `({}, None)` where it has none."""
    path = pathlib.Path(folder) / GENERATION_CONFIG
    if not path.is_file():
        return {}, None
    settings = read_json(path, f"{path} is not JSON", "repair it")
    if not isinstance(settings, dict):
        raise ValueError(f"{path} holds a {type(settings).__name__}, not the object of keys transformers writes.")
    return settings, path


def trained_max_length(folder):
    """`(max_length, its path)` where the folder's `generation_config.json` records one, else `(None, None)`."""
    settings, path = read_generation_config(folder)
    length = settings.get("max_length")
    if length is None:
        return None, None
    if not is_count(length, 2):
        raise ValueError(f"{path}: max_length {length!r} is not a whole number ≥ 2 (a prompt and a token); repair it.")
    return length, path


def write_trained_max_length(folder, max_length):
    """Record in the folder's `generation_config.json` that its model was
    trained on `max_length` tokens; the token ids of its `config.json` go in
    beside it, as transformers' `save_pretrained` writes them."""
    folder = pathlib.Path(folder)
    config = read_json(folder / "config.json", f"{folder / 'config.json'} is not JSON", "repair it")
    settings = {key: config[key] for key in TOKEN_IDS if config.get(key) is not None}
    with replaced_atomically(folder / GENERATION_CONFIG) as temporary:
        temporary.write_text(json.dumps({**settings, "max_length": max_length}, indent=2) + "\n", "utf-8")
