"""LLaMA: GPT's Pre-LN decoder with RMSNorm, rotary attention, SwiGLU,
grouped-query attention (`num_key_value_heads`), no biases and an untied
output head unless `tie_word_embeddings`.

kwiden reads no LLaMA checkpoints; `from_hf_config` reads a LLaMA
`config.json`'s keys where they differ from kwiden's.
"""

from kwiden.models import gpt
from kwiden.models.config import renamed
from kwiden.models.family import Family

DEFAULTS = dict(
    gpt.DEFAULTS, norm="rms", glu=True, use_bias=False, hidden_act="silu", hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0, tie_word_embeddings=False, layer_norm_eps=1e-6, rotary_base=10000.0,
)  # fmt: skip

# Hugging Face's LLaMA config keys → kwiden's.
HF_KEYS = {
    "rope_theta": "rotary_base",
    "rms_norm_eps": "layer_norm_eps",
    "head_dim": "attention_head_size",
    "attention_dropout": "attention_probs_dropout_prob",
}


def from_hf_config(config):
    """A LLaMA config under kwiden's keys.

    >>> config = from_hf_config({"rope_theta": 500000.0, "rms_norm_eps": 1e-5})
    >>> config["rotary_base"], config["layer_norm_eps"]
    (500000.0, 1e-05)
    """
    if config.get("rope_scaling"):
        raise ValueError(
            f"kwiden's rotary attention has no rope_scaling ({config['rope_scaling']}); a model "
            "built without it would compute another function."
        )
    return renamed(config, HF_KEYS)


LLAMA = Family("llama", gpt.build_gpt, title="LLaMA", defaults=DEFAULTS, from_hf_config=from_hf_config)
