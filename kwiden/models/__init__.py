"""Model builders in the spirit of bert4keras, one module per family (BERT,
RoFormer, GPT, LLaMA, Mistral, Qwen2, T5) over the shared parts in `kwiden.models.blocks`.

A family (`Family`) is one object: its builder, defaults, config translation
and checkpoint names. `kwiden.build_transformer_model(model=…)` (in
`kwiden.models.builder`, above `kwiden.checkpoints`, which reads families from here)
takes a registered family's name or a family; `register_family` adds one. The
built model is a `FamilyModel`, which records its family; `family_of(model)`
reads it.
"""

from kwiden.models import bert, gpt, llama, mistral, qwen2, roformer, t5
from kwiden.models.bert import build_bert
from kwiden.models.config import load_config
from kwiden.models.family import FAMILIES, Family, family_of, family_of_config, get_family, register_family
from kwiden.models.family_model import FamilyModel
from kwiden.models.gpt import build_gpt
from kwiden.models.t5 import build_t5_encoder

for _family in (bert.BERT, gpt.GPT, llama.LLAMA, mistral.MISTRAL, qwen2.QWEN2, roformer.ROFORMER, t5.T5):
    register_family(_family)

__all__ = [
    "FAMILIES",
    "Family",
    "FamilyModel",
    "build_bert",
    "build_gpt",
    "build_t5_encoder",
    "family_of",
    "family_of_config",
    "get_family",
    "load_config",
    "register_family",
]
