"""Model builders in the spirit of bert4keras, one module per family (BERT,
RoFormer, GPT, LLaMA, Mistral, Qwen2, T5) over the shared parts in `kwiden.models.blocks`.

A family (`Family`) is one object: its builder, defaults, config translation
and checkpoint names. `kwiden.build_transformer_model(model=…)` (in
`kwiden.models.builder`, above `kwiden.checkpoints`, which reads families from here)
takes a registered family's name or a family; `register_family` adds one. The
built model is a `FamilyModel`, which records its family; `family_of(model)`
reads it.
"""

from kwiden.exports import lazy as _lazy

_NAMES = {
    "build_bert": "kwiden.models.bert",
    "load_config": "kwiden.models.config",
    **dict.fromkeys(
        ("FAMILIES", "Family", "family_of", "family_of_config", "get_family", "register_family"), "kwiden.models.family"
    ),
    "FamilyModel": "kwiden.models.family_model",
    "build_gpt": "kwiden.models.gpt",
    "build_t5_encoder": "kwiden.models.t5",
}
__getattr__, __dir__ = _lazy(__name__, _NAMES)
__all__ = sorted(_NAMES, key=str.lower)
