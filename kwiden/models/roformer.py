"""RoFormer: BERT with rotary position embeddings in attention instead of a
position table (config key `rotary_base`, 10000 by default).

It is built by BERT's builder and its weights have BERT's names in Google's
format (`bert_model.ckpt.*`, as the RoFormer releases ship); Hugging Face's
own roformer layout is not read.
"""

from kwiden import naming
from kwiden.models import bert
from kwiden.models.family import Family

DEFAULTS = {**bert.DEFAULTS, "rotary_base": 10000.0}


def to_hf_config(model, format="google"):
    """The `bert_config.json` of a kwiden RoFormer: BERT's keys and `rotary_base`.

    >>> import kwiden
    >>> roformer = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2), model="roformer")
    >>> to_hf_config(roformer)["rotary_base"]
    10000.0
    """
    if format == "hf":
        raise ValueError(
            "A RoFormer saved as a Hugging Face BERT would lose its rotary attention; use format='google'."
        )
    attention = model.get_layer(naming.block(0, naming.ATTENTION))
    if attention.rotary_frequencies is not None:
        raise ValueError(
            "This RoFormer's rotary frequencies were set by growth (rope='exact') and a BERT "
            "config can only say `rotary_base`; save it as a .keras model instead."
        )
    return {**bert.encoder_config(model, format), "rotary_base": attention.rotary.base}


ROFORMER = Family(
    "roformer",
    bert.build_bert,
    title="RoFormer",
    defaults=DEFAULTS,
    flags=bert.FLAGS,
    to_hf_config=to_hf_config,
    checkpoint_names=bert.checkpoint_names,
    formats=("google",),
)
