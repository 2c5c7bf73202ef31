"""Builders for BERT (Post-LN encoder) and GPT (Pre-LN decoder), bert4keras-style.

Layer names are stable (`Transformer-0-MultiHeadSelfAttention`, …): checkpoint
loaders map onto them and `kwiden.grow` keeps them.
"""

import pathlib

import keras
from keras import ops

from kwiden import layers
from kwiden.checkpoints import load_bert_weights
from kwiden.models.config import load_config


def _initializer(config):
    return keras.initializers.TruncatedNormal(stddev=config["initializer_range"])


def _norm(config, name, admin=False):
    options = dict(rms=True, center=False) if config.get("norm") == "rms" else {}
    if admin:
        return layers.AdminResidual(epsilon=config["layer_norm_eps"], name=name, **options)
    return layers.ExpandableLayerNormalization(epsilon=config["layer_norm_eps"], name=name, **options)


def _dropout(config, name):
    return keras.layers.Dropout(config["hidden_dropout_prob"], name=name)


def _attention(config, name):
    init = _initializer(config)
    return layers.ExpandableMultiHeadAttention(
        heads=config["num_attention_heads"],
        head_size=config["attention_head_size"],
        dropout=config["attention_probs_dropout_prob"],
        rotary_base=config.get("rotary_base"),
        key_value_heads=config.get("num_key_value_heads"),
        use_bias=config.get("use_bias", True),
        scaled=config.get("scaled_attention", True),
        kernel_initializer=init,
        name=name,
    )


def _feed_forward(config, name):
    return layers.FeedForward(
        config["intermediate_size"],
        activation=config["hidden_act"],
        glu=config.get("glu", False),
        use_bias=config.get("use_bias", True),
        kernel_initializer=_initializer(config),
        name=name,
    )


def _embedding(config, input_dim, name, mode="lookup"):
    return layers.ExpandableEmbedding(
        input_dim,
        config["hidden_size"],
        mode=mode,
        embeddings_initializer=_initializer(config),
        name=name,
    )


def _padding_mask(token_ids):
    """True at real tokens; id 0 is padding."""
    return ops.not_equal(token_ids, 0)


RESIDUALS = ("post_ln", "pre_ln", "admin")


def _block(x, mask, config, prefix, bias=None):
    """One Transformer block: attention then feed-forward, each a residual
    branch. `config["residual"]`: `"post_ln"` normalises after each Add
    (BERT), `"pre_ln"` before each branch (GPT), `"admin"` is Post-LN with
    Admin's `LN(ω ⊙ x + f(x))` (`AdminResidual`)."""
    residual = config["residual"]
    for sublayer in ("MultiHeadSelfAttention", "FeedForward"):
        name = f"{prefix}-{sublayer}"
        y = _norm(config, f"{name}-Norm")(x) if residual == "pre_ln" else x
        if sublayer == "MultiHeadSelfAttention":
            causal = config["causal"]
            y = _attention(config, name)(y, attention_mask=mask, use_causal_mask=causal, attention_bias=bias)
        else:
            y = _feed_forward(config, name)(y)
        y = _dropout(config, f"{name}-Dropout")(y)
        if residual == "admin":
            x = _norm(config, f"{name}-Norm", admin=True)([x, y])
        else:
            x = keras.layers.Add(name=f"{name}-Add")([x, y])
        if residual == "post_ln":
            x = _norm(config, f"{name}-Norm")(x)
    return x


def _embedding_norm(config, x):
    """Post-LN and Admin blocks take a normalised stream (as BERT's does);
    Pre-LN blocks normalise it themselves."""
    return x if config["residual"] == "pre_ln" else _norm(config, "Embedding-Norm")(x)


def _stack(x, mask, config, bias=None):
    """The blocks, then, for Pre-LN, the final norm the stream needs."""
    for index in range(config["num_hidden_layers"]):
        x = _block(x, mask, config, f"Transformer-{index}", bias)
    if config["residual"] == "pre_ln":
        x = _norm(config, "Output-Norm")(x)
    return x


