"""Hugging Face folders of LLaMA, Mistral, Qwen2, GPT-2 and RoFormer, in and out.

The reference is not kwiden: each test writes a tiny random model in Hugging
Face's own layout (tensor names, `(out, in)` Linear kernels, GPT-2's fused
`Conv1D`, LLaMA's rotary half order) and computes its logits with the numpy
forward passes below, written from Hugging Face's modelling code. Where
`transformers` is installed, the files kwiden writes are also loaded by it.
"""

import json
import math
import warnings

import keras
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import kwiden

RTOL = 1e-5
T = 7
IDS = np.random.default_rng(5).integers(0, 50, size=(2, T))
ENCODER_IDS = np.maximum(IDS, 1)  # kwiden's encoders treat id 0 as padding


# ---- numpy forward passes, as Hugging Face computes them ----


def rms_norm(x, weight, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * weight


def layer_norm(x, weight, bias, eps):
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps) * weight + bias


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def silu(x):
    return x / (1 + np.exp(-x))


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def heads(x, count):
    b, t, _ = x.shape
    return x.reshape(b, t, count, -1).transpose(0, 2, 1, 3)  # (b, heads, t, d)


def attend(q, k, v, causal=False, keep=None):
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones((T, T), bool)), scores, -1e9)
    if keep is not None:
        scores = np.where(keep[:, None, None, :], scores, -1e9)
    out = softmax(scores) @ v
    b, h, t, d = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def rope_half(x, theta):
    """LLaMA's rotary embedding: `rotate_half` pairs i with i + d/2."""
    d = x.shape[-1]
    angles = np.arange(T)[:, None] * theta ** (-np.arange(0, d, 2) / d)[None]
    cos, sin = np.cos(np.concatenate([angles] * 2, -1)), np.sin(np.concatenate([angles] * 2, -1))
    rotated = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


def rope_pairs(x, base=10000.0):
    """RoFormer's: neighbours (x_2i, x_2i+1) turn together."""
    d = x.shape[-1]
    angles = np.arange(T)[:, None] * base ** (-np.arange(0, d, 2) / d)[None]
    cos, sin = np.repeat(np.cos(angles), 2, -1), np.repeat(np.sin(angles), 2, -1)
    rotated = np.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)
    return x * cos + rotated * sin


