"""GPT: the Pre-LN causal decoder (GPT-2 style). Input `token_ids`; output the
logits, tied to the token table unless `tie_word_embeddings=False`.

Read from and written to Hugging Face GPT-2 folders (`GPT2LMHeadModel`):
GPT-2's `Conv1D` kernels are stored `(in, out)`, its `c_attn` holds the
query, key and value side by side, and its `gelu_new` is kwiden's
`"gelu_tanh"`. kwiden's own GPTs use exact GeLU and treat token id 0 as
padding; one read from a GPT-2 config does neither.
"""

import keras

from kwiden.models import blocks, hf, naming
from kwiden.models.config import renamed
from kwiden.models.family import Family
from kwiden.models.family_model import FamilyModel
from kwiden.models.layout import Layout

# GPT-2's LayerNorm ε where a config is silent (BERT's 1e-12 is not a GPT's; GPT-2's dropout, 0.1, is BERT's).
DEFAULTS = dict(residual="pre_ln", causal=True, layer_norm_eps=1e-5)

# GPT-2's config keys → kwiden's.
HF_KEYS = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_inner": "intermediate_size",
    "n_positions": "max_position_embeddings",
    "layer_norm_epsilon": "layer_norm_eps",
    "resid_pdrop": "hidden_dropout_prob",
    "attn_pdrop": "attention_probs_dropout_prob",
}