def build_bert(config, with_mlm=False, with_pool=False, name="bert"):
    config = {"residual": "post_ln", "causal": False, **config}
    token_ids = keras.Input((None,), dtype="int32", name="Input-Token")
    segment_ids = keras.Input((None,), dtype="int32", name="Input-Segment")
    token_embedding = _embedding(config, config["vocab_size"], "Embedding-Token")
    embeddings = [
        token_embedding(token_ids),
        _embedding(config, config["type_vocab_size"], "Embedding-Segment")(segment_ids),
    ]
    if config.get("rotary_base") is None:  # RoFormer encodes positions in attention instead
        positions = _embedding(config, config["max_position_embeddings"], "Embedding-Position", "position")
        embeddings.append(positions(token_ids))
    x = keras.layers.Add(name="Embedding-Add")(embeddings)
    x = _norm(config, "Embedding-Norm")(x)
    x = _dropout(config, "Embedding-Dropout")(x)
    x = _stack(x, _padding_mask(token_ids), config)
    outputs = [x]
    if with_pool:
        pooled = layers.SelectToken(0, name="Pooler")(x)
        pooled = layers.ExpandableDense(
            config["hidden_size"],
            activation="tanh",
            kernel_initializer=_initializer(config),
            name="Pooler-Dense",
        )(pooled)
        outputs.append(pooled)
    if with_mlm:
        h = layers.ExpandableDense(
            config["hidden_size"],
            activation=config["hidden_act"],
            kernel_initializer=_initializer(config),
            name="MLM-Dense",
        )(x)
        h = _norm(config, "MLM-Norm")(h)
        logits = token_embedding(h, reverse=True)
        outputs.append(layers.BiasAdd(name="MLM-Bias")(logits))
    return keras.Model(
        [token_ids, segment_ids], outputs[0] if len(outputs) == 1 else outputs, name=name
    )


def build_gpt(config, name="gpt"):
    """Pre-LN causal decoder: GPT-2 style, or LLaMA style with `norm="rms"`,
    `rotary_base`, `glu`, `num_key_value_heads`, `use_bias=False` and
    `tie_word_embeddings=False` in the config."""
    config = {"residual": "pre_ln", "causal": True, **config}
    token_ids = keras.Input((None,), dtype="int32", name="Input-Token")
    token_embedding = _embedding(config, config["vocab_size"], "Embedding-Token")
    x = token_embedding(token_ids)
    if config.get("rotary_base") is None:
        positions = _embedding(config, config["max_position_embeddings"], "Embedding-Position", "position")
        x = keras.layers.Add(name="Embedding-Add")([x, positions(token_ids)])
    x = _embedding_norm(config, x)
    x = _dropout(config, "Embedding-Dropout")(x)
    x = _stack(x, _padding_mask(token_ids), config)
    if config.get("tie_word_embeddings", True):
        logits = token_embedding(x, reverse=True)
    else:
        logits = keras.layers.Dense(
            config["vocab_size"], use_bias=False, kernel_initializer=_initializer(config), name="Output-Logits"
        )(x)
    return keras.Model(token_ids, logits, name=name)


def build_t5_encoder(config, name="t5"):
    """T5 v1.1's encoder: Pre-LN with RMSNorm, unscaled attention with a
    relative position bias shared by all blocks, gated-GeLU FFN, no biases,
    and an untied output head (`Output-Logits`)."""
    config = {"residual": "pre_ln", "causal": False, **config}
    token_ids = keras.Input((None,), dtype="int32", name="Input-Token")
    x = _embedding(config, config["vocab_size"], "Embedding-Token")(token_ids)
    x = _embedding_norm(config, x)
    x = _dropout(config, "Embedding-Dropout")(x)
    mask = _padding_mask(token_ids)
    bias = layers.RelativePositionBias(
        config["num_attention_heads"],
        num_buckets=config["relative_attention_num_buckets"],
        max_distance=config["relative_attention_max_distance"],
        key_value_heads=config.get("num_key_value_heads"),
        embeddings_initializer=_initializer(config),
        name="Embedding-Relative-Position",
    )(token_ids)
    x = _stack(x, mask, config, bias)
    logits = keras.layers.Dense(
        config["vocab_size"], use_bias=False, kernel_initializer=_initializer(config), name="Output-Logits"
    )(x)
    return keras.Model(token_ids, logits, name=name)


T5_DEFAULTS = dict(
    norm="rms", glu=True, use_bias=False, hidden_act="gelu", scaled_attention=False, causal=False,
    layer_norm_eps=1e-6, relative_attention_num_buckets=32, relative_attention_max_distance=128,
)  # fmt: skip

LLAMA_DEFAULTS = dict(
    norm="rms", glu=True, use_bias=False, hidden_act="silu", hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0, tie_word_embeddings=False, layer_norm_eps=1e-6,
)  # fmt: skip


def _config_beside(checkpoint_path):
    folder = pathlib.Path(checkpoint_path)
    folder = folder if folder.is_dir() else folder.parent
    for name in ("config.json", "bert_config.json"):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"No config.json or bert_config.json beside {checkpoint_path}; pass `config_path`.")


BUILDERS = {"bert": build_bert, "gpt": build_gpt, "llama": build_gpt, "roformer": build_bert, "t5": build_t5_encoder}


