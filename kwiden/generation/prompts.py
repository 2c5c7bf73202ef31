"""Generation from prompts: `load_generator` reads a checkpoint folder, `generate` continues texts (or writes
a UniLM's second segment), `generate_ids` token ids; the checks of both."""

import collections.abc
import dataclasses
import pathlib
import re

from kwiden.arguments import is_count
from kwiden.checkpoints import folder_config, holds_layer
from kwiden.checkpoints.generation_config import read_generation_config, trained_max_length
from kwiden.generation.arguments import ArgumentError, ArgumentWarning, GenerateOptions, checked
from kwiden.generation.beams import beam_rows
from kwiden.generation.footprint import check_memory
from kwiden.generation.rollout import Decoder, check_positions
from kwiden.generation.sampling import decode_rows
from kwiden.generation.search import Search
from kwiden.messages import warn
from kwiden.models import family_of_config, naming
from kwiden.models.builder import build_transformer_model
from kwiden.text.tokenizer import check_text
from kwiden.text.vocabulary import CorpusTokenizer, load_tokenizer

_DECODER = "_kwiden_decoder"  # the attribute that keeps a model's compiled decoder, reused across calls
_SETTINGS = "_kwiden_checkpoint_settings"  # the attribute that keeps what its folder says (CheckpointSettings)
# A space WordPiece's decoder puts beside a CJK character (Chinese is written without them).
_CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_SPACE_BY_CJK = re.compile(f"(?<=[{_CJK}]) | (?=[{_CJK}])")


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    """What a checkpoint folder says about generating from it, kept on the
    model `load_generator` builds: the ids that end a continuation (its
    `eos_token_id`, one or a list), and the most tokens, prompt and new
    ones together, its positions were trained on (`generation_config.json`'s
    `max_length`, which `kwiden pretrain` writes; None: not recorded) and
    the file that says so."""

    end_ids: tuple = ()
    max_length: int = None
    max_length_source: str = None


def load_generator(checkpoint):
    """`(model, tokenizer)` from a checkpoint folder with its tokenizer (a
    `kwiden pretrain` run's `final/`, a Hugging Face folder): a BERT or
    RoFormer is built as a UniLM with its MLM head. A decoder's continuation
    ends at every id of its `eos_token_id` (an id or a list of them, as
    transformers reads it: `generation_config.json`'s, else `config.json`'s)."""
    folder, path, config = folder_config(checkpoint)
    family = family_of_config(config)
    flags = dict(with_mlm=True, unilm=True) if "unilm" in family.flags else {}
    if flags and holds_layer(folder, naming.POOLER_DENSE, family):  # SimBERT's vector, which `similar` ranks by
        flags["with_pool"] = "linear"
    tokenizer = load_tokenizer(folder, flag="the checkpoint")
    model = build_transformer_model(checkpoint_path=folder, fresh_heads=bool(flags), **flags)
    if getattr(model, "fresh_weights", ()):  # a UniLM writes with its MLM head: one made up would write noise
        raise ValueError(
            f"{folder} holds no weights for the MLM head a UniLM writes with ({', '.join(model.fresh_weights[:2])}, "
            "…): a BERT or RoFormer saved without it cannot generate. Generate from a run trained with kwiden "
            "pretrain --objective seq2seq or simbert (its final/)."
        )
    end_ids = () if flags else _eos_ids(folder, path, config, _decoder(model).vocab_size)  # a UniLM ends at [SEP]
    length, source = trained_max_length(folder)
    settings = CheckpointSettings(end_ids, length, None if source is None else str(source))
    object.__setattr__(model, _SETTINGS, settings)  # past Keras' tracking: not a layer or weight
    return model, tokenizer


def _eos_ids(folder, path, config, vocab_size):
    """The ids `eos_token_id` names, as transformers reads it: `generation_config.json`'s where it has the
    key, else `config.json`'s (at `path`)."""
    settings, generation = read_generation_config(folder)
    if "eos_token_id" in settings:
        path, config = generation, settings
    ends = config.get("eos_token_id")
    if ends is None:
        return ()
    ids = [ends] if is_count(ends) else ends
    if not (isinstance(ids, list) and ids and all(is_count(i) and i < vocab_size for i in ids)):
        raise ValueError(f"{path}: eos_token_id {ends!r} is not a token id or a list of them below the vocabulary's "
                         f"{vocab_size}; repair it (or remove the key: then no token ends a continuation).")  # fmt: skip
    return tuple(ids)


def _settings(decoder):
    """The `CheckpointSettings` kept on `decoder`'s model, or the defaults of a model not loaded from a folder."""
    return getattr(decoder.cached.model, _SETTINGS, CheckpointSettings())


