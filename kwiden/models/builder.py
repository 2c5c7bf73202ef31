"""`build_transformer_model`, bert4keras' one entry point, over the registered
families (`kwiden.models.FAMILIES`): a model built, and its weights read from
a checkpoint (`kwiden.checkpoints`). It sits above both."""

from kwiden import checkpoints
from kwiden.messages import warn
from kwiden.models import blocks, naming
from kwiden.models.config import config_sources
from kwiden.models.family import FAMILIES, family_of_config, family_of_model_type, get_family
from kwiden.models.family_model import recording

RESIDUALS = blocks.RESIDUALS


def build_transformer_model(
    config=None,
    config_path=None,
    checkpoint_path=None,
    model=None,
    with_mlm=False,
    with_pool=False,
    unilm=False,
    residual=None,
    keep_tokens=None,
    allow_nonfinite=False,
    fresh_heads=False,
    **overrides,
):
    """Build a Transformer from a BERT-style config, as bert4keras does.

    Args:
        config: a dict with `config.json` keys (`vocab_size`, `hidden_size`,
            `num_hidden_layers`, `num_attention_heads`, `intermediate_size`,
            `hidden_act`, `max_position_embeddings`, `type_vocab_size`,
            `layer_norm_eps`, `hidden_dropout_prob`,
            `attention_probs_dropout_prob`, and `attention_head_size` where it
            differs from hidden / heads); a family reads its Hugging Face
            config's own keys too (`Family.from_hf_config`).
        config_path: a `config.json` to read; `config` and `overrides` win.
        checkpoint_path: pretrained weights: a Hugging Face folder
            (`model.safetensors`, or shards named by
            `model.safetensors.index.json`; read tensor by tensor with
            numpy, bfloat16 and float16 as the model's dtype) of BERT,
            RoFormer, GPT-2, LLaMA, Mistral or Qwen2, or a Google TensorFlow
            checkpoint of BERT or RoFormer (a folder with `bert_model.ckpt.*`,
            or its prefix); the format is detected from the files. Every weight must be found with its shape, or nothing
            is loaded. Without `config`/`config_path`, the folder's
            `config.json` or `bert_config.json` is read. Refused, with a
            one-line error naming the file: a folder that holds two
            checkpoints, files that differ from the folder's
            `kwiden-manifest.json` (written by `kwiden.save_checkpoint`),
            damaged files, tensors with NaN or infinite values, integer
            (quantized) weights, block tensors the model reads no weight
            from, and, before the model is built, a config whose
            `num_hidden_layers`, `vocab_size` or `hidden_size` the
            checkpoint's tensors contradict.
        allow_nonfinite: load tensors with NaN or infinite values all the same.
        fresh_heads: a head the model is built with (`with_mlm`, `with_pool`:
            the family's `heads`) that the checkpoint lacks starts freshly
            initialised (tied where the family ties it), its variables'
            paths in `model.fresh_weights`; every other weight still loads
            strictly. False: such a checkpoint is refused.
        keep_tokens: vocabulary ids to keep (bert4keras' option): the token
            table and the MLM bias keep those rows, in that order, and
            `vocab_size` becomes their number.
        model: a registered family's name (`kwiden.models.FAMILIES`) or a
            `kwiden.models.Family`; by default the family whose Hugging Face
            `model_type` the config names (`"llama"`, `"mistral"`,
            `"qwen2"`, `"gpt2"`, `"bert"`, `"roformer"`), else `"roformer"`
            for a Google checkpoint without a position table (RoFormer's and
            RoFormer-Sim's releases), else `"bert"`.
            Registered: `"bert"` (Post-LN encoder;
            inputs `token_ids`, `segment_ids`; output the sequence),
            `"roformer"` (BERT with rotary position embeddings in attention
            instead of a position table; config key `rotary_base`, default
            10000), `"gpt"` (Pre-LN causal decoder; input `token_ids`; output
            tied logits) or `"llama"` (Pre-LN decoder with RMSNorm, rotary
            attention (`rope_theta`), SwiGLU, grouped-query attention
            (`num_key_value_heads`), no biases, an untied head unless
            `tie_word_embeddings`), `"mistral"` (LLaMA without its sliding
            window, refused where it would matter), `"qwen2"` (LLaMA with
            query, key and value biases), or `"t5"` (T5 v1.1's encoder: RMSNorm,
            unscaled attention with a relative position bias, gated GeLU, no
            biases, untied head).
        with_mlm: BERT only: add the masked-LM head (Dense with `hidden_act`,
            LayerNorm, tied logits plus a bias) as the last output, as logits.
        with_pool: BERT only: add the pooler as an output: True or `"tanh"`,
            BERT's (tanh Dense on the first token); `"linear"`, its Dense
            without the tanh (SimBERT's sentence vector).
        unilm: BERT and RoFormer: UniLM's sequence-to-sequence attention
            mask from the segment ids, as bert4keras's `application="unilm"`:
            segment 0 (the source) sees itself both ways, segment 1 (the
            target) the source and its own past; `kwiden.grow` keeps it.
        residual: how blocks normalise: `"post_ln"` (`LN(x + f(x))`, the
            default for BERT and RoFormer), `"pre_ln"` (`x + f(LN(x))` and a
            final norm (`naming.OUTPUT_NORM`), the default for GPT, LLaMA and T5) or
            `"admin"` (Post-LN with `AdminResidual`'s `LN(ω ⊙ x + f(x))`,
            which trains deep stacks once `kwiden.training.admin.initialize` has set
            ω). Post-LN and Admin decoders normalise their embeddings
            (`naming.EMBEDDING_NORM`) as BERT does.
        **overrides: config keys, e.g. `hidden_dropout_prob=0.0`.

    Returns:
        A functional `keras.Model` (a `kwiden.models.FamilyModel`), named
        after its family and recording it (`model.family`, which
        `kwiden.models.family_of` reads under any name). Token id 0 is
        padding. Loaded from a checkpoint (without `keep_tokens`), it records
        the folder (`model.checkpoint_folder`), whose tokenizer's files
        `kwiden.save_checkpoint` copies beside the weights it saves.

    Example:

    >>> import kwiden
    >>> bert = kwiden.build_transformer_model(
    ...     dict(vocab_size=100, hidden_size=16, num_hidden_layers=2,
    ...          num_attention_heads=2), with_mlm=True)
    >>> [tuple(o.shape) for o in bert.outputs]
    [(None, None, 16), (None, None, 100)]
    """
    if model is not None:
        _check_weights_options(get_family(model), checkpoint_path, keep_tokens)
    if checkpoint_path is not None:  # found and checked against its manifest before its config is read
        checkpoint_path = checkpoints.open_checkpoint(checkpoint_path)
        if config is None and config_path is None:
            config_path = checkpoints.config_beside(checkpoint_path)
    named = _family_of_sources(config, config_path, overrides, model)
    if named is None and model is None and checkpoint_path is not None:
        named = _family_of_weights(checkpoint_path)
    family = get_family(model if model is not None else named or "bert")
    _check_weights_options(family, checkpoint_path, keep_tokens, named)
    flags = _flags(family, with_mlm=with_mlm, with_pool=with_pool, unilm=unilm)
    if keep_tokens is not None:
        overrides["vocab_size"] = len(keep_tokens)
    config = family.config(config, config_path, **overrides)
    if residual is not None:
        config["residual"] = blocks.check_residual(residual)
    if checkpoint_path is not None:  # before building: the config's sizes may be far from the checkpoint's
        checkpoints.check_config(family, config, checkpoint_path, keep_tokens)
    built = recording(family.build(config, name=family.name, **flags), family.name)
    if checkpoint_path is None:
        return built
    loaded = checkpoints.load_weights(
        built, checkpoint_path, keep_tokens, family=family, allow_nonfinite=allow_nonfinite, fresh_heads=fresh_heads
    )
    if keep_tokens is None:  # its tokenizer's files fit it: `save_checkpoint` copies them from here
        loaded.checkpoint_folder = checkpoint_path.path.parent.resolve()
    return loaded


