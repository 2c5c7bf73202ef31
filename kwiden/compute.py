"""Training compute, counted as the growth benchmarks and the demo count it."""

import numpy as np

from kwiden import naming


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
