"""Text generation for every family kwiden builds: decoders (GPT, LLaMA,
Mistral, Qwen2) continue a prompt; a UniLM (a BERT or RoFormer trained with
`--objective seq2seq` or `simbert`) is given the first segment and writes
the second. Prompts and samples decode together in one batch, with a
key/value cache (`kwiden.decoding`)."""

import numbers
import pathlib
import re
import weakref

import numpy as np

from kwiden.builder import build_transformer_model
from kwiden.checkpoints import config_beside
from kwiden.files import read_json
from kwiden.generation.rollout import Decoder
from kwiden.generation.search import Search, beam_rows, decode_rows
from kwiden.models import family_of_config
from kwiden.pretraining.vocabulary import CorpusTokenizer, load_tokenizer

__all__ = ["Search", "generate", "generate_ids", "load_generator"]

_DECODERS = weakref.WeakKeyDictionary()  # a model's compiled decoder, reused across calls
# A space WordPiece's decoder puts beside a CJK character (Chinese is written without them).
_CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_SPACE_BY_CJK = re.compile(f"(?<=[{_CJK}]) | (?=[{_CJK}])")


def load_generator(checkpoint):
    """`(model, tokenizer)` from a checkpoint folder with its tokenizer (a
    `kwiden pretrain` run's `final/`, a Hugging Face folder): a BERT or
    RoFormer is built as a UniLM with its MLM head."""
    folder = pathlib.Path(checkpoint)
    if not folder.is_dir():
        raise ValueError(f"{checkpoint} is not a checkpoint folder (one with config.json, weights and a tokenizer).")
    path = config_beside(folder)
    family = family_of_config(read_json(path, f"{path} is not JSON", "repair it"))
    flags = dict(with_mlm=True, unilm=True) if "unilm" in family.flags else {}
    tokenizer = load_tokenizer(folder, flag="the checkpoint")
    return build_transformer_model(checkpoint_path=folder, **flags), tokenizer


def generate_ids(model, prompts, max_new_tokens, search=None, end_ids=(), banned=(), num_samples=1, seed=None):
    """Continuations of `prompts` (lists of token ids; for a UniLM, its
    whole first segment, `[CLS] … [SEP]`): for each prompt, `num_samples`
    lists of ids, the end token that stopped one left out. `search` (a
    `Search`) samples by default; beam search gives its best `num_samples`,
    best first."""
    search = Search() if search is None else search
    decoder = _decoder(model)
    prompts = [[int(token) for token in prompt] for prompt in prompts]
    for index, prompt in enumerate(prompts):
        if not prompt or not all(0 <= token < decoder.vocab_size for token in prompt):
            raise ValueError(f"Prompt {index} must be 1 or more token ids below the vocabulary's {decoder.vocab_size}.")
    end_ids, banned = sorted({int(i) for i in end_ids}), sorted({int(i) for i in banned} - {int(i) for i in end_ids})
    if search.beam is not None:
        found = beam_rows(decoder, prompts, max_new_tokens, search.beam, num_samples, end_ids, banned)
        return [[ids for ids, _ in best] for best in found]
    rows = [prompt for prompt in prompts for _ in range(num_samples)]
    found = decode_rows(decoder, rows, max_new_tokens, search, end_ids, banned, np.random.default_rng(seed))
    return [found[i : i + num_samples] for i in range(0, len(found), num_samples)]


def _decoder(model):
    if isinstance(model, Decoder):
        return model
    if model not in _DECODERS:
        _DECODERS[model] = Decoder(model)
    return _DECODERS[model]


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
        max_new_tokens: tokens generated at most a continuation.
        greedy: the likeliest token each step.
        beam: a beam search of this many continuations (1 is greedy).
        top_k, top_p, temperature: sampling (the default): the
            distribution at `temperature`, cut to the `top_k` likeliest
            tokens and to the smallest set with probability `top_p`.
        num_samples: continuations a prompt (sampled, or beam search's best).
        seed: makes sampling repeat.
        end_tokens: tokens (texts or ids) that end a continuation; by
            default the tokenizer's separator (`[SEP]`, `</s>`,
            `<|endoftext|>`), none for bytes.

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
    tokenizer = tokenizer if isinstance(tokenizer, CorpusTokenizer) else load_tokenizer(str(tokenizer), "tokenizer")
    search = _checked_search(greedy, beam, top_k, top_p, temperature, num_samples, max_new_tokens)
    single = isinstance(prompts, str)
    texts = [prompts] if single else list(prompts)
    decoder = _decoder(model)
    encoded = [_encoded(tokenizer, text, decoder.segments, index) for index, text in enumerate(texts)]
    end_ids = _end_ids(tokenizer, end_tokens, decoder.segments)
    banned = [i for i in (tokenizer.pad, tokenizer.mask, tokenizer.cls) if i is not None]
    found = generate_ids(decoder, encoded, max_new_tokens, search, end_ids, banned, num_samples, seed)
    decoded = [[_decoded(tokenizer, ids) for ids in samples] for samples in found]
    return decoded[0] if single else decoded


def _checked_search(greedy, beam, top_k, top_p, temperature, num_samples, max_new_tokens):
    _whole("max_new_tokens", max_new_tokens)
    _whole("num_samples", num_samples)
    sampling = top_k is not None or top_p != 1.0 or temperature != 1.0
    if greedy and beam is not None or (greedy or beam is not None) and sampling:
        raise ValueError("Choose one of greedy=True, beam=K, or sampling (top_k, top_p, temperature).")
    if beam is not None:
        _whole("beam", beam)
        if num_samples > beam:
            raise ValueError(f"num_samples={num_samples}: a beam of {beam} keeps {beam} continuations at most.")
    if greedy and num_samples > 1:
        raise ValueError(f"greedy=True gives one continuation a prompt, not num_samples={num_samples}.")
    if top_k is not None:
        _whole("top_k", top_k)
    if not (isinstance(top_p, numbers.Real) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}.")
    if not (isinstance(temperature, numbers.Real) and 0 < temperature < float("inf")):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}.")
    return Search(bool(greedy), beam, top_k, float(top_p), float(temperature))


def _whole(name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a whole number ≥ 1, got {value!r}.")


def _encoded(tokenizer, text, segments, index):
    if not isinstance(text, str):
        raise ValueError(f"Prompt {index} is a {type(text).__name__}; prompts are texts.")
    ids = tokenizer.encode_lines([text])[0][0].tolist()
    if segments:
        if tokenizer.cls is None or tokenizer.separator is None:
            raise ValueError(f"A UniLM's prompt is [CLS] text [SEP]; the tokenizer {tokenizer.source} lacks them.")
        return [tokenizer.cls, *ids, tokenizer.separator]
    if not ids:
        raise ValueError(f"Prompt {index} ({text!r}) has no tokens: a decoder needs something to continue.")
    return ids


def _end_ids(tokenizer, end_tokens, segments):
    if end_tokens is None:
        return [] if tokenizer.separator is None else [tokenizer.separator]
    ids = []
    for token in [end_tokens] if isinstance(end_tokens, (str, int)) else end_tokens:
        found = token if isinstance(token, int) else tokenizer.tokenizer.token_to_id(token)
        if found is None or not 0 <= found < tokenizer.vocab_size:
            raise ValueError(f"End token {token!r} is not in the tokenizer's vocabulary ({tokenizer.source}).")
        ids.append(found)
    return ids


def _decoded(tokenizer, ids):
    text = tokenizer.tokenizer.decode(ids, skip_special_tokens=True)
    return _SPACE_BY_CJK.sub("", text) if tokenizer.kind == "wordpiece" else text
