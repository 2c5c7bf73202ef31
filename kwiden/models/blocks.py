"""The parts every family's builder is made of: embeddings, attention,
feed-forward, norms, the three residual layouts and the stack of blocks.

Each reads the sizes it needs from a complete config
(`kwiden.models.config.complete_config`) and names its layer with
`kwiden.models.naming`, so checkpoint maps, depth growth and `kwiden.grow` find it.
"""

import keras
from keras import ops

from kwiden import layers
from kwiden.models import naming

RESIDUALS = ("post_ln", "pre_ln", "admin")


def check_residual(residual):
    if residual not in RESIDUALS:
        raise ValueError(f"`residual` must be one of {RESIDUALS}, got residual={residual!r}.")
    return residual


def initializer(config):
    return keras.initializers.TruncatedNormal(stddev=config["initializer_range"])


def norm(config, name, admin=False):
    """LayerNorm, or RMSNorm with `config["norm"] == "rms"`; with `admin`,
    `AdminResidual`, which also adds the residual branch."""
    options = dict(rms=True, center=False) if config.get("norm") == "rms" else {}
    if admin:
        return layers.AdminResidual(epsilon=config["layer_norm_eps"], name=name, **options)
    return layers.ExpandableLayerNormalization(epsilon=config["layer_norm_eps"], name=name, **options)


def dropout(config, name):
    return keras.layers.Dropout(config["hidden_dropout_prob"], name=name)


def attention(config, name):
    return layers.ExpandableMultiHeadAttention(
        heads=config["num_attention_heads"],
        head_size=config["attention_head_size"],
        dropout=config["attention_probs_dropout_prob"],
        rotary_base=config.get("rotary_base"),
        key_value_heads=config.get("num_key_value_heads"),
        use_bias=_bias(config, "attention_bias"),
        use_output_bias=_bias(config, "attention_output_bias", _bias(config, "attention_bias")),
        scaled=config.get("scaled_attention", True),
        kernel_initializer=initializer(config),
        name=name,
    )


def _bias(config, key, default=None):
    """Whether a projection has biases: `config[key]`, else `default`, else
    the config's `use_bias` (LLaMA's `attention_bias` and `mlp_bias`; Qwen2
    biases its query, key and value projections only)."""
    if config.get(key) is not None:
        return bool(config[key])
    return config.get("use_bias", True) if default is None else default


def feed_forward(config, name):
    return layers.FeedForward(
        config["intermediate_size"],
        activation=config["hidden_act"],
        glu=config.get("glu", False),
        use_bias=_bias(config, "mlp_bias"),
        kernel_initializer=initializer(config),
        name=name,
    )


def embedding(config, input_dim, name, mode="lookup"):
    return layers.ExpandableEmbedding(
        input_dim, config["hidden_size"], mode=mode, embeddings_initializer=initializer(config), name=name
    )


def position_embedding(config):
    """The learned position table, for families without rotary or relative positions."""
    return embedding(config, config["max_position_embeddings"], naming.EMBEDDING_POSITION, "position")


def token_input():
    return keras.Input((None,), dtype="int32", name=naming.INPUT_TOKEN)


def padding_mask(token_ids, config):
    """True at real tokens: id 0 is padding, unless `config["mask_padding"]`
    is False (models read from Hugging Face configs, which take no implicit
    padding mask: their id 0 is a token like any other). None then."""
    if not config.get("mask_padding", True):
        return None
    return ops.not_equal(token_ids, 0)


def unilm_mask(token_ids, segment_ids, config):
    """UniLM's sequence-to-sequence mask (Dong et al. 2019; bert4keras's
    `application="unilm"`), `(batch, queries, keys)`: position i sees
    position j where j's count of segment-1 tokens so far is at most i's, so
    the first segment sees itself both ways and the second sees the first
    and its own past; padding (`padding_mask`) is never a key."""
    seen = ops.cumsum(segment_ids, axis=1)
    mask = ops.less_equal(seen[:, None, :], seen[:, :, None])
    padding = padding_mask(token_ids, config)
    return mask if padding is None else ops.logical_and(mask, padding[:, None, :])


def block(x, mask, config, index, bias=None):
    """Block `index`: attention then feed-forward, each a residual branch.

    `config["residual"]`: `"post_ln"` normalises after each Add (BERT),
    `"pre_ln"` before each branch (GPT), `"admin"` is Post-LN with Admin's
    `LN(ω ⊙ x + f(x))` (`AdminResidual`). `bias` is added to the attention
    scores (T5's relative positions).
    """
    residual = config["residual"]
    for sublayer in naming.SUBLAYERS:
        name = naming.block(index, sublayer)
        y = norm(config, naming.block(index, sublayer, naming.NORM))(x) if residual == "pre_ln" else x
        if sublayer == naming.ATTENTION:
            y = attention(config, name)(y, attention_mask=mask, use_causal_mask=config["causal"], attention_bias=bias)
        else:
            y = feed_forward(config, name)(y)
        y = dropout(config, naming.block(index, sublayer, naming.DROPOUT))(y)
        if residual == "admin":
            x = norm(config, naming.block(index, sublayer, naming.NORM), admin=True)([x, y])
        else:
            x = keras.layers.Add(name=naming.block(index, sublayer, naming.ADD))([x, y])
        if residual == "post_ln":
            x = norm(config, naming.block(index, sublayer, naming.NORM))(x)
    return x


def embedding_norm(config, x):
    """Post-LN and Admin blocks take a normalised stream (as BERT's do);
    Pre-LN blocks normalise it themselves."""
    return x if config["residual"] == "pre_ln" else norm(config, naming.EMBEDDING_NORM)(x)


def stack(x, mask, config, bias=None):
    """The blocks, then, for Pre-LN, the final norm the stream needs."""
    for index in range(config["num_hidden_layers"]):
        x = block(x, mask, config, index, bias)
    if config["residual"] == "pre_ln":
        x = norm(config, naming.OUTPUT_NORM)(x)
    return x


def output_logits(config, x):
    """An untied output head (LLaMA's, T5's): its own vocabulary projection."""
    dense = keras.layers.Dense(
        config["vocab_size"], use_bias=False, kernel_initializer=initializer(config), name=naming.OUTPUT_LOGITS
    )
    return dense(x)