def checkpoint_family(checkpoint_path, model=None):
    """The family `build_transformer_model(checkpoint_path=checkpoint_path, model=model)` builds, found without
    building it: `model`'s, else the one its config's `model_type` names, else its tensors' (`_family_of_weights`),
    else BERT."""
    if model is not None:
        return get_family(model)
    checkpoint = checkpoints.open_checkpoint(checkpoint_path)
    named = _family_of_sources(None, checkpoints.config_beside(checkpoint), {})
    return named or _family_of_weights(checkpoint) or get_family("bert")


def _family_of_sources(config, config_path, overrides, model=None):
    """The family the configs' `model_type` names (the last source naming one), or None; None too for a
    `model_type` kwiden does not know where `model` says what the config holds (as that refusal advises)."""
    merged = {}
    for source in config_sources(config, config_path, overrides):
        merged.update(source)
    if model is not None and family_of_model_type(merged.get("model_type")) is None:
        return None
    return family_of_config(merged, default=None)


def _family_of_weights(checkpoint):
    """The family a checkpoint's tensors say where its config names none: a RoFormer for a Google checkpoint of
    BERT's names without a position table (RoFormer encodes positions in attention; its Google releases, and
    RoFormer-Sim's, write BERT's names and a config without model_type), else None."""
    if checkpoint.format != "google":
        return None
    bert = get_family("bert")
    if not checkpoints.holds_layer(checkpoint, naming.EMBEDDING_TOKEN, bert):
        return None
    if checkpoints.holds_layer(checkpoint, naming.EMBEDDING_POSITION, bert):
        return None
    warn(f"{checkpoint.path}: BERT's names without a position table, and a config that names no model_type: read "
         "as a RoFormer (its Google releases are so). Pass model='roformer' to say so, or model='bert' if it is a "
         "BERT missing bert/embeddings/position_embeddings.")  # fmt: skip
    return get_family("roformer")


