"""Training compute, counted as the growth benchmarks and the demo count it."""

import numpy as np

from kwiden.models import naming


def flops_per_token(model, length):
    """Training FLOPs per token of `model` on windows of `length` tokens:
    6·N + 6·L·T·d (Kaplan et al.'s estimate, forward and backward), where N
    counts the weights used in matrix products: every kernel, and the token
    table when the logits are tied to it (a lookup costs nothing: the other
    embedding tables and the biases are not counted); L is the number of
    Transformer blocks, T the context and d the width.

    >>> import kwiden
    >>> gpt = kwiden.build_transformer_model(dict(vocab_size=10, hidden_size=8,
    ...     num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16), model="gpt")
    >>> flops_per_token(gpt, 16)  # 6·(4·8² + 2·8·32 + 10·8) + 6·1·16·8
    5856
    >>> bert = kwiden.build_transformer_model(dict(vocab_size=10, hidden_size=8,
    ...     num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16))
    >>> flops_per_token(bert, 16)  # no logits: 6·(4·8² + 2·8·32) + 6·1·16·8
    5376
    """
    names = {layer.name for layer in model.layers}
    token = model.get_layer(naming.EMBEDDING_TOKEN)
    # Tied logits: an output over the vocabulary, and no logits layer of its own.
    tied = naming.OUTPUT_LOGITS not in names and any(o.shape[-1] == token.input_dim for o in model.outputs)
    matmul = sum(
        int(np.prod(w.shape))
        for w in model.trainable_weights
        if "kernel" in w.name or (tied and w.path == f"{naming.EMBEDDING_TOKEN}/embeddings")
    )
    width = token.output_dim
    blocks = naming.count_blocks(names)
    return 6 * matmul + 6 * blocks * length * width


# Bytes a float32 weight costs in training with Adam: itself, its gradient and Adam's two moments.
BYTES_PER_TRAINED_WEIGHT = 16


def parameters_of(config):
    """About how many weights a family's complete config (`Family.config`)
    makes, without building it: the matrices of every block, the token table
    (twice where the logits have their own) and learned positions; biases and
    norms, a small share, are left out.

    >>> parameters_of(dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    ...     attention_head_size=16, intermediate_size=256, max_position_embeddings=128))  # 2·(4·64² + 2·64·256) + 1128·64
    170496
    """
    width, heads, head = config["hidden_size"], config["num_attention_heads"], config["attention_head_size"]
    key_value_heads = config.get("num_key_value_heads") or heads
    attention = 2 * width * heads * head + 2 * width * key_value_heads * head
    feed_forward = (3 if config.get("glu") else 2) * width * config["intermediate_size"]
    tables = config["vocab_size"] * width * (1 if config.get("tie_word_embeddings", True) else 2)
    positions = 0 if config.get("rotary_base") else config["max_position_embeddings"] * width
    return config["num_hidden_layers"] * (attention + feed_forward) + tables + positions


def training_memory(parameters, config, batch_size, seq_len):
    """`(bytes for the weights, bytes for a batch's activations)` training
    needs at least, in float32 with Adam: 16 bytes a weight, and what the
    backward pass keeps of a batch: per block about ten tensors as wide as
    the model, two as wide as the FFN and two attention maps a head, and the
    logits three times (scores, softmax, gradient)."""
    tokens = batch_size * seq_len
    per_block = (
        10 * config["hidden_size"] + 2 * config["intermediate_size"] + 2 * config["num_attention_heads"] * seq_len
    )
    activations = 4 * tokens * (config["num_hidden_layers"] * per_block + 3 * config["vocab_size"])
    return BYTES_PER_TRAINED_WEIGHT * parameters, activations