def llama_logits(w, c, ids):
    p, n, kv, eps = "model.", c["num_attention_heads"], c["num_key_value_heads"], c["rms_norm_eps"]
    theta = c.get("rope_theta", 10000.0)

    def linear(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    h = w[p + "embed_tokens.weight"][ids]
    for i in range(c["num_hidden_layers"]):
        layer = f"{p}layers.{i}."
        x = rms_norm(h, w[layer + "input_layernorm.weight"], eps)
        q = rope_half(heads(linear(x, layer + "self_attn.q_proj"), n), theta)
        k = rope_half(heads(linear(x, layer + "self_attn.k_proj"), kv), theta)
        v = heads(linear(x, layer + "self_attn.v_proj"), kv)
        k, v = np.repeat(k, n // kv, axis=1), np.repeat(v, n // kv, axis=1)
        h = h + linear(attend(q, k, v, causal=True), layer + "self_attn.o_proj")
        x = rms_norm(h, w[layer + "post_attention_layernorm.weight"], eps)
        gated = silu(linear(x, layer + "mlp.gate_proj")) * linear(x, layer + "mlp.up_proj")
        h = h + linear(gated, layer + "mlp.down_proj")
    h = rms_norm(h, w[p + "norm.weight"], eps)
    return h @ w.get("lm_head.weight", w[p + "embed_tokens.weight"]).T


def gpt2_logits(w, c, ids):
    p, n, eps = "transformer.", c["n_head"], c["layer_norm_epsilon"]
    h = w[p + "wte.weight"][ids] + w[p + "wpe.weight"][: ids.shape[1]]
    for i in range(c["n_layer"]):
        layer = f"{p}h.{i}."

        def conv1d(x, name, layer=layer):
            return x @ w[layer + name + ".weight"] + w[layer + name + ".bias"]

        def norm(x, name, layer=layer):
            return layer_norm(x, w[layer + name + ".weight"], w[layer + name + ".bias"], eps)

        q, k, v = np.split(conv1d(norm(h, "ln_1"), "attn.c_attn"), 3, axis=-1)
        h = h + conv1d(attend(heads(q, n), heads(k, n), heads(v, n), causal=True), "attn.c_proj")
        h = h + conv1d(gelu_new(conv1d(norm(h, "ln_2"), "mlp.c_fc")), "mlp.c_proj")
    h = layer_norm(h, w[p + "ln_f.weight"], w[p + "ln_f.bias"], eps)
    return h @ w[p + "wte.weight"].T


def roformer_logits(w, c, ids):
    n, eps = c["num_attention_heads"], c["layer_norm_eps"]

    def linear(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    def norm(x, name):
        return layer_norm(x, w[name + ".weight"], w[name + ".bias"], eps)

    e = "roformer.embeddings."
    h = norm(w[e + "word_embeddings.weight"][ids] + w[e + "token_type_embeddings.weight"][0], e + "LayerNorm")
    for i in range(c["num_hidden_layers"]):
        layer = f"roformer.encoder.layer.{i}."
        q = rope_pairs(heads(linear(h, layer + "attention.self.query"), n))
        k = rope_pairs(heads(linear(h, layer + "attention.self.key"), n))
        v = heads(linear(h, layer + "attention.self.value"), n)
        context = attend(q, k, v, keep=ids != 0)
        h = norm(h + linear(context, layer + "attention.output.dense"), layer + "attention.output.LayerNorm")
        inner = gelu(linear(h, layer + "intermediate.dense"))
        h = norm(h + linear(inner, layer + "output.dense"), layer + "output.LayerNorm")
    t = norm(gelu(linear(h, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
    return t @ w[e + "word_embeddings.weight"].T + w["cls.predictions.bias"]


# ---- tiny random models in Hugging Face's layout ----

V, D, F, L = 50, 16, 24, 2


def _random(shapes, seed):
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in shapes.items():
        centre = 1.0 if name.endswith("norm.weight") or ".ln_" in name or "LayerNorm.weight" in name else 0.0
        tensors[name] = (centre + rng.normal(0, 0.3, shape)).astype("float32")
    return tensors


def llama_model(model_type="llama", heads=4, kv=2, tied=False, qkv_bias=False, seed=0):
    d = D // heads
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    for i in range(L):
        layer = f"model.layers.{i}."
        for name, rows in (("q", heads * d), ("k", kv * d), ("v", kv * d)):
            shapes[f"{layer}self_attn.{name}_proj.weight"] = (rows, D)
            if qkv_bias:
                shapes[f"{layer}self_attn.{name}_proj.bias"] = (rows,)
        shapes[f"{layer}self_attn.o_proj.weight"] = (D, heads * d)
        shapes.update({f"{layer}mlp.gate_proj.weight": (F, D), f"{layer}mlp.up_proj.weight": (F, D)})
        shapes[f"{layer}mlp.down_proj.weight"] = (D, F)
        shapes.update({f"{layer}input_layernorm.weight": (D,), f"{layer}post_attention_layernorm.weight": (D,)})
    if not tied:
        shapes["lm_head.weight"] = (V, D)
    config = dict(
        architectures=[{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}.get(model_type, "X")],
        model_type=model_type, vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
        num_attention_heads=heads, num_key_value_heads=kv, hidden_act="silu", rms_norm_eps=1e-3,
        rope_theta=500.0, tie_word_embeddings=tied, max_position_embeddings=64,
    )  # fmt: skip
    return _random(shapes, seed), config


def gpt2_model(seed=0):
    shapes = {"transformer.wte.weight": (V, D), "transformer.wpe.weight": (32, D)}
    for i in range(L):
        layer = f"transformer.h.{i}."
        for name, shape in (("attn.c_attn", (D, 3 * D)), ("attn.c_proj", (D, D)), ("mlp.c_fc", (D, F)),
                            ("mlp.c_proj", (F, D)), ("ln_1", None), ("ln_2", None)):  # fmt: skip
            shapes[f"{layer}{name}.weight"] = shape or (D,)
            shapes[f"{layer}{name}.bias"] = (shape or (D,))[-1:]
    shapes.update({"transformer.ln_f.weight": (D,), "transformer.ln_f.bias": (D,)})
    config = dict(
        architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=V, n_embd=D, n_layer=L, n_head=4,
        n_inner=F, n_positions=32, activation_function="gelu_new", layer_norm_epsilon=1e-3,
    )  # fmt: skip
    return _random(shapes, seed), config


def roformer_model(seed=0):
    e = "roformer.embeddings."
    shapes = {e + "word_embeddings.weight": (V, D), e + "token_type_embeddings.weight": (2, D)}
    shapes.update({e + "LayerNorm.weight": (D,), e + "LayerNorm.bias": (D,)})
    for i in range(L):
        layer = f"roformer.encoder.layer.{i}."
        for name, shape in (("attention.self.query", (D, D)), ("attention.self.key", (D, D)),
                            ("attention.self.value", (D, D)), ("attention.output.dense", (D, D)),
                            ("intermediate.dense", (F, D)), ("output.dense", (D, F)),
                            ("attention.output.LayerNorm", (D,)), ("output.LayerNorm", (D,))):  # fmt: skip
            shapes[f"{layer}{name}.weight"] = shape
            shapes[f"{layer}{name}.bias"] = shape[:1]
    head = "cls.predictions."
    shapes.update({head + "transform.dense.weight": (D, D), head + "transform.dense.bias": (D,)})
    shapes.update({head + "transform.LayerNorm.weight": (D,), head + "transform.LayerNorm.bias": (D,)})
    shapes[head + "bias"] = (V,)
    config = dict(
        architectures=["RoFormerForMaskedLM"], model_type="roformer", vocab_size=V, hidden_size=D,
        num_hidden_layers=L, num_attention_heads=4, intermediate_size=F, hidden_act="gelu", layer_norm_eps=1e-3,
        max_position_embeddings=64, type_vocab_size=2, embedding_size=D, rotary_value=False,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return _random(shapes, seed), config


def write(folder, tensors, config):
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def write_sharded(folder, tensors, config, shards=3):
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    weight_map = {}
    for index, part in enumerate(np.array_split(np.array(names), shards)):
        file = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        save_file({name: tensors[name] for name in part}, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part.tolist(), file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def relative(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def logits(model, ids):
    if model.name == "roformer":
        return kwiden.testing.numpy_outputs(model, [ids, np.zeros_like(ids)])[-1]
    return np.asarray(model.predict(ids, verbose=0))


DECODERS = {
    "llama (GQA, untied)": (lambda: llama_model(), llama_logits, "llama"),
    "llama (tied, biased)": (lambda: _biased_llama(), llama_logits, "llama"),
    "qwen2 (q/k/v biases, tied)": (lambda: llama_model("qwen2", tied=True, qkv_bias=True), llama_logits, "qwen2"),
    "mistral (one key/value head)": (lambda: llama_model("mistral", kv=1), llama_logits, "mistral"),
    "gpt2 (fused c_attn, gelu_new)": (gpt2_model, gpt2_logits, "gpt"),
}


def _biased_llama():
    """LLaMA's `attention_bias` and `mlp_bias`: every projection biased."""
    tensors, config = llama_model(tied=True, heads=2, kv=2)
    rng = np.random.default_rng(9)
    for name, value in list(tensors.items()):
        if "_proj.weight" in name:
            tensors[name.replace(".weight", ".bias")] = rng.normal(0, 0.3, value.shape[:1]).astype("float32")
    return tensors, {**config, "attention_bias": True, "mlp_bias": True}


@pytest.mark.parametrize("case", list(DECODERS))
def test_hugging_face_decoders_load_and_save_exactly(case, tmp_path):
    make, reference, family = DECODERS[case]
    tensors, config = make()
    model = kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "hf", tensors, config))
    assert model.name == family  # from the config's model_type
    assert relative(logits(model, IDS), reference(tensors, config, IDS)) <= RTOL
    saved = kwiden.save_checkpoint(model, tmp_path / "out")
    written = load_file(str(saved / "model.safetensors"))
    assert sorted(written) == sorted(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)
    reloaded = kwiden.build_transformer_model(checkpoint_path=saved)
    assert relative(logits(reloaded, IDS), reference(tensors, config, IDS)) <= RTOL


def test_hugging_face_roformer_loads_and_saves_exactly(tmp_path):
    tensors, config = roformer_model()
    ids = ENCODER_IDS.copy()
    ids[1, -2:] = 0  # padding
    model = kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "hf", tensors, config), with_mlm=True)
    assert model.name == "roformer"
    assert relative(logits(model, ids), roformer_logits(tensors, config, ids)) <= RTOL
    saved = kwiden.save_checkpoint(model, tmp_path / "out")
    assert json.loads((saved / "config.json").read_text())["architectures"] == ["RoFormerForMaskedLM"]
    written = load_file(str(saved / "model.safetensors"))
    assert sorted(written) == sorted(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)


def test_sharded_checkpoints_load_and_a_missing_or_wrong_shard_is_named(tmp_path):
    tensors, config = llama_model()
    folder = write_sharded(tmp_path / "sharded", tensors, config)
    model = kwiden.build_transformer_model(checkpoint_path=folder)
    assert relative(logits(model, IDS), llama_logits(tensors, config, IDS)) <= RTOL
    (folder / "model-00002-of-00003.safetensors").rename(tmp_path / "away.safetensors")
    with pytest.raises(
        FileNotFoundError, match=r"The shard \S+model-00002-of-00003.safetensors is missing: \S+index.json names it for"
    ):
        kwiden.build_transformer_model(checkpoint_path=folder)
    (tmp_path / "away.safetensors").rename(folder / "model-00002-of-00003.safetensors")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(
        ValueError, match=r"says 'model.norm.weight' is in \S+model-00001-of-00003.safetensors, which does not hold it"
    ):
        kwiden.build_transformer_model(checkpoint_path=folder)
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {"x": "../elsewhere.safetensors"}}')
    with pytest.raises(ValueError, match=r"is not a safetensors index kwiden can read: it needs a `weight_map`"):
        kwiden.build_transformer_model(checkpoint_path=folder)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_half_precision_tensors_load_as_the_model_dtype(dtype, tmp_path):
    tensors, config = llama_model()
    half = {name: value.astype(dtype) for name, value in tensors.items()}
    model = kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "half", half, config))
    assert {w.dtype for w in model.weights} == {"float32"}
    upcast = {name: value.astype("float32") for name, value in half.items()}
    assert relative(logits(model, IDS), llama_logits(upcast, config, IDS)) <= RTOL


def test_bad_hugging_face_folders_are_refused_naming_file_and_tensor(tmp_path):
    tensors, config = llama_model()
    mixed = {**tensors, "model.norm.weight": tensors["model.norm.weight"].astype(np.float16)}
    with pytest.raises(ValueError, match=r"mixes dtypes: '\S+' is float32 and 'model.norm.weight' is float16"):
        kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "mixed", mixed, config))
    with pytest.raises(ValueError, match=r"model_type 'falcon' is not one kwiden builds \(bert, gpt2, llama"):
        kwiden.build_transformer_model(
            checkpoint_path=write(tmp_path / "falcon", tensors, {**config, "model_type": "falcon"})
        )
    with pytest.raises(
        ValueError,
        match=r"'Transformer-0-FeedForward/gate_kernel' \(shape \(16, 32\)\) needs 'model.layers.0.mlp.gate_proj.weight' "
        r"of shape \(32, 16\); the checkpoint's has \(24, 16\)",
    ):
        kwiden.build_transformer_model(
            checkpoint_path=write(tmp_path / "shape", tensors, {**config, "intermediate_size": 32})
        )
    del tensors["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(
        ValueError, match=r"has no tensor 'model.layers.1.mlp.up_proj.weight' for 'Transformer-1-FeedForward/up_kernel'"
    ):
        kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "missing", tensors, config))
    window = {**llama_model("mistral")[1], "sliding_window": 4, "max_position_embeddings": 64}
    with pytest.raises(ValueError, match=r"sliding_window=4 is shorter than its max_position_embeddings=64"):
        kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "window", llama_model("mistral")[0], window))
    full = kwiden.build_transformer_model(checkpoint_path=tmp_path / "window", sliding_window=None)
    assert full.name == "mistral"