def generate_ids(model, prompts, max_new_tokens, search=None, end_ids=(), banned=(), num_samples=1, seed=None):
    """Continuations of `prompts` (lists of token ids; for a UniLM, its
    whole first segment, `[CLS] … [SEP]`): for each prompt, `num_samples`
    lists of ids, the end token that stopped one left out. `search` (a
    `Search`) samples by default; beam search gives its best `num_samples`,
    best first, and fewer, with a warning, where fewer continuations exist
    (a beam wider than the vocabulary allows in `max_new_tokens` tokens).
    Each prompt gets what it gets alone, whatever the prompts beside it.
    Refused before anything is allocated: more positions than the model's
    table holds, and more memory than is available now (the key/value
    cache of every row, the attention's scores, the logits); past the
    `max_length` a loaded folder records as trained, too."""
    search = Search() if search is None else search
    decoder = _decoder(model)
    prompts, end_ids, banned = _checked_ids(decoder, prompts, end_ids, banned)
    _check_counts(search, max_new_tokens, num_samples, seed)
    _check_room(decoder, search, prompts, max_new_tokens, num_samples)
    if search.beam is not None:
        found = beam_rows(
            decoder, prompts, max_new_tokens, search.beam, num_samples, end_ids, banned, search.repetition_penalty
        )
        _warn_fewer(found, num_samples, max_new_tokens)
        return [[ids for ids, _ in best] for best in found]
    found = decode_rows(decoder, prompts, max_new_tokens, search, end_ids, banned, seed, num_samples)
    return [found[i : i + num_samples] for i in range(0, len(found), num_samples)]


def _checked_ids(decoder, prompts, end_ids, banned):
    """`(prompts, end ids, banned ids)` as lists of ints, each id a whole number (a bool or a float is refused,
    not read as one); a model that masks id 0 as padding cannot read one it wrote: it is banned there."""
    prompts = [list(prompt) for prompt in prompts]
    if not prompts:
        raise ValueError("No prompts: give one or more.")
    for index, prompt in enumerate(prompts):
        if not prompt or not all(is_count(token) and token < decoder.vocab_size for token in prompt):
            raise ValueError(f"Prompt {index} must be 1 or more token ids below the vocabulary's {decoder.vocab_size}.")
    end_ids = _token_ids("end_ids", end_ids)
    banned = (_token_ids("banned", banned) | ({0} if decoder.cached.masks_padding else set())) - end_ids
    return [[int(token) for token in prompt] for prompt in prompts], sorted(end_ids), sorted(banned)


def _check_counts(search, max_new_tokens, num_samples, seed):
    checked(GenerateOptions, dict(max_new_tokens=max_new_tokens, num_samples=num_samples, seed=seed))
    if search.beam is not None and num_samples > search.beam:
        raise ArgumentError(
            "{num_samples}={value}: {beam}={beam_width} keeps {beam_width} continuations at most.",
            value=num_samples, beam_width=search.beam,
        )  # fmt: skip


def _check_room(decoder, search, prompts, max_new_tokens, num_samples):
    """Refuse, before anything is allocated, what the positions, the trained length or the memory cannot hold."""
    check_positions(decoder, max(len(prompt) for prompt in prompts), max_new_tokens)
    _check_trained_length(_settings(decoder), prompts, max_new_tokens)
    if search.beam is None:
        check_memory(decoder, prompts, max_new_tokens, num_samples, "num_samples")
    else:
        check_memory(decoder, prompts, max_new_tokens, search.beam, "beam")


def _token_ids(name, ids):
    """The set of ids `ids` holds, each a whole number (a bool or a float is refused, not read as one)."""
    for token in ids:
        if not is_count(token):
            raise ArgumentError("{" + name + "}={token!r}: a token id is a whole number ≥ 0, not a {kind}.",
                                token=token, kind=type(token).__name__)  # fmt: skip
    return {int(token) for token in ids}


def _check_trained_length(settings, prompts, max_new_tokens):
    """Refuse a prompt whose continuation would run past the positions its checkpoint was trained on."""
    if settings.max_length is None:
        return
    for index, prompt in enumerate(prompts):
        most = settings.max_length - len(prompt)
        if max_new_tokens > most:
            advice = "give {max_new_tokens}={most} or fewer" if most >= 1 else "shorten the prompt to {shorter} tokens"
            raise ArgumentError(
                "Prompt {index} has {length} tokens: with {max_new_tokens}={value} that makes {total}, past the "
                "{trained} the model was trained on ({source}'s max_length): " + advice + ".",
                index=index, length=len(prompt), value=max_new_tokens, total=len(prompt) + max_new_tokens,
                trained=settings.max_length, source=settings.max_length_source, most=most,
                shorter=settings.max_length - 1,
            )  # fmt: skip


