"""Loading refuses what it would otherwise load wrong, naming the key or the
tensor, before any weight is assigned (and, where a checkpoint is given,
before the model is built): config numbers no model is built from, integer
(quantized) weights, block tensors no weight reads, and a config whose sizes
the checkpoint's tensors contradict. `grow_checkpoint` refuses the same."""

import json
import re
import time

import numpy as np
import pytest
from test_hf_checkpoints import (
    IDS,
    RTOL,
    L,
    gpt2_logits,
    gpt2_model,
    llama_logits,
    llama_model,
    logits,
    relative,
    write,
)

import kwiden
from kwiden.testing import numpy_outputs, padded_batch, tiny_config

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


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
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


# ---- integer (quantized) weights ----


def quantized(tensors):
    """`tensors` as a quantized checkpoint holds them: int8 kernels with a float scale beside each."""
    out = {}
    for name, value in tensors.items():
        if "_proj.weight" in name or name.endswith("embed_tokens.weight"):
            scale = np.abs(value).max() / 127
            out[name] = np.round(value / scale).astype("int8")
            out[name.replace(".weight", ".weight_scale")] = np.array([scale], "float32")
        else:
            out[name] = value
    return out


@pytest.mark.parametrize("how", ["int8 with scales", "int32"])
def test_integer_weights_are_refused_naming_the_tensor_and_its_dtype(how, tmp_path):
    tensors, config = llama_model()
    if how == "int32":
        tensors = {**tensors, "model.embed_tokens.weight": np.arange(50 * 16, dtype="int32").reshape(50, 16)}
    else:
        tensors = quantized(tensors)
    folder = write(tmp_path / "int", tensors, config)
    dtype = {"int32": "int32", "int8 with scales": "int8"}[how]
    message = r"tensor 'model.embed_tokens.weight'( \(model.safetensors\))? is {}, and kwiden loads float weights"
    with pytest.raises(ValueError, match=message.format(dtype) + r".*Dequantize the checkpoint to a float dtype first"):
        kwiden.build_transformer_model(checkpoint_path=folder)
    with pytest.raises(ValueError, match=message.format(dtype)):  # the same refusal: one read plan
        kwiden.grow_checkpoint(folder, tmp_path / "big", k=2)
    assert not (tmp_path / "big").exists()


# ---- block tensors no weight reads ----


def qwen3_model():
    """A Qwen3-style folder: LLaMA's tensors and a norm of the queries and the keys in each block."""
    tensors, config = llama_model(tied=True)
    rng = np.random.default_rng(3)
    for i in range(config["num_hidden_layers"]):
        for norm in ("q_norm", "k_norm"):
            tensors[f"model.layers.{i}.self_attn.{norm}.weight"] = (1 + rng.normal(0, 0.1, 4)).astype("float32")
    return tensors, {**config, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}


def test_a_block_tensor_no_weight_reads_is_refused_naming_it(tmp_path):
    folder = write(tmp_path / "qwen3", *qwen3_model())
    with pytest.raises(ValueError, match=r"model_type 'qwen3' is not one kwiden builds .*pass `model=`"):
        kwiden.build_transformer_model(checkpoint_path=folder)
    # `model=` gets past the model_type, as that refusal advises; the tensors LLaMA has no weight for are refused.
    dropped = r"holds 'model.layers.0.self_attn.[qk]_norm.weight', for which this LLaMA has no weight"
    with pytest.raises(ValueError, match=dropped):
        kwiden.build_transformer_model(checkpoint_path=folder, model="llama")
    with pytest.raises(ValueError, match=dropped):
        kwiden.grow_checkpoint(folder, tmp_path / "big", k=2, model="llama")
    assert not (tmp_path / "big").exists()


def test_model_reads_a_config_of_an_unknown_model_type_that_has_its_shape(tmp_path):
    tensors, config = llama_model()
    folder = write(tmp_path / "custom", tensors, {**config, "model_type": "my-llama"})
    llama = kwiden.build_transformer_model(checkpoint_path=folder, model="llama", mask_padding=False)
    assert relative(logits(llama, IDS), llama_logits(tensors, config, IDS)) <= RTOL


def with_buffers(tensors, block, buffers):
    """`tensors` with non-weight buffers (`{name in the block: value}`) in each of the L blocks, `block` their prefix."""
    return {**tensors, **{f"{block.format(i)}{name}": value for i in range(L) for name, value in buffers.items()}}


