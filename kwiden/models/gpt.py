"""GPT: the Pre-LN causal decoder (GPT-2 style). Input `token_ids`; output the
logits, tied to the token table unless `tie_word_embeddings=False`.

kwiden reads no GPT checkpoints; `from_hf_config` reads the sizes of a
GPT-2 `config.json`. Its `hidden_act` stays kwiden's (exact GeLU by default):
GPT-2's `gelu_new` is the tanh approximation, which kwiden does not build.
"""

import keras

from kwiden import naming
from kwiden.models import blocks
from kwiden.models.config import renamed
from kwiden.models.family import Family

DEFAULTS = dict(residual="pre_ln", causal=True)

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


def build_gpt(config, name="gpt"):
    """Pre-LN causal decoder: GPT-2 style, or LLaMA style with `norm="rms"`,
    `rotary_base`, `glu`, `num_key_value_heads`, `use_bias=False` and
    `tie_word_embeddings=False` in the config.

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
    return keras.Model(token_ids, logits, name=name)


def from_hf_config(config):
    """GPT-2's sizes under kwiden's keys.

    >>> from_hf_config({"n_embd": 768, "n_layer": 12})["hidden_size"]
    768
    """
    return renamed(config, HF_KEYS)


GPT = Family("gpt", build_gpt, title="GPT", defaults=DEFAULTS, from_hf_config=from_hf_config)
