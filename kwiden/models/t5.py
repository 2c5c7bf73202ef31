"""T5 (v1.1)'s encoder: Pre-LN with RMSNorm, unscaled attention with a
relative position bias shared by all blocks, gated-GeLU feed-forward, no
biases, and an untied output head.

kwiden reads no T5 checkpoints; `from_hf_config` reads a T5 `config.json`'s
sizes. Its GeLU is kwiden's exact one; Hugging Face's `gated-gelu` uses the
tanh approximation.
"""

from kwiden import layers
from kwiden.models import blocks, naming
from kwiden.models.config import renamed
from kwiden.models.family import Family
from kwiden.models.family_model import FamilyModel

STRUCTURE = dict(residual="pre_ln", causal=False)
DEFAULTS = dict(
    STRUCTURE, norm="rms", glu=True, use_bias=False, hidden_act="gelu", scaled_attention=False,
    layer_norm_eps=1e-6, relative_attention_num_buckets=32, relative_attention_max_distance=128,
)  # fmt: skip

# Hugging Face's T5 config keys → kwiden's (`relative_attention_*` agree).
HF_KEYS = {
    "d_model": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "d_ff": "intermediate_size",
    "d_kv": "attention_head_size",
    "layer_norm_epsilon": "layer_norm_eps",
    "dropout_rate": "hidden_dropout_prob",
}


def build_t5_encoder(config, name="t5"):
    """T5's encoder from a complete config (T5's defaults applied), named
    `name` and recording it as its family (`model.family`).

    >>> import kwiden
    >>> t5 = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2), model="t5")
    >>> tuple(t5.output.shape)
    (None, None, 50)
    """
    config = {**STRUCTURE, **config}
    token_ids = blocks.token_input()
    x = blocks.embedding(config, config["vocab_size"], naming.EMBEDDING_TOKEN)(token_ids)
    x = blocks.embedding_norm(config, x)
    x = blocks.dropout(config, naming.EMBEDDING_DROPOUT)(x)
    x = blocks.stack(x, blocks.padding_mask(token_ids, config), config, _relative_position_bias(config)(token_ids))
    return FamilyModel(token_ids, blocks.output_logits(config, x), name=name, family=name)


def _relative_position_bias(config):
    """One bias on every block's attention scores, from bucketed relative positions."""
    return layers.RelativePositionBias(
        config["num_attention_heads"],
        num_buckets=config["relative_attention_num_buckets"],
        max_distance=config["relative_attention_max_distance"],
        key_value_heads=config.get("num_key_value_heads"),
        embeddings_initializer=blocks.initializer(config),
        name=naming.EMBEDDING_RELATIVE_POSITION,
    )


def from_hf_config(config):
    """A T5 config under kwiden's keys: sizes, ε, dropout and the
    feed-forward (`"gated-gelu"`: gated, GeLU; `"relu"`: plain ReLU).

    >>> config = from_hf_config({"d_model": 512, "d_ff": 1024, "feed_forward_proj": "gated-gelu"})
    >>> config["hidden_size"], config["intermediate_size"], config["glu"], config["hidden_act"]
    (512, 1024, True, 'gelu')
    """
    config = renamed(config, HF_KEYS)
    if config.get("dropout_rate") is not None:  # T5 has one rate for both
        config["attention_probs_dropout_prob"] = config["dropout_rate"]
    projection = config.get("feed_forward_proj")
    if projection is not None:
        gated = projection.startswith("gated-")
        config["glu"], config["hidden_act"] = gated, projection.removeprefix("gated-")
    return config


T5 = Family("t5", build_t5_encoder, title="T5", defaults=DEFAULTS, from_hf_config=from_hf_config)
