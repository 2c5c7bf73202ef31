"""BERT: the Post-LN encoder, its `config.json` and its checkpoint names.

Inputs `token_ids` and `segment_ids`; outputs the sequence, then the pooled
first token (`with_pool`) and the masked-LM logits (`with_mlm`). Weights load
from and save to Hugging Face folders and Google TensorFlow checkpoints
(`kwiden.checkpoints`), with the tensor names `checkpoint_names` gives.
"""

import keras

from kwiden import layers
from kwiden.messages import warn
from kwiden.models import blocks, hf, naming
from kwiden.models.family import ALTERNATIVE_NAMES, HEADS, Family
from kwiden.models.family_model import FamilyModel

DEFAULTS = dict(residual="post_ln", causal=False)
FLAGS = ("with_mlm", "with_pool", "unilm")
# `with_pool`'s values and the pooler's activation: BERT's tanh (True), or none, as SimBERT and RoFormer-Sim read
# the pooler for their sentence vectors (bert4keras' `with_pool="linear"`).
POOLER_ACTIVATIONS = {True: "tanh", "tanh": "tanh", "linear": None}
# The Adam slots some Google checkpoints keep beside each variable: optimizer state, not weights.
BUFFERS = (r".*/adam_[mv]",)


def build_bert(config, with_mlm=False, with_pool=False, unilm=False, name="bert"):
    """BERT from a complete config; a `rotary_base` in it makes a RoFormer.
    The model is named `name` and records it as its family (`model.family`).
    `unilm` gives every block UniLM's sequence-to-sequence mask from the
    segment ids (`blocks.unilm_mask`) instead of the padding mask alone.
    `with_pool`: True or "tanh" (BERT's pooler), or "linear" (its Dense
    without the tanh: SimBERT's sentence vector).

    >>> from kwiden.models import load_config
    >>> bert = build_bert(load_config(dict(vocab_size=50, hidden_size=8, num_hidden_layers=1,
    ...     num_attention_heads=2)), with_pool=True)
    >>> [tuple(o.shape) for o in bert.outputs]
    [(None, None, 8), (None, 8)]
    """
    config = {**DEFAULTS, **config}
    token_ids = blocks.token_input()
    segment_ids = keras.Input((None,), dtype="int32", name=naming.INPUT_SEGMENT)
    token_embedding = blocks.embedding(config, config["vocab_size"], naming.EMBEDDING_TOKEN)
    x = _embeddings(config, token_embedding, token_ids, segment_ids)
    mask = blocks.unilm_mask(token_ids, segment_ids, config) if unilm else blocks.padding_mask(token_ids, config)
    x = blocks.stack(x, mask, config)
    outputs = [x]
    if with_pool:
        outputs.append(_pooler(config, x, pooler_activation(with_pool)))
    if with_mlm:
        outputs.append(_mlm_logits(config, x, token_embedding))
    outputs = outputs[0] if len(outputs) == 1 else outputs
    return FamilyModel([token_ids, segment_ids], outputs, name=name, family=name)


def _embeddings(config, token_embedding, token_ids, segment_ids):
    """Token, segment and (unless attention rotates by position) position
    embeddings, added, normalised and dropped out."""
    embeddings = [
        token_embedding(token_ids),
        blocks.embedding(config, config["type_vocab_size"], naming.EMBEDDING_SEGMENT)(segment_ids),
    ]
    if config.get("rotary_base") is None:  # RoFormer encodes positions in attention instead
        embeddings.append(blocks.position_embedding(config)(token_ids))
    x = keras.layers.Add(name=naming.EMBEDDING_ADD)(embeddings)
    x = blocks.norm(config, naming.EMBEDDING_NORM)(x)
    return blocks.dropout(config, naming.EMBEDDING_DROPOUT)(x)


def pooler_activation(with_pool):
    """The pooler's activation `with_pool` asks for; anything but `POOLER_ACTIVATIONS`' keys refused."""
    if isinstance(with_pool, (bool, str)) and with_pool in POOLER_ACTIVATIONS:
        return POOLER_ACTIVATIONS[with_pool]
    raise ValueError(f"with_pool={with_pool!r}: give True or 'tanh' (BERT's pooler), or 'linear' (its Dense without "
                     "the tanh, SimBERT's sentence vector).")  # fmt: skip


