"""Small Hugging Face folders of each decoder family, and reading a folder's
tensors back: shared by tests/growth/test_streaming.py (`kwiden.grow_checkpoint`)
and tests/test_bad_input_checkpoints.py. Every test directory's tests can import
it: tests/conftest.py puts tests/ on the import path."""

import pathlib

from kwiden.checkpoints import SAFETENSORS, SAFETENSORS_INDEX, read_tensors
from kwiden.testing import NOTICEABLE_EPSILON

SIZES = dict(
    vocab_size=50, hidden_size=16, num_hidden_layers=2, intermediate_size=24, layer_norm_eps=NOTICEABLE_EPSILON
)
DECODER = dict(SIZES, mask_padding=False)  # as Hugging Face's decoders: token id 0 is a token
MODELS = {
    "llama": dict(DECODER, num_attention_heads=4, num_key_value_heads=2),  # GQA, untied head
    "qwen2": dict(DECODER, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),  # q/k/v biases
    "gpt": dict(DECODER, num_attention_heads=2, max_position_embeddings=16, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0),  # GPT-2: fused c_attn, tied
}  # fmt: skip


def tensors_of(folder):
    """`{name: array}` of a checkpoint folder's safetensors, one file or sharded."""
    folder = pathlib.Path(folder)
    path = folder / SAFETENSORS_INDEX if (folder / SAFETENSORS_INDEX).exists() else folder / SAFETENSORS
    tensors = read_tensors("hf", path)
    return {name: tensors[name] for name in tensors}
