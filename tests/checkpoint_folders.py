"""Small Hugging Face folders of each decoder family, and reading a folder's
tensors back: shared by tests/growth/test_streaming.py (`kwiden.grow_checkpoint`)
and tests/checkpoints/test_bad_input_checkpoints.py. Every test directory's tests can import
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


def google_bert_shapes(config, positions=True):
    """`{tensor name: shape}` of a Google BERT checkpoint of `config` (its pooler and MLM head included), under the
    names Google's releases and bert4keras read, independently of kwiden's name table; `positions=False` leaves
    out the position table, as RoFormer's releases do."""
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    shapes = {
        "bert/embeddings/word_embeddings": (v, h),
        "bert/embeddings/token_type_embeddings": (config.get("type_vocab_size", 2), h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
        "bert/pooler/dense/kernel": (h, h),
        "bert/pooler/dense/bias": (h,),
        "cls/predictions/transform/dense/kernel": (h, h),
        "cls/predictions/transform/dense/bias": (h,),
        "cls/predictions/transform/LayerNorm/gamma": (h,),
        "cls/predictions/transform/LayerNorm/beta": (h,),
        "cls/predictions/output_bias": (v,),
    }
    if positions:
        shapes["bert/embeddings/position_embeddings"] = (config["max_position_embeddings"], h)
    for i in range(config["num_hidden_layers"]):
        block = f"bert/encoder/layer_{i}"
        for name, shape in {
            "attention/self/query": (h, h), "attention/self/key": (h, h), "attention/self/value": (h, h),
            "attention/output/dense": (h, h), "intermediate/dense": (h, f), "output/dense": (f, h),
        }.items():  # fmt: skip
            shapes[f"{block}/{name}/kernel"] = shape
            shapes[f"{block}/{name}/bias"] = shape[1:]
        for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
            shapes[f"{block}/{norm}/gamma"] = (h,)
            shapes[f"{block}/{norm}/beta"] = (h,)
    return shapes
