"""The builders' errors."""

import pytest

import kwiden
from kwiden.testing import tiny_config


def test_builder_errors():
    with pytest.raises(
        ValueError, match=r"`model` must be one of \['bert', 'gpt', 'llama', 'mistral', 'qwen2', 'roformer', 't5'\]"
    ):
        kwiden.build_transformer_model(tiny_config(), model="xlnet")
    with pytest.raises(ValueError, match=r"lacks hidden_size"):
        kwiden.build_transformer_model(dict(vocab_size=10, num_hidden_layers=1, num_attention_heads=1))
    with pytest.raises(ValueError, match=r"hidden_size=10 is not a multiple of num_attention_heads=3"):
        kwiden.build_transformer_model(tiny_config(hidden_size=10, num_attention_heads=3))
    with pytest.raises(ValueError, match=r"`with_mlm` and `with_pool` apply to BERT-style models, not 'gpt'"):
        kwiden.build_transformer_model(tiny_config(), model="gpt", with_mlm=True)