# What transformers' GPT2Config assumes where a config.json is silent, and kwiden's defaults differ.
HF_DEFAULTS = {"activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "n_positions": 1024}

# GPT-2's causal mask and its fill value, which older transformers wrote into each block.
BUFFERS = (r"attn\.bias", r"attn\.masked_bias")

# What GPT-2's config can say that kwiden's GPT does not compute.
UNSUPPORTED = {
    "scale_attn_by_inverse_layer_idx": "attention scores scaled by 1/(layer index + 1)",
    "add_cross_attention": "cross-attention",
}


def build_gpt(config, name="gpt"):
    """Pre-LN causal decoder: GPT-2 style, or LLaMA style with `norm="rms"`,
    `rotary_base`, `glu`, `num_key_value_heads`, `use_bias=False` and
    `tie_word_embeddings=False` in the config. The model is named `name`
    and records it as its family (`model.family`).

    >>> from kwiden.models import load_config
    >>> gpt = build_gpt(load_config(dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2)))
    >>> tuple(gpt.output.shape)
    (None, None, 50)
    """
    config = {**DEFAULTS, **config}
    token_ids = blocks.token_input()
    token_embedding = blocks.embedding(config, config["vocab_size"], naming.EMBEDDING_TOKEN)
    x = token_embedding(token_ids)
    if config.get("rotary_base") is None:  # rotary attention encodes positions instead
        x = keras.layers.Add(name=naming.EMBEDDING_ADD)([x, blocks.position_embedding(config)(token_ids)])
    x = blocks.embedding_norm(config, x)
    x = blocks.dropout(config, naming.EMBEDDING_DROPOUT)(x)
    x = blocks.stack(x, blocks.padding_mask(token_ids, config), config)
    if config.get("tie_word_embeddings", True):
        logits = token_embedding(x, reverse=True)
    else:
        logits = blocks.output_logits(config, x)
    return FamilyModel(token_ids, logits, name=name, family=name)


def from_hf_config(config):
    """GPT-2's sizes under kwiden's keys.

    >>> config = from_hf_config({"model_type": "gpt2", "n_embd": 768})  # GPT-2's defaults where it is silent
    >>> config["hidden_size"], config["hidden_act"], config["layer_norm_eps"], config["mask_padding"]
    (768, 'gelu_tanh', 1e-05, False)
    """
    for key, what in UNSUPPORTED.items():
        if config.get(key):
            raise ValueError(f"This GPT-2 config sets {key} ({what}), which kwiden's GPT does not compute.")
    if config.get("model_type") == "gpt2":
        config = {**HF_DEFAULTS, **{key: value for key, value in config.items() if value is not None}}
    if config.get("scale_attn_weights") is False:
        config = {**config, "scaled_attention": False}
    return hf.from_hf_decoder(renamed(config, HF_KEYS))


def checkpoint_names(num_blocks, format="hf", prefix="transformer."):
    """`{(layer, weight): (tensor name, Layout)}` in a Hugging Face GPT-2
    file; `prefix` goes before the base model's names (`transformer.` in
    `GPT2LMHeadModel`'s), not before `lm_head`.

    >>> checkpoint_names(1)[naming.block(0, naming.ATTENTION), "value_kernel"]
    ('transformer.h.0.attn.c_attn.weight', Layout(flat='heads_out', transpose=False, rotate_half=False, part=(2, 3)))
    """
    names = {
        (naming.EMBEDDING_TOKEN, "embeddings"): (f"{prefix}wte.weight", Layout()),
        (naming.EMBEDDING_POSITION, "embeddings"): (f"{prefix}wpe.weight", Layout()),
        **_norm(naming.OUTPUT_NORM, f"{prefix}ln_f"),
        (naming.OUTPUT_LOGITS, "kernel"): ("lm_head.weight", Layout(transpose=True)),
    }
    for index in range(num_blocks):
        path = f"{prefix}h.{index}"
        attention, ffn = naming.block(index, naming.ATTENTION), naming.block(index, naming.FEED_FORWARD)
        for part, projection in enumerate(("query", "key", "value")):
            names[attention, f"{projection}_kernel"] = (
                f"{path}.attn.c_attn.weight",
                Layout("heads_out", part=(part, 3)),
            )
            names[attention, f"{projection}_bias"] = (f"{path}.attn.c_attn.bias", Layout("heads_bias", part=(part, 3)))
        names[attention, "output_kernel"] = (f"{path}.attn.c_proj.weight", Layout("heads_in"))
        names[attention, "output_bias"] = (f"{path}.attn.c_proj.bias", Layout())
        for weight, module in (("inner", "c_fc"), ("output", "c_proj")):
            names[ffn, f"{weight}_kernel"] = (f"{path}.mlp.{module}.weight", Layout())
            names[ffn, f"{weight}_bias"] = (f"{path}.mlp.{module}.bias", Layout())
        names.update(_norm(naming.block(index, naming.ATTENTION, naming.NORM), f"{path}.ln_1"))
        names.update(_norm(naming.block(index, naming.FEED_FORWARD, naming.NORM), f"{path}.ln_2"))
    return names


def _norm(layer, path):
    return {(layer, "gamma"): (f"{path}.weight", Layout()), (layer, "beta"): (f"{path}.bias", Layout())}


def to_hf_config(model, format="hf"):
    """The `config.json` of a kwiden GPT as GPT-2's (`GPT2LMHeadModel`).

    >>> import kwiden
    >>> gpt = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, mask_padding=False),
    ...     model="gpt")
    >>> config = to_hf_config(gpt)
    >>> config["n_embd"], config["n_positions"], config["activation_function"]
    (8, 512, 'gelu')
    """
    token, attention, ffn, num_blocks = hf.layers_of(model)
    layer_names = {layer.name for layer in model.layers}
    shape = [
        (attention.rotary is not None, "rotary attention"),
        (ffn.glu, "a gated feed-forward"),
        (attention.key_value_heads not in (None, attention.heads), "grouped-query attention"),
        (not (attention.use_bias and attention.has_output_bias and ffn.use_bias), "projections without biases"),
        (naming.EMBEDDING_POSITION not in layer_names, "no position table"),
        (any(getattr(layer, "rms", False) for layer in model.layers), "RMSNorm"),
        (attention.head_size * attention.heads != token.output_dim, "heads that do not make the hidden size"),
    ]
    unlike = [what for differs, what in shape if differs]
    if unlike:
        raise ValueError(
            f"GPT-2's checkpoint cannot hold this model: it has {', '.join(unlike)}. Save a LLaMA-shaped model "
            "with family='llama', or as a .keras model."
        )
    positions = model.get_layer(naming.EMBEDDING_POSITION).input_dim
    dropout = model.get_layer(naming.EMBEDDING_DROPOUT).rate
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": token.input_dim,
        "n_embd": token.output_dim,
        "n_layer": num_blocks,
        "n_head": attention.heads,
        "n_inner": ffn.intermediate_size,
        "n_positions": positions,
        "n_ctx": positions,
        "activation_function": hf.activation_to_hf(ffn),
        "layer_norm_epsilon": hf.one_epsilon(model, "GPT-2"),
        "resid_pdrop": dropout,
        "embd_pdrop": dropout,
        "attn_pdrop": attention.dropout,
        "scale_attn_weights": attention.scaled,
        "tie_word_embeddings": naming.OUTPUT_LOGITS not in layer_names,
        "torch_dtype": "float32",
        **hf.padding_keys(model, "GPT"),
    }


GPT = Family(
    "gpt",
    build_gpt,
    title="GPT",
    defaults=DEFAULTS,
    from_hf_config=from_hf_config,
    to_hf_config=to_hf_config,
    checkpoint_names=checkpoint_names,
    formats=("hf",),
    model_types=("gpt2",),
    hf_prefix="transformer.",
    buffers=BUFFERS,
    pretrains_with="causal_lm",
)
