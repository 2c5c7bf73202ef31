"""LLaMA: GPT's Pre-LN decoder with RMSNorm, rotary attention, SwiGLU,
grouped-query attention (`num_key_value_heads`), no biases and an untied
output head unless `tie_word_embeddings`.

Read from and written to Hugging Face folders (`LlamaForCausalLM`): the
query and key rows are reordered between Hugging Face's rotary order (halves)
and kwiden's (neighbouring pairs), which gives the same scores. Mistral and
Qwen2 (`kwiden.models.mistral`, `kwiden.models.qwen2`) are LLaMA's shape
under other names.
"""

from kwiden.models import gpt, hf, naming
from kwiden.models.config import renamed
from kwiden.models.family import Family
from kwiden.models.layout import Layout

DEFAULTS = dict(
    gpt.DEFAULTS, norm="rms", glu=True, use_bias=False, hidden_act="silu", hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0, tie_word_embeddings=False, layer_norm_eps=1e-6, rotary_base=10000.0,
)  # fmt: skip

# Hugging Face's LLaMA config keys → kwiden's (`attention_bias`, `mlp_bias` agree).
HF_KEYS = {
    "rope_theta": "rotary_base",
    "rms_norm_eps": "layer_norm_eps",
    "head_dim": "attention_head_size",
    "attention_dropout": "attention_probs_dropout_prob",
}

ROTARY = {"query": True, "key": True, "value": False}

# The rotary frequencies older transformers wrote into each block: computed, not learned.
BUFFERS = (r"self_attn\.rotary_emb\.inv_freq",)


def from_hf_config(config):
    """A LLaMA config under kwiden's keys; `rope_theta` may sit in
    `rope_parameters` (as transformers 5 writes it), and RoPE scaling of
    any kind is refused.

    >>> config = from_hf_config({"rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
    ...     "rms_norm_eps": 1e-5})
    >>> config["rotary_base"], config["layer_norm_eps"]
    (500000.0, 1e-05)
    """
    parameters = config.get("rope_parameters") or {}
    scaling = {**parameters, **(config.get("rope_scaling") or {})}
    kind = scaling.pop("rope_type", scaling.pop("type", "default"))
    scaling.pop("rope_theta", None)
    if kind != "default" or scaling:
        shown = config.get("rope_scaling") or parameters
        raise ValueError(
            f"kwiden's rotary attention has no RoPE scaling ({shown}); a model built without it would compute "
            "another function. Checkpoints without it load (LLaMA 2, TinyLlama, SmolLM, Mistral 7B, Qwen2)."
        )
    if parameters.get("rope_theta") is not None:
        config = {**config, "rope_theta": parameters["rope_theta"]}
    return hf.from_hf_decoder(renamed(config, HF_KEYS))


def checkpoint_names(num_blocks, format="hf", prefix="model."):
    """`{(layer, weight): (tensor name, Layout)}` in a Hugging Face LLaMA
    file; `prefix` goes before the base model's names (`model.` in
    `LlamaForCausalLM`'s), not before `lm_head`.

    >>> names = checkpoint_names(1)
    >>> names[naming.block(0, naming.ATTENTION), "key_kernel"][0]
    'model.layers.0.self_attn.k_proj.weight'
    """
    linear = Layout(transpose=True)
    names = {
        (naming.EMBEDDING_TOKEN, "embeddings"): (f"{prefix}embed_tokens.weight", Layout()),
        (naming.OUTPUT_NORM, "gamma"): (f"{prefix}norm.weight", Layout()),
        (naming.OUTPUT_LOGITS, "kernel"): ("lm_head.weight", linear),
    }
    for index in range(num_blocks):
        path = f"{prefix}layers.{index}"
        attention, ffn = naming.block(index, naming.ATTENTION), naming.block(index, naming.FEED_FORWARD)
        for projection, short in (("query", "q"), ("key", "k"), ("value", "v")):
            rotary = ROTARY[projection]
            names[attention, f"{projection}_kernel"] = (
                f"{path}.self_attn.{short}_proj.weight",
                Layout("heads_out", transpose=True, rotate_half=rotary),
            )
            names[attention, f"{projection}_bias"] = (
                f"{path}.self_attn.{short}_proj.bias",
                Layout("heads_bias", rotate_half=rotary),
            )
        names[attention, "output_kernel"] = (f"{path}.self_attn.o_proj.weight", Layout("heads_in", transpose=True))
        names[attention, "output_bias"] = (f"{path}.self_attn.o_proj.bias", Layout())
        for weight, module in (("gate", "gate_proj"), ("up", "up_proj"), ("output", "down_proj")):
            names[ffn, f"{weight}_kernel"] = (f"{path}.mlp.{module}.weight", linear)
            names[ffn, f"{weight}_bias"] = (f"{path}.mlp.{module}.bias", Layout())
        names[naming.block(index, naming.ATTENTION, naming.NORM), "gamma"] = (
            f"{path}.input_layernorm.weight",
            Layout(),
        )
        names[naming.block(index, naming.FEED_FORWARD, naming.NORM), "gamma"] = (
            f"{path}.post_attention_layernorm.weight",
            Layout(),
        )
    return names


