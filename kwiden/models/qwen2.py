"""Qwen2: LLaMA's shape with biases on the query, key and value projections
only (none on the output projection or the feed-forward), and usually a
tied head. Read from and written to Hugging Face folders (`Qwen2ForCausalLM`)
with LLaMA's tensor names.
"""

from kwiden.models import llama, naming
from kwiden.models.family import Family

DEFAULTS = {**llama.DEFAULTS, "attention_bias": True, "attention_output_bias": False, "mlp_bias": False}


def build_qwen2(config, name="qwen2"):
    """LLaMA's decoder; sliding-window attention is refused (the complete
    config is checked, so an override `use_sliding_window=False` wins).

    >>> build_qwen2({"use_sliding_window": True})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: This Qwen2 config uses sliding-window attention (use_sliding_window), which kwiden's ...
    """
    if config.get("use_sliding_window"):
        raise ValueError(
            "This Qwen2 config uses sliding-window attention (use_sliding_window), which kwiden's attention does "
            "not compute: every token sees every earlier one. Pass use_sliding_window=False to build it with "
            "full attention."
        )
    return llama.LLAMA.build(config, name=name)


def from_hf_config(config):
    """A Qwen2 config under kwiden's keys."""
    # Qwen2's attention_bias is not LLaMA's: its biases are fixed by the architecture.
    config = {key: value for key, value in config.items() if key != "attention_bias"}
    return llama.from_hf_config(config)


def to_hf_config(model, format="hf"):
    """The `config.json` of a kwiden Qwen2 (`Qwen2ForCausalLM`)."""
    attention = model.get_layer(naming.block(0, naming.ATTENTION))
    ffn = model.get_layer(naming.block(0, naming.FEED_FORWARD))
    if not attention.use_bias or attention.has_output_bias or ffn.use_bias:
        raise ValueError(
            "Qwen2 biases the query, key and value projections and nothing else; this model does not. "
            "Save it with family='llama' (whose attention_bias and mlp_bias say where biases are)."
        )
    config = llama.decoder_config(model, "Qwen2", "qwen2", "Qwen2ForCausalLM")
    for key in ("attention_bias", "mlp_bias", "head_dim"):
        del config[key]
    if config.pop("num_attention_heads") * attention.head_size != config["hidden_size"]:
        raise ValueError(
            f"Qwen2's config has no head_dim: its heads are hidden_size / num_attention_heads, and this model's "
            f"{attention.heads} heads of {attention.head_size} do not make {config['hidden_size']}. Save it with "
            "family='llama' (grow with heads='count' to keep Qwen2's shape)."
        )
    return {**config, "num_attention_heads": attention.heads, "use_sliding_window": False}


QWEN2 = Family(
    "qwen2",
    build_qwen2,
    title="Qwen2",
    defaults=DEFAULTS,
    from_hf_config=from_hf_config,
    to_hf_config=to_hf_config,
    checkpoint_names=llama.checkpoint_names,
    formats=("hf",),
    model_types=("qwen2",),
    hf_prefix="model.",
    buffers=llama.BUFFERS,
    pretrains_with="causal_lm",
)