def build_transformer_model(
    config=None,
    config_path=None,
    checkpoint_path=None,
    model="bert",
    with_mlm=False,
    with_pool=False,
    residual=None,
    keep_tokens=None,
    **overrides,
):
    """Build a Transformer from a BERT-style config, as bert4keras does.

    Args:
        config: a dict with `config.json` keys (`vocab_size`, `hidden_size`,
            `num_hidden_layers`, `num_attention_heads`, `intermediate_size`,
            `hidden_act`, `max_position_embeddings`, `type_vocab_size`,
            `layer_norm_eps`, `hidden_dropout_prob`,
            `attention_probs_dropout_prob`, and `attention_head_size` where it
            differs from hidden / heads).
        config_path: a `config.json` to read; `config` and `overrides` win.
        checkpoint_path: pretrained weights for `model="bert"` or
            `"roformer"` (Google format only): a Hugging Face folder
            (`model.safetensors`, read with numpy) or a Google TensorFlow checkpoint (a folder with
            `bert_model.ckpt.*`, or its prefix); the format is detected from
            the files. Every weight must be found with its shape, or nothing
            is loaded. Without `config`/`config_path`, the folder's
            `config.json` or `bert_config.json` is read.
        keep_tokens: vocabulary ids to keep (bert4keras' option): the token
            table and the MLM bias keep those rows, in that order, and
            `vocab_size` becomes their number.
        model: `"bert"` (Post-LN encoder; inputs `token_ids`, `segment_ids`;
            output the sequence), `"roformer"` (BERT with rotary position
            embeddings in attention instead of a position table; config key
            `rotary_base`, default 10000), `"gpt"` (Pre-LN causal decoder;
            input `token_ids`; output tied logits) or `"llama"` (Pre-LN
            decoder with RMSNorm, rotary attention (`rope_theta`), SwiGLU,
            grouped-query attention (`num_key_value_heads`), no biases, an
            untied head unless `tie_word_embeddings`), or `"t5"` (T5 v1.1's
            encoder: RMSNorm, unscaled attention with a relative position
            bias, gated GeLU, no biases, untied head).
        with_mlm: BERT only: add the masked-LM head (Dense with `hidden_act`,
            LayerNorm, tied logits plus a bias) as the last output, as logits.
        with_pool: BERT only: add the pooler (tanh Dense on the first token)
            as an output.
        residual: how blocks normalise: `"post_ln"` (`LN(x + f(x))`, the
            default for BERT and RoFormer), `"pre_ln"` (`x + f(LN(x))` and a
            final `Output-Norm`, the default for GPT, LLaMA and T5) or
            `"admin"` (Post-LN with `AdminResidual`'s `LN(ω ⊙ x + f(x))`,
            which trains deep stacks once `kwiden.admin.initialize` has set
            ω). Post-LN and Admin decoders normalise their embeddings
            (`Embedding-Norm`) as BERT does.
        **overrides: config keys, e.g. `hidden_dropout_prob=0.0`.

    Returns:
        A functional `keras.Model`. Token id 0 is padding.

    Example:

    >>> import kwiden
    >>> bert = kwiden.build_transformer_model(
    ...     dict(vocab_size=100, hidden_size=16, num_hidden_layers=2,
    ...          num_attention_heads=2), with_mlm=True)
    >>> [tuple(o.shape) for o in bert.outputs]
    [(None, None, 16), (None, None, 100)]
    """
    if model not in BUILDERS:
        raise ValueError(f"`model` must be one of {sorted(BUILDERS)}, got model={model!r}.")
    if (checkpoint_path is not None or keep_tokens is not None) and model not in ("bert", "roformer"):
        raise ValueError(
            f"checkpoint_path and keep_tokens load BERT-style weights (model='bert' or 'roformer'), not model={model!r}."
        )
    defaults = {"llama": LLAMA_DEFAULTS, "t5": T5_DEFAULTS}.get(model)
    if checkpoint_path is not None and config is None and config_path is None:
        config_path = _config_beside(checkpoint_path)
    if keep_tokens is not None:
        overrides["vocab_size"] = len(keep_tokens)
    config = load_config(config, config_path, defaults=defaults, **overrides)
    if residual is not None:
        if residual not in RESIDUALS:
            raise ValueError(f"`residual` must be one of {RESIDUALS}, got residual={residual!r}.")
        config["residual"] = residual
    if model in ("bert", "roformer"):
        config["rotary_base"] = (config.get("rotary_base") or 10000.0) if model == "roformer" else None
        built = build_bert(config, with_mlm=with_mlm, with_pool=with_pool, name=model)
        if checkpoint_path is None:
            if keep_tokens is not None:
                raise ValueError("`keep_tokens` selects rows of a checkpoint's vocabulary; pass `checkpoint_path` too.")
            return built
        return load_bert_weights(built, checkpoint_path, keep_tokens)

    if with_mlm or with_pool:
        raise ValueError(f"`with_mlm` and `with_pool` apply to BERT-style models, not {model!r}.")
    if model == "t5":
        return build_t5_encoder(config)
    if model == "llama":  # Hugging Face's names for the rotary base and the RMSNorm epsilon
        config["rotary_base"] = config.get("rope_theta", 10000.0)
        config["layer_norm_eps"] = config.get("rms_norm_eps", config["layer_norm_eps"])
        return build_gpt(config, name="llama")
    return build_gpt(config)
