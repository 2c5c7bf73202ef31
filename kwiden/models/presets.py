"""Named model sizes, which `kwiden pretrain --config NAME` (and `kwiden.pretrain(config=NAME)`) take instead
of a config.json: each a family and the config keys it sets; `vocab_size` is the tokenizer's, and what a preset
leaves out its family's defaults (`Family.config`)."""

from kwiden.text import corpus

# The demo's GPT (`kwiden demo`: byte-level, width 64 × 2 blocks, no dropout), with the 128 positions that
# `--seq-len`'s default reads (the demo trains 64).
DEMO = {key: value for key, value in corpus.gpt_config(64, 2, 128).items() if key != "vocab_size"}


def _bert(hidden, layers, heads):
    """Google's BERT sizes (BERT-Tiny to BERT-Base, arXiv 1908.08962): FFN 4× the width, 512 positions."""
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                intermediate_size=4 * hidden, max_position_embeddings=512)  # fmt: skip


# {name: (family, config)}.
PRESETS = {
    "gpt-demo": ("gpt", DEMO),
    "gpt2-small": (
        "gpt",
        dict(
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            max_position_embeddings=1024,
        ),
    ),  # fmt: skip
    "bert-tiny": ("bert", _bert(128, 2, 2)),
    "bert-mini": ("bert", _bert(256, 4, 4)),
    "bert-small": ("bert", _bert(512, 4, 8)),
    "bert-base": ("bert", _bert(768, 12, 12)),
}


def described():
    """The presets as `--help` lists them: each name, its family and its size (width × blocks)."""
    return ", ".join(f"{name} ({family} {c['hidden_size']}×{c['num_hidden_layers']})"
                     for name, (family, c) in PRESETS.items())  # fmt: skip


def preset(name, model=None):
    """`(family name, config)` of the preset `name`; refused where `model` names another family."""
    family, config = PRESETS[name]
    if model is not None and model != family:
        raise ValueError(f"--config {name} is a {family}'s size, not a {model}'s: give --model {family} (or leave "
                         f"--model out), or a config.json for {model}.")  # fmt: skip
    return family, dict(config)