def most_new_tokens(model, prompt_length):
    """The most tokens a prompt of `prompt_length` may be given: within
    the model's position table and the length its checkpoint was trained on;
    None where neither bounds it."""
    decoder = _decoder(model)
    trained = _settings(decoder).max_length
    bounds = [decoder.most_new_tokens(prompt_length), None if trained is None else trained - prompt_length]
    return min((bound for bound in bounds if bound is not None), default=None)


def _warn_fewer(found, num_samples, max_new_tokens):
    """Say which prompts' beam search found fewer than `num_samples` continuations: no more exist."""
    for index, best in enumerate(found):
        if len(best) < num_samples:
            warn(ArgumentWarning(
                "Beam search found {count} continuations of prompt {index}, not {num_samples}={wanted}: no more "
                "exist within {max_new_tokens}={length} tokens (banned tokens are never generated).",
                count=len(best), index=index, wanted=num_samples, length=max_new_tokens,
            ))  # fmt: skip


def _decoder(model):
    """`model`'s compiled decoder, kept on the model (so it goes when the model goes)."""
    if isinstance(model, Decoder):
        return model
    decoder = getattr(model, _DECODER, None)
    if decoder is None:
        decoder = Decoder(model)
        object.__setattr__(model, _DECODER, decoder)  # past Keras' attribute tracking: not a layer or weight
    return decoder


def generate(
    model,
    tokenizer,
    prompts,
    max_new_tokens=32,
    greedy=False,
    beam=None,
    top_k=None,
    top_p=1.0,
    temperature=1.0,
    repetition_penalty=1.0,
    num_samples=1,
    seed=None,
    end_tokens=None,
):
    """Generate text from a kwiden model.

    A decoder continues each prompt; a UniLM (BERT or RoFormer built with
    `unilm=True, with_mlm=True`) reads each prompt as its first segment and
    writes the second, as SimBERT writes a similar sentence.

    Args:
        model: a built model, or a checkpoint folder with its tokenizer
            (then `tokenizer` may be None).
        tokenizer: what encodes the prompts: a `vocab.txt`, a
            `tokenizer.json`, a folder holding one, `"bytes"`, or a
            tokenizer `kwiden.pretraining` loaded.
        prompts: a text, or a list of texts.
        max_new_tokens: tokens generated at most a continuation; refused,
            before anything is allocated, past the model's positions, past
            the `max_length` its folder records as trained (a prompt and its
            new tokens together), or past the memory available now.
        greedy: the likeliest token each step.
        beam: a beam search of this many continuations (1 is greedy).
        top_k, top_p, temperature: sampling (the default): the
            distribution at `temperature`, cut to the `top_k` likeliest
            tokens and to the smallest set with probability `top_p`.
        repetition_penalty: with any search, each token already in the
            prompt or the continuation made less likely: its logit divided
            by this where positive, multiplied where negative (a beam
            search's log-probability multiplied), as transformers does; a
            prompt's end tokens (a UniLM's [SEP]) are not penalised, so a
            continuation still ends. 1: no penalty.
        num_samples: continuations a prompt (sampled, or beam search's
            best: fewer, with a warning, where fewer exist).
        seed: a whole number ≥ 0 that makes sampling repeat: a prompt's
            samples depend on the seed, the prompt and the sample's number
            only, the same alone or beside any other prompts.
        end_tokens: tokens that end a continuation: ids, tokens' texts,
            or texts the tokenizer reads as one token ("\\n"); by default
            the checkpoint's `eos_token_id`s (a decoder's folder), else the
            tokenizer's separator (`[SEP]`, `</s>`, `<|endoftext|>`), none
            for bytes.

    Returns:
        For one prompt, a list of `num_samples` texts; for a list, one
        such list a prompt.

    Example:

    >>> import kwiden
    >>> gpt = kwiden.build_transformer_model(dict(vocab_size=258, hidden_size=16, num_hidden_layers=1,
    ...     num_attention_heads=2), model="gpt")
    >>> texts = kwiden.generate(gpt, "bytes", "Hello", max_new_tokens=4, num_samples=2, seed=0)
    >>> len(texts)
    2
    """
    if isinstance(model, (str, pathlib.Path)):
        model, found = load_generator(model)
        tokenizer = found if tokenizer is None else tokenizer
    tokenizer = (
        tokenizer
        if isinstance(tokenizer, CorpusTokenizer)
        else load_tokenizer(str(tokenizer), "tokenizer", remedy=", or 'bytes'")
    )
    search = _checked_search(greedy, beam, top_k, top_p, temperature, repetition_penalty, num_samples)
    single = isinstance(prompts, str)
    texts = [prompts] if single else list(prompts)
    decoder = _decoder(model)
    if tokenizer.vocab_size > decoder.vocab_size:
        raise ValueError(f"The tokenizer ({tokenizer.source}) has {tokenizer.vocab_size} tokens, the model's "
                         f"logits {decoder.vocab_size}: give the tokenizer the model was trained with.")  # fmt: skip
    end_ids = _end_ids(tokenizer, end_tokens, _settings(decoder))
    encoded = [_encoded(tokenizer, text, decoder.segments, index, end_ids) for index, text in enumerate(texts)]
    banned = [i for i in (tokenizer.pad, tokenizer.mask, tokenizer.cls) if i is not None]
    found = generate_ids(decoder, encoded, max_new_tokens, search, end_ids, banned, num_samples, seed)
    prompts_ids = [[] if decoder.segments else ids for ids in encoded]  # a decoder's text goes on from its prompt's
    decoded = [[_decoded(tokenizer, ids, prompt) for ids in samples] for prompt, samples in zip(prompts_ids, found)]
    return decoded[0] if single else decoded


