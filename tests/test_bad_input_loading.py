"""Loading refuses what it would otherwise load wrong, naming the key or the
tensor, before any weight is assigned (and, where a checkpoint is given,
before the model is built): config numbers no model is built from, integer
(quantized) weights, block tensors no weight reads, and a config whose sizes
the checkpoint's tensors contradict. `grow_checkpoint` refuses the same."""

import json
import re

import numpy as np
import pytest
from test_hf_checkpoints import gpt2_model, llama_model, write

import kwiden
from kwiden.testing import tiny_config

# ---- config.json numbers ----

BAD_NUMBERS = [
    ("rms_norm_eps", float("nan"), "a finite number above 0"),
    ("rms_norm_eps", -1e-5, "a finite number above 0"),
    ("rope_theta", 0, r"a finite number above 0 \(the rotary base\)"),
    ("rope_theta", float("inf"), "a finite number above 0"),
    ("hidden_size", 16.0, "whole numbers"),
    ("num_attention_heads", 0, "whole numbers"),
    ("intermediate_size", True, "a whole number, at least 1"),
    ("max_position_embeddings", -1, "a whole number, at least 1"),
    ("attention_dropout", 1.0, r"a probability in \[0, 1\)"),
    ("hidden_dropout_prob", -0.1, r"a probability in \[0, 1\)"),
]


@pytest.mark.parametrize("key, value, wanted", BAD_NUMBERS, ids=[f"{k}={v}" for k, v, _ in BAD_NUMBERS])
def test_config_numbers_no_model_is_built_from_are_refused_naming_the_key(key, value, wanted, tmp_path):
    tensors, config = llama_model()
    bad = {**config, key: value}
    said = re.escape(f"{key}={value!r}")
    with pytest.raises(ValueError, match=rf"{said} .*must be {wanted}"):
        kwiden.build_transformer_model(bad, model="llama")
    with pytest.raises(ValueError, match=rf"{said} .*must be {wanted}"):
        kwiden.build_transformer_model(config, model="llama", **{key: value})
    if isinstance(value, float) and not np.isfinite(value):
        return  # a file cannot say it: refused as it is read (below)
    folder = write(tmp_path / "hf", tensors, bad)
    with pytest.raises(ValueError, match=rf"{said} .*must be {wanted}"):
        kwiden.build_transformer_model(checkpoint_path=folder)
    with pytest.raises(ValueError, match=rf"{said} .*must be {wanted}"):
        kwiden.grow_checkpoint(folder, tmp_path / "big", k=2)
    assert not (tmp_path / "big").exists()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_a_config_file_are_refused_as_it_is_read(constant, tmp_path):
    tensors, config = llama_model()
    folder = write(tmp_path / "hf", tensors, config)
    text = json.dumps(config).replace('"rope_theta": 500.0', f'"rope_theta": {constant}')
    (folder / "config.json").write_text(text)
    match = rf"config.json holds rope_theta: {constant}, which is not JSON"
    with pytest.raises(ValueError, match=match):
        kwiden.build_transformer_model(checkpoint_path=folder)
    with pytest.raises(ValueError, match=match):
        kwiden.build_transformer_model(config_path=folder / "config.json", model="llama")
    with pytest.raises(ValueError, match=match):
        kwiden.grow_checkpoint(folder, tmp_path / "big", k=2)


def test_the_refusal_names_where_the_value_came_from(tmp_path):
    tensors, config = llama_model()
    folder = write(tmp_path / "hf", tensors, {**config, "rope_theta": 0})
    with pytest.raises(ValueError, match=r"^rope_theta=0 in the config file \S+hf/config.json must be"):
        kwiden.build_transformer_model(checkpoint_path=folder)
    with pytest.raises(ValueError, match=r"^rope_theta=0 in `config` must be"):
        kwiden.build_transformer_model({**config, "rope_theta": 0})
    with pytest.raises(ValueError, match=r"^rotary_base=-1.0 in the keyword arguments must be"):
        kwiden.build_transformer_model(config, rotary_base=-1.0)
    nested = {**config, "rope_parameters": {"rope_theta": float("nan"), "rope_type": "default"}}
    with pytest.raises(ValueError, match=r"^rope_parameters.rope_theta=nan in `config` must be"):
        kwiden.build_transformer_model(nested)


def test_a_bert_config_has_its_epsilon_checked_too():
    with pytest.raises(ValueError, match=r"layer_norm_eps=0.0 in `config` must be a finite number above 0"):
        kwiden.build_transformer_model(tiny_config(layer_norm_eps=0.0))
    with pytest.raises(ValueError, match=r"layer_norm_epsilon=nan in `config` must be a finite number above 0"):
        kwiden.build_transformer_model({**gpt2_model()[1], "layer_norm_epsilon": float("nan")})


def test_no_json_kwiden_writes_holds_a_bare_infinity(tmp_path):
    llama = kwiden.build_transformer_model(dict(llama_model()[1], mask_padding=False), model="llama")
    for layer in llama.layers:
        if hasattr(layer, "epsilon"):
            layer.epsilon = float("inf")  # set past the config's check
    with pytest.raises(ValueError, match=r"config.json would hold rms_norm_eps=inf, which JSON cannot say"):
        kwiden.save_checkpoint(llama, tmp_path / "out")
    assert not (tmp_path / "out").exists()
