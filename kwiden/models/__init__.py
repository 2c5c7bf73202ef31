"""Model builders (BERT, GPT) in the spirit of bert4keras."""

from kwiden.models.config import load_config
from kwiden.models.transformer import build_bert, build_gpt, build_transformer_model

__all__ = ["build_bert", "build_gpt", "build_transformer_model", "load_config"]
