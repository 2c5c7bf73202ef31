"""A model family as one object, and the registry `build_transformer_model` reads.

A `Family` holds all kwiden knows of one kind of model: how to build it, the
config values it has where BERT's differ, how its `config.json` translates
to kwiden's keys and back, and, for the families kwiden reads and writes
checkpoints of, which checkpoint tensor holds each weight. `kwiden.checkpoints`
takes the last two from the family and knows only the file formats.

This module imports only `kwiden.models.naming` and `kwiden.models.config`, below
`kwiden.checkpoints`, which reads the family from here.
"""

import collections.abc
import dataclasses
import importlib
import threading
from typing import Callable, Optional

from kwiden.models import naming
from kwiden.models.config import complete_config, config_sources

# The layers whose rows are the vocabulary (`keep_tokens` selects them).
VOCABULARY_ROWS = (naming.EMBEDDING_TOKEN, naming.MLM_BIAS, naming.OUTPUT_LOGITS)
# The defaults of a family that declares none, as kwiden read every family
# before families declared them: older Hugging Face files' LayerNorm `gamma`/
# `beta` and MLM decoder bias, and BERT's optional heads.
ALTERNATIVE_NAMES = {".LayerNorm.weight": ".LayerNorm.gamma", ".LayerNorm.bias": ".LayerNorm.beta",
                     "cls.predictions.bias": "cls.predictions.decoder.bias"}  # fmt: skip
HEADS = (naming.POOLER_DENSE, naming.MLM_DENSE, naming.MLM_NORM, naming.MLM_BIAS)