def _pooler(config, x, activation):
    """A Dense on the first token (`activation`: tanh, or none)."""
    pooled = layers.SelectToken(0, name=naming.POOLER)(x)
    dense = layers.ExpandableDense(
        config["hidden_size"],
        activation=activation,
        kernel_initializer=blocks.initializer(config),
        name=naming.POOLER_DENSE,
    )
    return dense(pooled)


def _mlm_logits(config, x, token_embedding):
    """Dense with `hidden_act`, LayerNorm, logits tied to the token table, a bias."""
    dense = layers.ExpandableDense(
        config["hidden_size"],
        activation=layers.activations.get(config["hidden_act"]),
        kernel_initializer=blocks.initializer(config),
        name=naming.MLM_DENSE,
    )
    h = blocks.norm(config, naming.MLM_NORM)(dense(x))
    return layers.BiasAdd(name=naming.MLM_BIAS)(token_embedding(h, reverse=True))


def from_hf_config(config):
    """BERT's `config.json` keys are kwiden's but for activation names
    (`gelu_new` is kwiden's `gelu_tanh`); a `rotary_base` (a RoFormer's, in
    kwiden's Google-format configs) is dropped: BERT's positions are a table."""
    return {**hf.with_kwiden_activation(config), "rotary_base": None}


def to_hf_config(model, format="hf"):
    """The `config.json` of a kwiden BERT, with Hugging Face's keys.

    >>> import kwiden
    >>> bert = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2))
    >>> config = to_hf_config(bert)
    >>> config["architectures"], config["intermediate_size"], config["max_position_embeddings"]
    (['BertModel'], 32, 512)
    """
    if model.get_layer(naming.block(0, naming.ATTENTION)).rotary is not None:
        raise ValueError("This model's attention is rotary, a RoFormer's: save it with family='roformer'.")
    config = encoder_config(model, format)
    config["max_position_embeddings"] = model.get_layer(naming.EMBEDDING_POSITION).input_dim
    return config


def encoder_config(model, format="hf"):
    """The `config.json` keys BERT and RoFormer share, read off the built model."""
    token = model.get_layer(naming.EMBEDDING_TOKEN)
    attention = model.get_layer(naming.block(0, naming.ATTENTION))
    ffn = model.get_layer(naming.block(0, naming.FEED_FORWARD))
    epsilon = _layer_norm_eps(model, format)
    _check_hidden_size(attention, token)
    with_mlm = naming.MLM_BIAS in {layer.name for layer in model.layers}
    config = {
        # Hugging Face's task model for a BERT with its MLM head; it holds the encoder under `bert.`.
        "architectures": ["BertForMaskedLM" if with_mlm else "BertModel"],
        "model_type": "bert",
        "vocab_size": token.input_dim,
        "hidden_size": token.output_dim,
        "num_hidden_layers": naming.count_blocks(layer.name for layer in model.layers),
        "num_attention_heads": attention.heads,
        "intermediate_size": ffn.intermediate_size,
        "hidden_act": hf.activation_to_hf(ffn),
        "hidden_dropout_prob": model.get_layer(naming.EMBEDDING_DROPOUT).rate,
        "attention_probs_dropout_prob": attention.dropout,
        "type_vocab_size": model.get_layer(naming.EMBEDDING_SEGMENT).input_dim,
        "layer_norm_eps": epsilon,
        "pad_token_id": 0,
        "torch_dtype": "float32",
    }
    # The builders' TruncatedNormal; a model from elsewhere may say no stddev.
    stddev = token.embeddings_initializer.get_config().get("stddev")
    if stddev is not None:
        config["initializer_range"] = stddev
    return config


def _check_hidden_size(attention, token):
    if attention.head_size * attention.heads != token.output_dim:
        raise ValueError(
            f"Heads of size {attention.head_size} × {attention.heads} do not make the hidden size "
            f"{token.output_dim}, which BERT's config assumes; save this model as .keras instead."
        )


def _layer_norm_eps(model, format):
    """BERT's config has one ε: the most common of the model's norms (a grown
    model's stream norms have ε/k, its MLM norm ε); a warning names the others.
    Another warns that Google's own code ignores it."""
    epsilon, different = hf.norm_epsilons(model)
    if different:
        warn(
            f"BERT's config has one layer_norm_eps; {epsilon:g} is written, and these norms differ: "
            f"{different} (after growth the MLM norm keeps the small model's ε)."
        )
    if format == "google" and epsilon != 1e-12:
        warn(
            f"Google's BERT code fixes LayerNorm's ε at 1e-12 whatever bert_config.json says; this "
            f"model's is {epsilon:g} (kwiden and other readers honour the config)."
        )
    return epsilon


