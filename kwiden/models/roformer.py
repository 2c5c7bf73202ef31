"""RoFormer: BERT with rotary position embeddings in attention instead of a
position table (config key `rotary_base`, 10000 by default).

It is built by BERT's builder. Its weights have BERT's names in Google's
format (`bert_model.ckpt.*`, as the RoFormer releases ship) and in Hugging
Face's (`roformer.encoder.layer.0…`, `RoFormerModel` and
`RoFormerForMaskedLM`), whose rotary base is fixed at 10000.
"""

from kwiden.models import bert, hf, naming
from kwiden.models.family import Family

DEFAULTS = {**bert.DEFAULTS, "rotary_base": 10000.0}
# Hugging Face's RoFormer turns pairs at 10000^(-2i/d) and keeps no base in its config.
HF_BASE = 10000.0


def from_hf_config(config):
    """A RoFormer config under kwiden's keys; Hugging Face's options kwiden
    does not build are refused.

    >>> from_hf_config({"model_type": "roformer", "rotary_value": True})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: This RoFormer config sets rotary_value (values rotated too), which kwiden's RoFormer ...
    """
    if config.get("rotary_value"):
        raise ValueError(
            "This RoFormer config sets rotary_value (values rotated too), which kwiden's RoFormer does not compute."
        )
    embedding = config.get("embedding_size")
    if embedding is not None and embedding != config.get("hidden_size", embedding):
        raise ValueError(
            f"This RoFormer config's embedding_size={embedding} differs from hidden_size={config['hidden_size']} "
            "(a projection after the embeddings), which kwiden's RoFormer does not build."
        )
    if config.get("model_type") == "roformer":
        config = {**config, "rotary_base": HF_BASE}
    return hf.with_kwiden_activation(config)


def to_hf_config(model, format="google"):
    """The `bert_config.json` of a kwiden RoFormer: BERT's keys and `rotary_base`.

    >>> import kwiden
    >>> roformer = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2), model="roformer")
    >>> to_hf_config(roformer)["rotary_base"]
    10000.0
    """
    attention = model.get_layer(naming.block(0, naming.ATTENTION))
    if attention.rotary_frequencies is not None:
        raise ValueError(
            "This RoFormer's rotary frequencies were set by growth (heads='size', rope='exact') and a config "
            "can only say `rotary_base`; grow with heads='count' to keep them, or save it as a .keras model."
        )
    config = {**bert.encoder_config(model, format), "model_type": "roformer"}
    if format == "google":
        return {**config, "rotary_base": attention.rotary.base}
    if attention.rotary.base != HF_BASE:
        raise ValueError(
            f"Hugging Face's RoFormer turns at base {HF_BASE:g} and this model's is {attention.rotary.base:g}; "
            "save it with format='google' (whose config keeps rotary_base)."
        )
    architecture = config["architectures"][0].replace("Bert", "RoFormer")
    return {
        **config,
        "architectures": [architecture],
        "model_type": "roformer",
        "embedding_size": config["hidden_size"],
        "rotary_value": False,
    }


ROFORMER = Family(
    "roformer",
    bert.build_bert,
    title="RoFormer",
    defaults=DEFAULTS,
    flags=bert.FLAGS,
    from_hf_config=from_hf_config,
    to_hf_config=to_hf_config,
    checkpoint_names=bert.checkpoint_names,
    formats=("hf", "google"),
    model_types=("roformer",),
    buffers=bert.BUFFERS,
    alternative_names=bert.ALTERNATIVE_NAMES,
    heads=bert.HEADS,
    tied_head=None,
    pretrains_with="masked_lm",
)
