"""Pretraining objectives on a token stream, in a registry of kwiden's
(`BUILT_IN`) a new one joins (`register_objective`): the next token (`causal_lm`, decoders) and masked
tokens (`masked_lm`, encoders: BERT's 15%, 80/10/10, loss on the masked
positions only, optionally whole words).

An objective's module is read for its declarations (its name, its options, the flags they make) before Keras
is imported, so that the command line answers at once: what needs Keras is imported where it computes
(`token_loss`, and the methods of `simbert` that need it)."""

import dataclasses
import functools
import importlib

import numpy as np

from kwiden import arguments
from kwiden.arguments import option
from kwiden.text import tokens

MASKED = 0.15
# Of the masked positions: [MASK], a random token, the token itself.
REPLACED_BY_MASK, REPLACED_BY_RANDOM = 0.8, 0.1
# Targets the masked LM's loss ignores (every position it did not mask).
IGNORED = -1
MAX_VALID_WINDOWS = 256
LEAST_VALID_WINDOWS = 4


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of an objective that adds none."""


class Objective:
    """What a pretraining objective is to the trainer; subclass it and
    `register_objective` the subclass to pretrain with it (`--objective NAME`,
    or a family's `pretrains_with`).

    Its own options: `Options`, a frozen dataclass whose fields are
    `kwiden.arguments.option(...)` (default, kind and range, help, flag):
    they become `kwiden pretrain` flags and `kwiden.pretrain` keywords, are
    checked by `options(values)` (each by its field; override it for checks
    across them), recorded in run.json beside every run's, compared on a
    resume (but those declared `resume=FREE`), and refused, naming the flag,
    in a run of another objective. `fingerprint(options)` is what else a
    resume must find unchanged (`{key: value}`, kept in run.json under
    `key`, e.g. the files of a folder an option names; compared before
    `made_for`), `differs(options, key, began, now)` the refusal where it
    changed.

    `check_run(options)` refuses, naming the flag, every run's options it
    cannot train with (checked before Keras is imported); `made_for(tokenizer,
    family, options)` makes one for a run (refusing, naming the flag, what it
    cannot train); `options` holds every run's
    options (`PretrainOptions`: `seq_len`, `batch_size`, …) and its own, as
    attributes. `window` is how many tokens of the stream one example reads;
    `batch(tokens, starts, rng)` the `(inputs, targets)` of the examples at
    `starts`; `model_arguments` what `kwiden.build_transformer_model` takes
    to give the model the heads the objective trains; `losses()` what
    `compile` takes; `counted(targets)` how many targets a batch's loss
    averages over (evaluations weigh batches so).

    Its data: `read(corpus, tokenizer, folder, verbose)` makes it from the
    corpus files (by default the token stream, `kwiden.text.tokens`;
    whatever it returns has a length and a `digest`, which a resume compares),
    `split(data, valid_fraction)` holds the end out, and `training_batch` and
    `validation_batches` draw from the parts. An objective that reads records
    (sentence pairs, documents) overrides these four; `notes(data)` are lines
    the run's log.txt gets about what it read (pairs cut, …).

    Its own train step: `compute_loss(model, x, y, y_pred, sample_weight,
    training)`, where an objective defines it, is the loss of each training
    and validation batch in place of the compiled losses' (Keras'
    `Model.compute_loss`, which it may call: `keras.Model.compute_loss(model,
    x, y, y_pred, sample_weight, training)`). It runs inside the compiled
    step, on the device, so a frozen reference model it calls (a teacher, a
    reference policy) costs no trip to the host.

    Beside the validation loss, `measured` names what a metrics row records
    as `valid_NAME` (a loss's parts, an accuracy): `measures(outputs,
    targets)` of one validation batch's outputs, `{name: (value, weight)}`,
    averaged over the batches by weight.
    """

    name = None
    Options = NoOptions
    model_arguments = {}
    measured = ()
    compute_loss = None  # or a method: the loss of a batch, in place of the compiled losses'

    def __init__(self, seq_len, vocab_size):
        self.seq_len, self.vocab_size = seq_len, vocab_size

    @classmethod
    def options(cls, values):
        """Its own options from `values` (`{name: value}`, those missing at their defaults), each checked by its
        field; refused naming the flag."""
        return cls.Options(**arguments.checked(cls.Options, values))

    @classmethod
    def check_run(cls, options):
        """Refuse, naming the flag, every run's options (`PretrainOptions`) this objective cannot train with: a
        check of flags alone, run before Keras is imported or a file read (`kwiden pretrain` answers at once)."""

    @classmethod
    def made_for(cls, tokenizer, family, options):
        return cls(options.seq_len, tokenizer.vocab_size)

    @classmethod
    def fingerprint(cls, options):
        return {}

    @classmethod
    def differs(cls, options, key, began, now):
        return f"{key} is not what this run began with: restore it, or give another --output-dir for a new run."

    @property
    def window(self):
        raise NotImplementedError

    def batch(self, tokens, starts, rng):
        raise NotImplementedError

    def losses(self):
        raise NotImplementedError

    def counted(self, targets):
        return int(np.size(targets))

    def measures(self, outputs, targets):
        return {}

    def notes(self, data):
        return []

    def prepared(self, model):
        """`model` (compiled) computing its loss by the objective's own `compute_loss`, where it has one."""
        if self.compute_loss is not None:
            model.compute_loss = functools.partial(self.compute_loss, model)
        return model

    # Its data; by default the token stream, its windows at random places.
    marks_words = False  # whether it reads where words start (whole-word masking)

    def read(self, corpus, tokenizer, folder, verbose):
        return tokens.tokenized(corpus, tokenizer, folder, self.marks_words, verbose)

    def split(self, data, valid_fraction):
        return split(data, self, valid_fraction)

    def training_batch(self, train, batch_size, seed, update, micro_step):
        return training_batch(self, train, batch_size, seed, update, micro_step)

    def validation_batches(self, valid, batch_size, seed):
        return validation_batches(self, valid, batch_size, seed)

    def windows(self, tokens, starts):
        """The stream's windows at `starts`, one a row."""
        return np.stack([tokens.ids[s : s + self.window] for s in starts]).astype(np.int32)


# The objectives kwiden brings: the module and class of each, by name (imported when the objectives are asked for,
# so that what is registered never depends on what was imported before).
BUILT_IN = {
    "causal_lm": ("kwiden.pretraining.objectives", "CausalLM"),
    "masked_lm": ("kwiden.pretraining.objectives", "MaskedLM"),
    "seq2seq": ("kwiden.pretraining.objectives.seq2seq", "Seq2Seq"),
    "simbert": ("kwiden.pretraining.objectives.simbert", "SimBERT"),
}
# Those `register_objective` added, by name (one named as a built-in one replaces it).
OBJECTIVES = {}


def registered():
    """Every objective by name: kwiden's (`BUILT_IN`), then those `register_objective` added."""
    built_in = {
        name: getattr(importlib.import_module(module), attribute) for name, (module, attribute) in BUILT_IN.items()
    }
    return {**built_in, **OBJECTIVES}


def register_objective(objective):
    """Add an `Objective` subclass under its `name`; returns it (a decorator). Its options (`Options`) join the
    command line: one named as another objective's option must be declared the same (one flag takes both)."""
    if not (isinstance(objective, type) and issubclass(objective, Objective) and isinstance(objective.name, str)):
        raise ValueError(f"register_objective takes an Objective subclass with a `name`, got {objective!r}.")
    if not dataclasses.is_dataclass(objective.Options):
        raise ValueError(f"{objective.__name__}.Options must be a dataclass of kwiden.arguments.option fields.")
    declared = {field.name: field for field in option_fields(without=objective.name)}
    for field in dataclasses.fields(objective.Options):
        other = declared.get(field.name)
        if other is not None and (other.default, other.metadata) != (field.default, field.metadata):
            raise ValueError(f"{objective.__name__} declares the option {field.name!r} otherwise than --objective "
                             f"{', '.join(takers(field.name))} does: give it another name.")  # fmt: skip
    OBJECTIVES[objective.name] = objective
    return objective


def option_fields(without=None):
    """The options the registered objectives (but the one named `without`) declare, each once, in the order they
    were registered."""
    found = {}
    for name, objective in registered().items():
        if name == without:
            continue
        for field in dataclasses.fields(objective.Options):
            found.setdefault(field.name, field)
    return tuple(found.values())


def takers(name):
    """The registered objectives that take the option `name`, by name."""
    return [key for key, o in sorted(registered().items()) if name in {f.name for f in dataclasses.fields(o.Options)}]


def token_loss(ignore_class=None):
    """The cross-entropy of the tokens from the model's logits (`ignore_class`: the target no loss is taken of)."""
    import keras  # here, not above: the module's declarations are read before Keras is imported

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=ignore_class)


def get_objective(name):
    known = registered()
    if name not in known:
        raise ValueError(f"--objective {name}: pretraining knows {', '.join(sorted(known))}.")
    return known[name]


class CausalLM(Objective):
    """The next token, as decoders learn (GPT, LLaMA, Qwen2, Mistral)."""

    name = "causal_lm"

    @property
    def window(self):
        return self.seq_len + 1

    def batch(self, tokens, starts, rng):
        windows = self.windows(tokens, starts)
        return windows[:, :-1], windows[:, 1:]

    def losses(self):
        return token_loss()


@dataclasses.dataclass(frozen=True)
class WholeWords:
    whole_word_mask: bool = option(False, "mask whole words (Chinese words by jieba)", "switch")


class MaskedLM(Objective):
    """Masked tokens, as encoders learn (BERT, RoFormer): 15% of the
    positions (whole words with `whole_words`), 80/10/10, the loss on those
    alone; windows between [CLS] and [SEP] where the tokenizer has them."""

    name = "masked_lm"
    Options = WholeWords
    model_arguments = {"with_mlm": True}

    def __init__(self, seq_len, vocab_size, mask, cls=None, separator=None, whole_words=False):
        super().__init__(seq_len, vocab_size)
        self.mask, self.cls, self.separator, self.whole_words = mask, cls, separator, whole_words
        self.marks_words = whole_words

    @classmethod
    def made_for(cls, tokenizer, family, options):
        if tokenizer.mask is None:
            raise ValueError(
                f"The tokenizer {tokenizer.source} has no [MASK] token, which the masked LM of {family.name} needs."
            )
        return cls(options.seq_len, tokenizer.vocab_size, tokenizer.mask, tokenizer.cls, tokenizer.separator,
                   options.whole_word_mask)  # fmt: skip

    @property
    def wrapped(self):
        return self.cls is not None and self.separator is not None

    @property
    def window(self):
        return self.seq_len - 2 if self.wrapped else self.seq_len

    def losses(self):
        """None for the encoder's sequence output; the masked LM's loss for its logits."""
        return [None, token_loss(IGNORED)]

    def counted(self, targets):
        return int(np.sum(targets[1] != IGNORED))

    def batch(self, tokens, starts, rng):
        windows = self.windows(tokens, starts)
        word_starts = None
        if self.whole_words and tokens.word_starts is not None:
            word_starts = np.stack([tokens.word_starts[s : s + self.window] for s in starts]).astype(bool)
        masked = self._masked(windows.shape, word_starts, rng)
        targets = np.where(masked, windows, IGNORED).astype(np.int32)
        draw = rng.random(windows.shape)
        random_ids = rng.integers(0, self.vocab_size, windows.shape)
        inputs = np.where(masked & (draw < REPLACED_BY_MASK), self.mask, windows)
        inputs = np.where(masked & (draw >= REPLACED_BY_MASK) & (draw < REPLACED_BY_MASK + REPLACED_BY_RANDOM),
                          random_ids, inputs)  # fmt: skip
        if self.wrapped:
            rows = len(starts)
            inputs = np.concatenate([np.full((rows, 1), self.cls), inputs, np.full((rows, 1), self.separator)], 1)
            ignored = np.full((rows, 1), IGNORED)
            targets = np.concatenate([ignored, targets, ignored], 1)
        inputs = inputs.astype(np.int32)
        return (inputs, np.zeros_like(inputs)), (None, targets.astype(np.int32))

    def _masked(self, shape, word_starts, rng):
        if word_starts is None:
            masked = rng.random(shape) < MASKED
            words = np.broadcast_to(np.arange(shape[1]), shape)  # each token its own word
        else:
            word_starts[:, 0] = True  # a window's first token starts its (part of a) word
            words = np.cumsum(word_starts, axis=1) - 1
            chosen = rng.random(shape) < MASKED  # one draw a word, read at its first token
            masked = np.take_along_axis(np.where(word_starts, chosen, False), first_of(word_starts), 1)
        # A row with nothing masked would give no loss: mask the word at one position.
        for row in np.flatnonzero(~masked.any(axis=1)):
            masked[row] = words[row] == words[row, rng.integers(0, shape[1])]
        return masked


def first_of(word_starts):
    """For each position, the position of its word's first token (of the first position for those before any)."""
    positions = np.where(word_starts, np.arange(word_starts.shape[1]), 0)
    return np.maximum.accumulate(positions, axis=1)


class Split:
    """The training or held-out part of a `TokenFile`."""

    def __init__(self, token_file, start, stop):
        self.ids = token_file.ids[start:stop]
        self.word_starts = None if token_file.word_starts is None else token_file.word_starts[start:stop]

    def __len__(self):
        return len(self.ids)


def split(token_file, objective, valid_fraction):
    """`(train, valid)`: the last `valid_fraction` of the stream held out (at
    least `LEAST_VALID_WINDOWS` windows); a corpus too short for that and a
    training window is refused."""
    total, window = len(token_file), objective.window
    if not 0 < valid_fraction < 1:
        raise ValueError(f"--valid-fraction must be between 0 and 1, got {valid_fraction}.")
    held_out = max(int(valid_fraction * total), LEAST_VALID_WINDOWS * window)
    if total - held_out < window:
        raise ValueError(
            f"The corpus holds {total:,} tokens: too few for a training window of {window} tokens (--seq-len "
            f"{objective.seq_len}) and {LEAST_VALID_WINDOWS} held out for validation ({held_out:,} tokens). "
            "Give more text, or a shorter --seq-len."
        )
    return Split(token_file, 0, total - held_out), Split(token_file, total - held_out, total)


def training_batch(objective, train, batch_size, seed, update, micro_step):
    """The batch of micro-step `micro_step` of update `update`: drawn from
    (seed, update, micro-step) alone, so a resumed run reads what it would have."""
    rng = np.random.default_rng([seed, update, micro_step])
    starts = rng.integers(0, len(train) - objective.window + 1, batch_size)
    return objective.batch(train, starts, rng)


def validation_batches(objective, valid, batch_size, seed):
    """The held-out windows (evenly spread, at most `MAX_VALID_WINDOWS`), the
    same at every evaluation, in whole batches of `batch_size` (which split
    over the devices as training batches do; a held-out part shorter than a
    batch of side-by-side windows is read in overlapping ones)."""
    count = min(len(valid) // objective.window, MAX_VALID_WINDOWS) // batch_size * batch_size
    count = max(count, batch_size)
    starts = np.linspace(0, len(valid) - objective.window, count).astype(np.int64)
    rng = np.random.default_rng([seed, 2**31])
    return [objective.batch(valid, starts[i : i + batch_size], rng) for i in range(0, count, batch_size)]
