"""Reading a BERT-style `config.json` into the sizes a builder needs."""

import json

REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
DEFAULTS = {
    "intermediate_size": None,  # 4 × hidden_size
    "attention_head_size": None,  # hidden_size / num_attention_heads
    "hidden_act": "gelu",
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
}


def load_config(config=None, config_path=None, defaults=None, **overrides):
    """Merge a config dict, a `config.json` file and keyword overrides.

    Later sources win: the file, then `config`, then `overrides`; `defaults`
    (a model family's own) fill what none of them gives. Keys the builders do
    not use are kept (a Hugging Face config has many).
    """
    merged = {}
    if config_path is not None:
        with open(config_path, encoding="utf-8") as f:
            merged.update(json.load(f))
    merged.update(config or {})
    merged.update(overrides)
    missing = [key for key in REQUIRED if merged.get(key) is None]
    if missing:
        raise ValueError(
            f"The transformer config lacks {', '.join(missing)}; give them in "
            "`config`, in the file at `config_path`, or as keyword arguments."
        )
    for key, value in {**DEFAULTS, **(defaults or {})}.items():
        if merged.get(key) is None:
            merged[key] = value
    if merged["intermediate_size"] is None:
        merged["intermediate_size"] = 4 * merged["hidden_size"]
    if merged["attention_head_size"] is None:
        hidden, heads = merged["hidden_size"], merged["num_attention_heads"]
        if hidden % heads:
            raise ValueError(
                f"hidden_size={hidden} is not a multiple of num_attention_heads="
                f"{heads}; give `attention_head_size` explicitly."
            )
        merged["attention_head_size"] = hidden // heads
    return merged