def test_grown_decoders_save_where_the_config_can_say_it(tmp_path):
    tensors, config = llama_model()
    small = kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "hf", tensors, config))
    grown = kwiden.grow(small, 2, heads="count", depth=2)
    saved = kwiden.save_checkpoint(grown, tmp_path / "grown")
    written = json.loads((saved / "config.json").read_text())
    assert (written["hidden_size"], written["num_attention_heads"], written["num_key_value_heads"]) == (32, 8, 4)
    assert (written["head_dim"], written["num_hidden_layers"], written["rms_norm_eps"]) == (
        4,
        4,
        pytest.approx(5e-4, rel=1e-12),
    )
    reloaded = kwiden.build_transformer_model(checkpoint_path=saved)
    assert relative(logits(reloaded, IDS), llama_logits(tensors, config, IDS)) <= RTOL
    by_size = kwiden.grow(small, 2, heads="size")
    with pytest.raises(ValueError, match=r"rotary frequencies were copied by growth .*Grow with heads='count'"):
        kwiden.save_checkpoint(by_size, tmp_path / "by-size")
    assert not (tmp_path / "by-size").exists()
    gpt_tensors, gpt_config = gpt2_model()
    gpt = kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "gpt2", gpt_tensors, gpt_config))
    wide = kwiden.save_checkpoint(kwiden.grow(gpt, 2), tmp_path / "gpt2-wide")  # head size ×2: GPT-2 can say it
    assert (
        relative(
            logits(kwiden.build_transformer_model(checkpoint_path=wide), IDS), gpt2_logits(gpt_tensors, gpt_config, IDS)
        )
        <= RTOL
    )