def _skeleton(num_blocks):
    """`{(layer, weight): (module path, role, kind)}`, format-neutral; `L{i}`
    stands for block i, `bert` for the base model's prefix."""
    entries = {
        (naming.EMBEDDING_TOKEN, "embeddings"): ("bert embeddings word_embeddings", "table", None),
        (naming.EMBEDDING_SEGMENT, "embeddings"): ("bert embeddings token_type_embeddings", "table", None),
        (naming.EMBEDDING_POSITION, "embeddings"): ("bert embeddings position_embeddings", "table", None),
        **_norm(naming.EMBEDDING_NORM, "bert embeddings LayerNorm"),
        **_dense(naming.POOLER_DENSE, "bert pooler dense"),
        **_dense(naming.MLM_DENSE, "cls predictions transform dense"),
        **_norm(naming.MLM_NORM, "cls predictions transform LayerNorm"),
        (naming.MLM_BIAS, "bias"): ("cls predictions", "output_bias", None),
    }
    for index in range(num_blocks):
        entries.update(_block_skeleton(index))
    return entries


def _block_skeleton(index):
    path = f"bert encoder L{index}"
    attention, ffn = naming.block(index, naming.ATTENTION), naming.block(index, naming.FEED_FORWARD)
    entries = {}
    for projection in ("query", "key", "value"):
        entries.update(_dense(attention, f"{path} attention self {projection}", projection, "heads_out", "heads_bias"))
    entries.update(_dense(attention, f"{path} attention output dense", "output", "heads_in"))
    entries.update(_norm(naming.block(index, naming.ATTENTION, naming.NORM), f"{path} attention output LayerNorm"))
    entries.update(_dense(ffn, f"{path} intermediate dense", "inner"))
    entries.update(_dense(ffn, f"{path} output dense", "output"))
    entries.update(_norm(naming.block(index, naming.FEED_FORWARD, naming.NORM), f"{path} output LayerNorm"))
    return entries


def _norm(layer, path):
    return {(layer, "gamma"): (path, "gamma", None), (layer, "beta"): (path, "beta", None)}


def _dense(layer, path, weight=None, kind="linear", bias_kind=None):
    """A projection's kernel and bias; `weight` names them inside a layer that has several."""
    kernel, bias = (f"{weight}_kernel", f"{weight}_bias") if weight else ("kernel", "bias")
    return {(layer, kernel): (path, "kernel", kind), (layer, bias): (path, "bias", bias_kind)}


HF_ROLES = {
    "kernel": "weight",
    "gamma": "weight",
    "table": "weight",
    "bias": "bias",
    "beta": "bias",
    "output_bias": "bias",
}


def checkpoint_names(num_blocks, format, prefix=""):
    """`{(layer, weight): (checkpoint tensor name, kind)}` for a BERT of
    `num_blocks` blocks; `prefix` replaces `bert.` in Hugging Face names.

    >>> from kwiden.models import naming
    >>> checkpoint_names(1, "google")[naming.block(0, naming.FEED_FORWARD), "inner_kernel"]
    ('bert/encoder/layer_0/intermediate/dense/kernel', 'linear')
    >>> checkpoint_names(1, "hf", "bert.")[naming.EMBEDDING_NORM, "gamma"]
    ('bert.embeddings.LayerNorm.weight', None)
    """
    names = {}
    for key, (path, role, kind) in _skeleton(num_blocks).items():
        names[key] = (_tensor_name(path.split(), role, format, prefix), kind)
    return names


def _tensor_name(parts, role, format, prefix):
    block = "layer.{}" if format == "hf" else "layer_{}"
    parts = [block.format(p[1:]) if p.startswith("L") and p[1:].isdigit() else p for p in parts]
    if format == "google":
        return "/".join(parts + ([] if role == "table" else [role]))
    if parts[0] == "bert":
        parts = [prefix.rstrip(".")] * bool(prefix) + parts[1:]
    return ".".join(parts + [HF_ROLES[role]])


BERT = Family(
    "bert",
    build_bert,
    title="BERT",
    defaults=DEFAULTS,
    flags=FLAGS,
    from_hf_config=from_hf_config,
    to_hf_config=to_hf_config,
    checkpoint_names=checkpoint_names,
    formats=("hf", "google"),
    model_types=("bert",),
    buffers=BUFFERS,
    alternative_names=ALTERNATIVE_NAMES,
    heads=HEADS,
    tied_head=None,
    pretrains_with="masked_lm",
)