def _checked_search(greedy, beam, top_k, top_p, temperature, repetition_penalty, num_samples):
    # Search checks its own values, and generate_ids num_samples against a beam.
    search = Search(bool(greedy), beam, top_k, top_p, temperature, repetition_penalty)
    if greedy and num_samples != 1:
        raise ArgumentError("{greedy} gives one continuation a prompt, not {num_samples}={value}.", value=num_samples)
    return search


def _encoded(tokenizer, text, segments, index, end_ids):
    check_text(text, f"Prompt {index}")  # a string, valid Unicode (a command line's bytes may be neither)
    if not segments and tokenizer.kind == "json":  # a Hugging Face decoder's tokenizer adds its <s> (LLaMA's)
        ids = tokenizer.tokenizer.encode(text, add_special_tokens=True).ids
        ids = ids[:-1] if ids and ids[-1] in end_ids else ids  # an end it adds ends nothing yet
    else:
        ids = tokenizer.encode_lines([text])[0][0].tolist()
    if segments:
        if tokenizer.cls is None or tokenizer.separator is None:
            raise ValueError(f"A UniLM's prompt is [CLS] text [SEP]; the tokenizer {tokenizer.source} lacks them.")
        return [tokenizer.cls, *ids, tokenizer.separator]
    if not ids:
        raise ValueError(f"Prompt {index} ({text!r}) has no tokens: a decoder needs something to continue.")
    return ids


def _end_ids(tokenizer, end_tokens, settings):
    """The ids `end_tokens` names; by default the checkpoint's `eos_token_id`s, else the tokenizer's separator."""
    if end_tokens is None:
        return list(settings.end_ids) or ([] if tokenizer.separator is None else [tokenizer.separator])
    several = isinstance(end_tokens, collections.abc.Iterable) and not isinstance(end_tokens, (str, bytes))
    return [_end_id(tokenizer, token) for token in (end_tokens if several else [end_tokens])]


def _end_id(tokenizer, token):
    """The id of an end token given as an id, a token's text, or a text the tokenizer reads as one token
    that reads back as that text (a byte tokenizer's newline, "\\n", is the token 'Ċ'; "[NOPE]" is none)."""
    if not (is_count(token) or isinstance(token, str)):
        raise ArgumentError("{end_tokens}={token!r}: an end token is a text or an id, not a {kind}.", token=token,
                            kind=type(token).__name__)  # fmt: skip
    if is_count(token):
        found, read = token, None
    else:
        found, read = tokenizer.tokenizer.token_to_id(token), tokenizer.encode_lines([token])[0][0].tolist()
        if found is None and len(read) == 1 and tokenizer.tokenizer.decode(read) == token:
            found = read[0]
    if found is None or not 0 <= found < tokenizer.vocab_size:
        reads = "" if read is None else f" (it reads it as {len(read)} tokens; an end token is one)"
        raise ArgumentError("{end_tokens}={token!r}: not a token of the tokenizer ({source}){reads}, nor an id below "
                            "its {size}.", token=token, source=tokenizer.source, reads=reads,
                            size=tokenizer.vocab_size)  # fmt: skip
    return int(found)


def _decoded(tokenizer, ids, prompt=()):
    """The text of `ids`, as it goes on from `prompt`'s (a space between them kept); WordPiece's spaces
    beside CJK characters taken out."""
    text = _text(tokenizer, [*prompt, *ids])
    before = _text(tokenizer, list(prompt))
    return text[len(before) :] if text.startswith(before) else _text(tokenizer, ids)


def _text(tokenizer, ids):
    text = tokenizer.tokenizer.decode(ids, skip_special_tokens=True)
    wordpiece = type(tokenizer.tokenizer.model).__name__ == "WordPiece"
    return _SPACE_BY_CJK.sub("", text) if wordpiece else text