def test_transformers_loads_what_kwiden_writes(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers (and torch) are not installed here")
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    for name, (make, reference, _) in DECODERS.items():
        tensors, config = make()
        small = kwiden.build_transformer_model(checkpoint_path=write(tmp_path / name / "hf", tensors, config))
        for grown in (small, kwiden.grow(small, 2, heads="count", depth=2)):
            folder = kwiden.save_checkpoint(grown, tmp_path / name / grown.name / str(id(grown)))
            model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
            with torch.no_grad():
                theirs = model(torch.tensor(IDS)).logits.numpy()
            assert relative(theirs, reference(tensors, config, IDS)) <= RTOL, name


def test_activation_names_translate_both_ways(tmp_path):
    config = {**kwiden.testing.tiny_config(), "model_type": "bert", "hidden_act": "gelu_new"}
    bert = kwiden.build_transformer_model(config)
    assert bert.get_layer("Transformer-0-FeedForward").activation_name == "gelu_tanh"
    saved = kwiden.save_checkpoint(kwiden.testing.randomize_weights(bert), tmp_path / "bert")
    assert json.loads((saved / "config.json").read_text())["hidden_act"] == "gelu_new"
    x = np.linspace(-3, 3, 13).astype("float32")
    assert np.abs(np.asarray(bert.get_layer("Transformer-0-FeedForward").activation(x)) - gelu_new(x)).max() < 1e-6


def test_gelu_tanh_reaches_the_mlm_head_and_survives_saving(tmp_path):
    bert = kwiden.build_transformer_model({**kwiden.testing.tiny_config(), "hidden_act": "gelu_new"}, with_mlm=True)
    assert bert.get_layer("MLM-Dense").activation is kwiden.layers.activations.gelu_tanh
    bert.save(tmp_path / "bert.keras")
    loaded = keras.saving.load_model(tmp_path / "bert.keras")
    assert loaded.get_layer("MLM-Dense").activation is kwiden.layers.activations.gelu_tanh
    assert kwiden.grow(loaded, 2).get_layer("MLM-Dense").activation is kwiden.layers.activations.gelu_tanh
    with pytest.raises(ValueError, match=r"Unknown activation 'quick_gelu': give a Keras activation"):
        kwiden.build_transformer_model({**kwiden.testing.tiny_config(), "hidden_act": "quick_gelu"})


@pytest.mark.parametrize("family", ["gpt", "llama", "qwen2", "mistral"])
def test_a_decoder_that_masks_padding_says_so_and_keeps_masking(family, tmp_path):
    config = dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=4, intermediate_size=F)
    native = kwiden.testing.randomize_weights(kwiden.build_transformer_model(config, model=family))
    with pytest.warns(UserWarning, match=r"treats token id 0 as padding .*attention_mask=\(input_ids != 0\)") as caught:
        saved = kwiden.save_checkpoint(native, tmp_path / "native")
    assert caught[0].filename == __file__  # the warning points at the caller's line
    written = json.loads((saved / "config.json").read_text())
    assert (written["mask_padding"], written["pad_token_id"]) == (True, 0)
    ids = IDS.copy()
    ids[:, 3] = 0
    assert relative(logits(kwiden.build_transformer_model(checkpoint_path=saved), ids), logits(native, ids)) == 0.0
    plain = kwiden.build_transformer_model({**config, "mask_padding": False}, model=family)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written = json.loads((kwiden.save_checkpoint(plain, tmp_path / "plain") / "config.json").read_text())
    assert "mask_padding" not in written


