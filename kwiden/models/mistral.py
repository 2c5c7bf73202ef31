"""Mistral: LLaMA's shape with sliding-window attention. kwiden builds it
where the window does not change the function (no window, or one at least
`max_position_embeddings` long), and reads and writes Hugging Face folders
(`MistralForCausalLM`) with LLaMA's tensor names.
"""

from kwiden.models import llama
from kwiden.models.family import Family


def build_mistral(config, name="mistral"):
    """LLaMA's decoder; a window shorter than the positions the model takes
    is refused (the complete config is checked, so `sliding_window=None`
    given as an override wins over the file's).

    >>> build_mistral({"sliding_window": 4096, "max_position_embeddings": 32768})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: This Mistral config's sliding_window=4096 is shorter than its max_position_embeddings=32768: ...
    """
    window, positions = config.get("sliding_window"), config.get("max_position_embeddings")
    if window is not None and (positions is None or window < positions):
        raise ValueError(
            f"This Mistral config's sliding_window={window} is shorter than its max_position_embeddings={positions}: "
            "kwiden's attention sees every earlier token, which differs on longer sequences. Pass "
            "sliding_window=None to build it with full attention (the same function on sequences of at most "
            f"{window} tokens)."
        )
    return llama.LLAMA.build(config, name=name)


# transformers' MistralConfig's window where a config.json names none.
HF_WINDOW = 4096


def from_hf_config(config):
    """LLaMA's translation, with Mistral's window where a Mistral config.json is silent.

    >>> from_hf_config({"model_type": "mistral"})["sliding_window"]
    4096
    """
    if config.get("model_type") == "mistral" and "sliding_window" not in config:
        config = {**config, "sliding_window": HF_WINDOW}
    return llama.from_hf_config(config)


def to_hf_config(model, format="hf"):
    """The `config.json` of a kwiden Mistral (`MistralForCausalLM`), without a window."""
    return {**llama.llama_config(model, "Mistral", "mistral", "MistralForCausalLM"), "sliding_window": None}


MISTRAL = Family(
    "mistral",
    build_mistral,
    title="Mistral",
    defaults=llama.DEFAULTS,
    from_hf_config=from_hf_config,
    to_hf_config=to_hf_config,
    checkpoint_names=llama.checkpoint_names,
    formats=("hf",),
    model_types=("mistral",),
    hf_prefix="model.",
    buffers=llama.BUFFERS,
    pretrains_with="causal_lm",
)