@dataclasses.dataclass(frozen=True)
class Family:
    """One kind of model.

    Attributes:
        name: the registry key, `model=`'s value, and the family the built
            model records (`FamilyModel.family`, which `family_of` reads).
        build: `build(config, name=…, **flags) -> keras.Model`, given a
            complete config (`Family.config`'s); `build_transformer_model`
            passes the family's `name`.
        title: how messages spell the family (`"BERT"`); `name` by default.
        defaults: config values the family has where BERT's
            (`kwiden.models.config.DEFAULTS`) differ or which BERT lacks.
        flags: the keyword flags `build` takes besides the config
            (`("with_mlm", "with_pool")` for BERT).
        from_hf_config: a config with Hugging Face's keys (a whole
            `config.json` or part of one) to one with kwiden's; other keys
            are kept. A copy where the two agree.
        to_hf_config: `to_hf_config(model, format) -> dict`, the
            `config.json` of a built model; None where the family cannot be
            written.
        checkpoint_names: `checkpoint_names(num_blocks, format, prefix)`:
            `{(layer name, weight name): (tensor name, kind)}`, `kind` a
            `kwiden.models.layout.Layout` or a short name `Layout.of` reads;
            `prefix` goes before the base model's names in Hugging Face
            files (`"bert."` in `BertForMaskedLM`'s). None where the family
            has no checkpoint format.
        formats: the checkpoint formats (`kwiden.checkpoints.FORMATS`) the
            names cover.
        model_types: the `model_type`s of Hugging Face configs this family
            reads; `build_transformer_model` picks the family by it where
            `model=` is not given.
        hf_prefix: what Hugging Face's task model (the one `to_hf_config`
            names) puts before the base model's tensor names (`"model."` in
            `LlamaForCausalLM`); None: the `model_type` and a dot, for task
            models (`"bert."` in `BertForMaskedLM`), nothing for base models.
        buffers: regular expressions for the tensors inside a block (the
            name after the block's `model.layers.0.`) that checkpoints carry
            and that hold no weight (LLaMA's `self_attn.rotary_emb.inv_freq`):
            loading passes over them, where it refuses any other block
            tensor the model does not read.
        alternative_names: `{suffix: suffix}`, other names the family's
            tensors have in older Hugging Face files (bert-base-uncased keeps
            LayerNorm's `gamma` and `beta`): a tensor missing under its name
            is looked for under the alternative. By default
            `ALTERNATIVE_NAMES`, those of older BERT files.
        heads: the optional heads (layer names) a checkpoint may lack: a
            model built with one needs a checkpoint that has it (`HEADS`,
            BERT's pooler and MLM head, by default).
        vocabulary_rows: the layers whose rows are the vocabulary, which
            `keep_tokens` selects.
        tied_head: `(output head, token table)`: the layers a config may tie
            (`tie_word_embeddings`), where a checkpoint may still hold the
            head written out; None where the family has no such head.
        pretrains_with: the name of the objective `kwiden.pretrain` trains
            the family with by default (`"causal_lm"`, `"masked_lm"`, or one
            registered with `kwiden.pretraining.register_objective`); None:
            it must be given.

    Example: BERT with RMSNorm, built without registering it:

    >>> import kwiden
    >>> from kwiden.models import naming
    >>> from kwiden.models import bert
    >>> rms_bert = Family("rms-bert", bert.build_bert, defaults={**bert.DEFAULTS, "norm": "rms"}, flags=bert.FLAGS)
    >>> model = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2), model=rms_bert)
    >>> model.name, model.get_layer(naming.EMBEDDING_NORM).rms
    ('rms-bert', True)
    """

    name: str
    build: Callable
    title: Optional[str] = None
    defaults: dict = dataclasses.field(default_factory=dict)
    flags: tuple = ()
    from_hf_config: Callable = dict
    to_hf_config: Optional[Callable] = None
    checkpoint_names: Optional[Callable] = None
    formats: tuple = ()
    model_types: tuple = ()
    hf_prefix: Optional[str] = None
    buffers: tuple = ()
    alternative_names: dict = dataclasses.field(default_factory=lambda: dict(ALTERNATIVE_NAMES))
    heads: tuple = HEADS
    vocabulary_rows: tuple = VOCABULARY_ROWS
    tied_head: Optional[tuple] = (naming.OUTPUT_LOGITS, naming.EMBEDDING_TOKEN)
    pretrains_with: Optional[str] = None

    def __post_init__(self):
        if self.title is None:
            object.__setattr__(self, "title", self.name)
        if bool(self.formats) != (self.checkpoint_names is not None):
            raise ValueError(f"Family {self.name!r}: give `checkpoint_names` and the `formats` they cover, or neither.")

    def config(self, config=None, config_path=None, **overrides):
        """The complete config `build` takes: the file, `config` and
        `overrides` (later ones win), each translated by `from_hf_config`,
        then the family's defaults and BERT's where none gives a value.

        >>> from kwiden.models import llama
        >>> config = llama.LLAMA.config(dict(vocab_size=50, hidden_size=8, num_hidden_layers=1,
        ...     num_attention_heads=2, rms_norm_eps=1e-5))
        >>> config["layer_norm_eps"], config["norm"], config["attention_head_size"]
        (1e-05, 'rms', 4)
        """
        merged = {}
        for source in config_sources(config, config_path, overrides):
            merged.update(self.from_hf_config(source))
        return complete_config(merged, self.defaults)


# The families kwiden brings, in the order a model type is looked for among them: the module and name of each
# (imported when the families are first looked at, so that naming them costs the command line no Keras import).
BUILT_IN = {
    "bert": ("kwiden.models.bert", "BERT"),
    "gpt": ("kwiden.models.gpt", "GPT"),
    "llama": ("kwiden.models.llama", "LLAMA"),
    "mistral": ("kwiden.models.mistral", "MISTRAL"),
    "qwen2": ("kwiden.models.qwen2", "QWEN2"),
    "roformer": ("kwiden.models.roformer", "ROFORMER"),
    "t5": ("kwiden.models.t5", "T5"),
}