def test_model_may_not_read_a_checkpoint_as_another_family(tmp_path):
    tensors, config = llama_model("qwen2", tied=True, qkv_bias=True)
    folder = write(tmp_path / "qwen2", tensors, config)
    with pytest.raises(ValueError, match=r"config is a Qwen2's \(model_type 'qwen2'\).*model='llama' would read them"):
        kwiden.build_transformer_model(checkpoint_path=folder, model="llama")
    tensors, config = llama_model()
    del config["model_type"]  # no model_type: `model=` says what it is
    anonymous = write(tmp_path / "anonymous", tensors, config)
    llama = kwiden.build_transformer_model(checkpoint_path=anonymous, model="llama", mask_padding=False)
    assert relative(logits(llama, IDS), llama_logits(tensors, config, IDS)) <= RTOL


def test_tensors_the_model_would_drop_are_refused(tmp_path):
    tensors, config = _biased_llama()
    unbiased = {**config, "attention_bias": False, "mlp_bias": False}
    with pytest.raises(ValueError, match=r"holds 'model.layers.0.self_attn.q_proj.bias', for which this LLaMA has no"):
        kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "biased", tensors, unbiased))
    tensors, config = llama_model(tied=True)
    same = {**tensors, "lm_head.weight": tensors["model.embed_tokens.weight"]}
    tied = kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "same", same, config))
    assert relative(logits(tied, IDS), llama_logits(tensors, config, IDS)) <= RTOL
    other = {**tensors, "lm_head.weight": tensors["model.embed_tokens.weight"] + 1}
    with pytest.raises(ValueError, match=r"holds an output head 'lm_head.weight' that differs from its token table"):
        kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "other", other, config))