def decoder_config(model, title, model_type, architecture):
    """The `config.json` keys LLaMA, Mistral and Qwen2 share, read off a built
    model; refused where the model is not LLaMA-shaped or its config could
    not say what it computes."""
    token, attention, ffn, blocks = hf.layers_of(model)
    hf.refuse_copied_rotary(attention, title)
    if attention.rotary is None or not ffn.glu:
        raise ValueError(
            f"A {title} checkpoint holds a rotary, gated (SwiGLU-style) decoder; this model "
            f"({'no rotary attention' if attention.rotary is None else 'an ungated feed-forward'}) is not one. "
            "Save a GPT-2-shaped model with family='gpt', or as a .keras model."
        )
    layer_names = {layer.name for layer in model.layers}
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "vocab_size": token.input_dim,
        "hidden_size": token.output_dim,
        "intermediate_size": ffn.intermediate_size,
        "num_hidden_layers": blocks,
        "num_attention_heads": attention.heads,
        "num_key_value_heads": attention.key_value_heads or attention.heads,
        "head_dim": attention.head_size,
        "hidden_act": hf.activation_to_hf(ffn),
        "rms_norm_eps": hf.one_epsilon(model, title),
        "rope_theta": attention.rotary.base,
        # transformers 5 reads this; earlier versions read `rope_theta`.
        "rope_parameters": {"rope_theta": attention.rotary.base, "rope_type": "default"},
        "attention_bias": attention.use_bias,
        "attention_dropout": attention.dropout,
        "mlp_bias": ffn.use_bias,
        "tie_word_embeddings": naming.OUTPUT_LOGITS not in layer_names,
        "torch_dtype": "float32",
        **hf.padding_keys(model, title),
    }


def to_hf_config(model, format="hf"):
    """The `config.json` of a kwiden LLaMA (`LlamaForCausalLM`).

    >>> import kwiden
    >>> llama = kwiden.build_transformer_model(dict(vocab_size=50, hidden_size=8, num_hidden_layers=1,
    ...     num_attention_heads=2, num_key_value_heads=1, mask_padding=False), model="llama")
    >>> config = to_hf_config(llama)
    >>> config["architectures"], config["num_key_value_heads"], config["tie_word_embeddings"]
    (['LlamaForCausalLM'], 1, False)
    """
    return llama_config(model, "LLaMA", "llama", "LlamaForCausalLM")


def llama_config(model, title, model_type, architecture):
    """`decoder_config` for a family whose `attention_bias` covers all four
    attention projections (LLaMA, Mistral)."""
    attention = model.get_layer(naming.block(0, naming.ATTENTION))
    if attention.has_output_bias != attention.use_bias:
        raise ValueError(
            f"{title}'s attention_bias covers the query, key, value and output projections alike; this model "
            "biases only some (Qwen2's shape): save it with family='qwen2'."
        )
    return decoder_config(model, title, model_type, architecture)


LLAMA = Family(
    "llama",
    gpt.build_gpt,
    title="LLaMA",
    defaults=DEFAULTS,
    from_hf_config=from_hf_config,
    to_hf_config=to_hf_config,
    checkpoint_names=checkpoint_names,
    formats=("hf",),
    model_types=("llama",),
    hf_prefix="model.",
    buffers=BUFFERS,
    pretrains_with="causal_lm",
)