def test_the_buffers_real_checkpoints_carry_in_their_blocks_load(tmp_path):
    tensors, config = llama_model()
    inv_freq = {"self_attn.rotary_emb.inv_freq": (500.0 ** -(np.arange(0, 4, 2) / 4)).astype("float32")}
    llama = kwiden.build_transformer_model(
        checkpoint_path=write(tmp_path / "llama", with_buffers(tensors, "model.layers.{}.", inv_freq), config)
    )
    assert relative(logits(llama, IDS), llama_logits(tensors, config, IDS)) <= RTOL
    tensors, config = gpt2_model()
    masks = {"attn.bias": np.tril(np.ones((1, 1, 32, 32), "float32")), "attn.masked_bias": np.array(-1e4, "float32")}
    gpt = kwiden.build_transformer_model(
        checkpoint_path=write(tmp_path / "gpt2", with_buffers(tensors, "transformer.h.{}.", masks), config)
    )
    assert relative(logits(gpt, IDS), gpt2_logits(tensors, config, IDS)) <= RTOL
    other = with_buffers(
        tensors, "transformer.h.{}.", {"attn.scale": np.array(1.0, "float32")}
    )  # no buffer GPT-2 declares
    with pytest.raises(ValueError, match=r"holds 'transformer.h.0.attn.scale', for which this GPT has no weight"):
        kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "other", other, config))


@pytest.mark.filterwarnings("ignore:Google's BERT code")
@pytest.mark.parametrize("slots", [("adam_m", "adam_v"), ("Adam", "Adam_1"), ("ExponentialMovingAverage",)])
def test_google_checkpoints_load_with_their_optimizer_slots(bert, tmp_path, slots):
    import tensorflow as tf

    small = bert()
    folder = kwiden.save_checkpoint(small, tmp_path / "google", format="google")
    (folder / "kwiden-manifest.json").unlink()
    reader = tf.train.load_checkpoint(str(folder / "bert_model.ckpt"))
    arrays = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    arrays.update({f"{name}/{slot}": np.zeros_like(value) for name, value in list(arrays.items()) for slot in slots})
    for path in folder.glob("bert_model.ckpt*"):
        path.unlink()
    tf.raw_ops.SaveV2(
        prefix=str(folder / "bert_model.ckpt"), tensor_names=list(arrays), shape_and_slices=[""] * len(arrays),
        tensors=[tf.constant(value) for value in arrays.values()],
    )  # fmt: skip
    loaded = kwiden.build_transformer_model(checkpoint_path=folder)
    inputs = padded_batch(vocab_size=small.get_layer("Embedding-Token").input_dim)
    np.testing.assert_array_equal(numpy_outputs(loaded, inputs), numpy_outputs(small, inputs))


# ---- a config the checkpoint contradicts, refused before building ----


def refused_quickly(call, match):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        call()
    return time.perf_counter() - start


def test_a_config_of_more_blocks_than_the_checkpoint_is_refused_before_building(tmp_path):
    tensors, config = llama_model()
    one_block = {name: value for name, value in tensors.items() if ".layers.1." not in name}
    folder = write(tmp_path / "one", one_block, {**config, "num_hidden_layers": 2000})
    match = (
        r"The config's num_hidden_layers=2000, but the checkpoint \S+model.safetensors holds 1 \(the last in "
        r"'model.layers.0.\S+'\).*Build with num_hidden_layers=1"
    )
    assert refused_quickly(lambda: kwiden.build_transformer_model(checkpoint_path=folder), match) < 1.0
    assert refused_quickly(lambda: kwiden.grow_checkpoint(folder, tmp_path / "big", k=2), match) < 1.0
    no_blocks = {name: value for name, value in tensors.items() if ".layers." not in name}
    folder = write(tmp_path / "none", no_blocks, config)
    with pytest.raises(ValueError, match=r"num_hidden_layers=2, but the checkpoint \S+ holds no block"):
        kwiden.build_transformer_model(checkpoint_path=folder)


@pytest.mark.parametrize("key, value", [("hidden_size", 100_000), ("vocab_size", 10**9)])
def test_a_config_whose_sizes_the_token_table_contradicts_is_refused_before_building(key, value, tmp_path):
    tensors, config = llama_model()
    folder = write(tmp_path / "big", tensors, {**config, key: value, "head_dim": 4})
    held = {"hidden_size": 16, "vocab_size": 50}[key]
    match = (
        rf"The config's {key}={value}, but the checkpoint \S+'s 'model.embed_tokens.weight' has shape \(50, 16\), "
        rf"so {key}={held}"
    )
    assert refused_quickly(lambda: kwiden.build_transformer_model(checkpoint_path=folder), match) < 1.0
    assert refused_quickly(lambda: kwiden.grow_checkpoint(folder, tmp_path / "grown", k=2), match) < 1.0
    assert not (tmp_path / "grown").exists()
