"""What the families share in Hugging Face's files: activation names (all of
them), and for the causal LMs (LLaMA, Mistral, Qwen2, GPT-2) reading a built
decoder's sizes back, the padding keys, and the refusals for grown models a
`config.json` cannot describe.

Hugging Face's decoders take no implicit padding mask (token id 0 is a token
like any other), so a model read from their config is built with
`mask_padding=False`; kwiden's own GPTs treat id 0 as padding.
"""

import collections

from kwiden import layers
from kwiden.messages import warn
from kwiden.models import naming

# Hugging Face's activation names → kwiden's (`FeedForward` takes these).
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "swish": "silu"}
# kwiden's → the name Hugging Face writes (its `ACT2FN` reads it back).
HF_ACTIVATIONS = {"gelu_tanh": "gelu_new"}


def activation_from_hf(name):
    """kwiden's name of a Hugging Face activation.

    >>> activation_from_hf("gelu_new"), activation_from_hf("silu")
    ('gelu_tanh', 'silu')
    """
    return ACTIVATIONS.get(name, name)


def with_kwiden_activation(config):
    """`config` with its activation (`hidden_act`, GPT-2's
    `activation_function`) as `hidden_act` in kwiden's name."""
    config = dict(config)
    for key in ("hidden_act", "activation_function"):
        if config.get(key) is not None:
            config["hidden_act"] = activation_from_hf(config[key])
    return config


def from_hf_decoder(config):
    """A Hugging Face decoder config's common translation: no padding mask
    (where the config names a `model_type`, so comes from Hugging Face) and
    kwiden's activation names."""
    config = with_kwiden_activation(config)
    if config.get("model_type") is not None and config.get("mask_padding") is None:
        config["mask_padding"] = False
    return config


def layers_of(model):
    """The layers a decoder's config is read from: the token table, block 0's
    attention and feed-forward, and the number of blocks."""
    return (
        model.get_layer(naming.EMBEDDING_TOKEN),
        model.get_layer(naming.block(0, naming.ATTENTION)),
        model.get_layer(naming.block(0, naming.FEED_FORWARD)),
        naming.count_blocks(layer.name for layer in model.layers),
    )


def norm_epsilons(model):
    """`(ε, {norm: its ε})`: the most common ε of the model's norms, and the
    norms whose ε differs from it (a grown BERT's MLM norm keeps ε where its
    stream norms have ε/k)."""
    norms = {
        layer.name: layer.epsilon for layer in model.layers if isinstance(layer, layers.ExpandableLayerNormalization)
    }
    epsilon = collections.Counter(norms.values()).most_common(1)[0][0]
    return epsilon, {name: value for name, value in norms.items() if value != epsilon}


def one_epsilon(model, title):
    """The one norm ε a Hugging Face decoder config holds; refused, naming
    the norms, where the model's differ."""
    epsilon, different = norm_epsilons(model)
    if different:
        raise ValueError(
            f"A {title} config.json has one norm epsilon; this model's norms differ ({epsilon:g} and {different}), "
            "so Hugging Face would compute another function. Save it as a .keras model instead."
        )
    return epsilon


def refuse_copied_rotary(attention, title):
    """Refuse rotary frequencies set by growth (`heads="size"`, `rope="exact"`):
    a config says `rope_theta` and `head_dim` only."""
    if attention.rotary is not None and attention.rotary_frequencies is not None:
        raise ValueError(
            f"This model's rotary frequencies were copied by growth (heads='size', rope='exact'), and a {title} "
            "config.json can only say rope_theta and the head size, whose schedule differs. Grow with "
            "heads='count' (the head size and the standard RoPE schedule stay, as HyperCloning does), or save it "
            "as a .keras model."
        )


def masks_padding(model):
    """Whether `model` treats token id 0 as padding: its graph holds the
    `not_equal(token_ids, 0)` of `kwiden.models.blocks.padding_mask`."""
    return any(type(operation).__name__ == "NotEqual" for operation in model.operations)


def padding_keys(model, title):
    """The config keys that say a model masks token id 0: `mask_padding`
    (which kwiden reads back) and `pad_token_id`; a warning says what
    Hugging Face needs for the same function. None where it does not."""
    if not masks_padding(model):
        return {}
    warn(
        f"This {title} treats token id 0 as padding (kwiden's own decoders do; build with mask_padding=False for "
        "one that does not). config.json says so with mask_padding, which kwiden reads back, but Hugging Face "
        "masks only what attention_mask says: pass attention_mask=(input_ids != 0) there for the same function."
    )
    return {"mask_padding": True, "pad_token_id": 0}


def activation_to_hf(ffn):
    name = ffn.activation_name
    return HF_ACTIVATIONS.get(name, name)