class _Registry(collections.abc.MutableMapping):
    """`{name: Family}`: kwiden's families (`BUILT_IN`), imported when first looked at, then those
    `register_family` added."""

    def __init__(self):
        self._families = None
        self._added = {}
        self._lock = threading.RLock()  # one thread fills it; another waits for it filled

    def _all(self):
        with self._lock:
            if self._families is None:
                found = {name: getattr(importlib.import_module(module), attribute)
                         for name, (module, attribute) in BUILT_IN.items()}  # fmt: skip
                self._families = {**found, **self._added}  # only once every import succeeded
            return self._families

    def __getitem__(self, name):
        return self._all()[name]

    def __setitem__(self, name, family):
        self._added[name] = family
        if self._families is not None:
            self._families[name] = family

    def __delitem__(self, name):
        self._added.pop(name, None)
        del self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())

    def copy(self):
        """Another registry of the same families (kwiden's imported), which registering in leaves this one as it is."""
        other = _Registry()
        other._families, other._added = dict(self._all()), dict(self._added)
        return other

    __copy__ = copy

    def names(self):
        """The registered families' names, sorted, without importing kwiden's (what `--model` lists)."""
        return sorted(self._all() if self._families is not None else {*BUILT_IN, *self._added})


FAMILIES = _Registry()


def register_family(family, replace=False):
    """Make `family` buildable by name (`model="…"`) and findable by
    `save_checkpoint`. Returns the family.

    >>> from kwiden.models import bert
    >>> register_family(bert.BERT)
    Traceback (most recent call last):
    ...
    ValueError: A family named 'bert' is registered already; pass replace=True to replace it.
    """
    if not isinstance(family, Family):
        raise TypeError(f"register_family takes a kwiden.models.Family, got {type(family).__name__}.")
    if family.name in FAMILIES and not replace:
        raise ValueError(f"A family named {family.name!r} is registered already; pass replace=True to replace it.")
    FAMILIES[family.name] = family
    return family


def get_family(model):
    """The family `model` names (a registered name), or `model` itself if it is a `Family`."""
    if isinstance(model, Family):
        return model
    if not isinstance(model, str) or model not in FAMILIES:
        raise ValueError(f"`model` must be one of {sorted(FAMILIES)}, got model={model!r}.")
    return FAMILIES[model]


def family_of_config(config, default="bert"):
    """The registered family whose `model_types` has `config`'s `model_type`
    (`default`'s, or None, where the config names none). An unknown one is
    refused, naming the types kwiden reads.

    >>> family_of_config({"model_type": "qwen2"}).name
    'qwen2'
    >>> family_of_config({"model_type": "falcon"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: The config's model_type 'falcon' is not one kwiden builds (...); pass `model=` ...
    """
    model_type = config.get("model_type")
    if model_type is None:
        return None if default is None else get_family(default)
    family = family_of_model_type(model_type)
    if family is not None:
        return family
    known = ", ".join(sorted(t for family in FAMILIES.values() for t in family.model_types))
    raise ValueError(
        f"The config's model_type {model_type!r} is not one kwiden builds ({known}); pass `model=` (a registered "
        "family or a kwiden.models.Family) if the model has one of those shapes."
    )


def family_of_model_type(model_type):
    """The registered family whose `model_types` has `model_type`, or None."""
    return next((family for family in FAMILIES.values() if model_type in family.model_types), None)


def family_of(model):
    """The family of a built keras `model`: the one it records
    (`model.family` of a `kwiden.models.FamilyModel`, which kwiden's builders
    return and growth, `kwiden.training.admin.fold`, `.keras` files and renames keep).

    A model without a record (a plain `keras.Model` built by hand, or one
    saved to a `.keras` file before kwiden recorded families) is found, as
    before, by its name (the name kwiden's builders give: `"llama"`); models
    of other names, and records of families not registered, are read as
    BERT, as kwiden read every model before it had families.
    """
    recorded = recorded_family(model)
    return FAMILIES.get(model.name if recorded is None else recorded, FAMILIES["bert"])


def recorded_family(model):
    """The family's name `model` records (`FamilyModel.family`), or None."""
    recorded = getattr(model, "family", None)
    return recorded if isinstance(recorded, str) else None