def _flags(family, **flags):
    """The flags `family` builds with; raises on a set one it has not."""
    wrong = [name for name, value in flags.items() if value and name not in family.flags]
    if wrong:
        raise ValueError(f"`{wrong[0]}` applies to BERT-style models (bert, roformer), not {family.name!r}.")
    return {name: value for name, value in flags.items() if name in family.flags}


def _check_weights_options(family, checkpoint_path, keep_tokens, named=None):
    """Refuse weights for a family without checkpoint names, and a family
    whose tensor names differ from those of the family the config names."""
    if (checkpoint_path is not None or keep_tokens is not None) and family.checkpoint_names is None:
        loadable = ", ".join(repr(name) for name, other in FAMILIES.items() if other.checkpoint_names is not None)
        raise ValueError(
            f"checkpoint_path and keep_tokens load the weights of model={loadable}, not model={family.name!r}."
        )
    # A BERT config may hold another BERT-style model's weights (Google's RoFormer releases write BERT's);
    # any other model_type says what the weights compute.
    if (
        checkpoint_path is not None
        and named not in (None, family)
        and (named.checkpoint_names is not family.checkpoint_names or named.name != "bert")
    ):
        raise ValueError(
            f"The checkpoint's config is a {named.title}'s (model_type {named.model_types[0]!r}), and its weights "
            f"compute a {named.title}; model={family.name!r} would read them as another model. Pass "
            f"model={named.name!r}, or leave `model` out."
        )
    if keep_tokens is not None and checkpoint_path is None:
        raise ValueError("`keep_tokens` selects rows of a checkpoint's vocabulary; pass `checkpoint_path` too.")