def test_a_silent_config_means_what_it_means_to_hugging_face(tmp_path):
    tensors, config = gpt2_model()
    silent = {k: v for k, v in config.items() if k not in ("activation_function", "layer_norm_epsilon")}
    gpt = kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "gpt2", tensors, silent))
    hf_defaults = {**config, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
    assert relative(logits(gpt, IDS), gpt2_logits(tensors, hf_defaults, IDS)) <= RTOL
    tensors, config = llama_model("mistral")
    with pytest.raises(ValueError, match=r"sliding_window=4096 is shorter than its max_position_embeddings=8192"):
        kwiden.build_transformer_model(
            checkpoint_path=write(tmp_path / "mistral", tensors, {**config, "max_position_embeddings": 8192})
        )
    tensors, config = llama_model()
    plain = {**config, "rope_scaling": {"rope_type": "default"}}  # no scaling, said explicitly
    llama = kwiden.build_transformer_model(checkpoint_path=write(tmp_path / "llama", tensors, plain))
    assert relative(logits(llama, IDS), llama_logits(tensors, config, IDS)) <= RTOL


def test_base_config_keeps_what_kwiden_does_not_write(tmp_path):
    tensors, config = llama_model()
    config = {
        **config,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    }
    source = write(tmp_path / "hf", tensors, config)
    grown = kwiden.grow(kwiden.build_transformer_model(checkpoint_path=source), 2, heads="count")
    plain = json.loads((kwiden.save_checkpoint(grown, tmp_path / "plain") / "config.json").read_text())
    assert "bos_token_id" not in plain and "max_position_embeddings" not in plain  # kwiden knows neither
    kept = json.loads(
        (kwiden.save_checkpoint(grown, tmp_path / "kept", base_config=source) / "config.json").read_text()
    )
    assert (kept["bos_token_id"], kept["eos_token_id"], kept["max_position_embeddings"]) == (1, 2, 131072)
    assert (kept["hidden_size"], kept["num_attention_heads"], kept["torch_dtype"]) == (32, 8, "float32")  # kwiden's
    assert kept == {**config, **plain}
