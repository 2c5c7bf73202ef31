"""Greedy and sampled decoding in one compiled loop on the device: each
step chooses every row's token (`choose`, after the repetition penalty:
`penalised`), writes it into the key/value
cache and runs the model on it, with the cache as the loop's state, until
every row has ended or the tokens run out; the host sees the result alone.
The uniform draws a sample takes come from the host, one stream a row, so
a seed gives a prompt the same tokens whatever the prompts beside it."""

import functools

import numpy as np
from keras import ops

from kwiden.generation.cache import compiled
from kwiden.generation.rollout import Rollout
from kwiden.memory import accelerated

# From this width a one-row loop runs on a CPU without XLA (TensorFlow; `compiled_with_xla`).
XLA_LEAST_WIDTH = 512


def choose(logits, draws, greedy=False, temperature=1.0, top_k=None, top_p=None):
    """One token a row of float32 `logits` `(rows, vocabulary)` (banned
    tokens already at -inf): the likeliest if `greedy`, else one sampled from
    the distribution at `temperature`, cut to its `top_k` likeliest tokens
    and to the smallest set of the likeliest holding `top_p` of the
    probability (tokens as likely as the least likely kept stay too), by
    inverting its cumulative sum at each row's uniform `draws` in [0, 1).
    `temperature` and `top_p` may be tensors (one compiled loop serves every
    value); `top_k` and whether `top_p` cuts (None: not) shape the program."""
    if greedy:
        return ops.argmax(logits, axis=-1)
    vocabulary = logits.shape[-1]
    logits = logits / temperature
    if top_k is not None and top_k < vocabulary:
        kth = ops.top_k(logits, top_k)[0][:, -1:]
        logits = ops.where(logits < kth, -np.inf, logits)
    probabilities = ops.softmax(logits, axis=-1)
    if top_p is not None:
        ranked = ops.flip(ops.sort(probabilities, axis=-1), axis=-1)
        kept = ops.sum(ops.cast(ops.cumsum(ranked, axis=-1) - ranked < top_p, "int32"), axis=-1)
        least = ops.take_along_axis(ranked, ops.maximum(kept, 1)[:, None] - 1, axis=-1)  # the likeliest stays
        probabilities = ops.where(probabilities < least, 0.0, probabilities)
    cumulative = ops.cumsum(probabilities, axis=-1)
    below = ops.cast(cumulative <= draws[:, None] * cumulative[:, -1:], "int32")
    return ops.minimum(ops.sum(below, axis=-1), vocabulary - 1)


def penalised(logits, present, penalty):
    """`logits` with each token `present` (True in a `(rows, vocabulary)` mask) made less likely by `penalty`
    (CTRL's repetition penalty, as transformers applies it): divided by it where positive, multiplied where
    negative. `penalty` may be a tensor."""
    return ops.where(present, ops.where(logits > 0, logits / penalty, logits * penalty), logits)


def presence(decoder, prompts, repeats, end_ids):
    """Which tokens each row's prompt holds, `(rows, vocabulary)` (each prompt's `repeats` in a row), its end
    tokens left out: a penalty on repeating must not keep a continuation from ending (a UniLM's prompt ends
    with the [SEP] that ends its continuation too)."""
    present = np.zeros((len(prompts), decoder.vocab_size), bool)
    for row, prompt in enumerate(prompts):
        present[row, prompt] = True
    present[:, list(end_ids)] = False
    return np.repeat(present, repeats, axis=0)


def with_token(present, tokens):
    """`present` with each row's token of `tokens` added."""
    return ops.logical_or(present, ops.arange(present.shape[-1])[None, :] == tokens[:, None])


def row_draws(seed, prompts, repeats, steps):
    """`steps` uniform draws for each row (each prompt's `repeats` in a row),
    from a stream seeded by `seed`, the row's prompt and its sample's number,
    and nothing else: a prompt draws the same alone as beside any other
    prompts (the same prompt twice, the same draws twice). `seed` None:
    fresh entropy."""
    root = np.random.SeedSequence(seed).entropy
    streams = (np.random.default_rng([root, sample, len(prompt), *prompt]) for prompt in prompts for sample in
               range(repeats))  # fmt: skip
    return np.array([stream.random(steps) for stream in streams], np.float32).reshape(-1, steps)


def decode_rows(decoder, prompts, max_new_tokens, search, end_ids, banned, seed=None, repeats=1):
    """Greedy or sampled continuations, `repeats` a prompt, in order: each a
    list of ids, without the end token that stopped it. Row `r`'s step `s`
    samples with draw `s` of its stream (`row_draws`), so its tokens depend
    on its prompt, sample number and `seed` alone."""
    rollout = Rollout(decoder, prompts, max_new_tokens, repeats)
    logits = rollout.start()
    rows = len(logits)
    draws = row_draws(seed, prompts, repeats, max_new_tokens) if search.samples else np.zeros((rows, max_new_tokens))
    barred, ending = token_masks(decoder, banned, end_ids)
    cut, penalises = search.samples and search.top_p < 1.0, search.repetition_penalty != 1.0
    present = presence(decoder, prompts, repeats, end_ids) if penalises else np.zeros((rows, 1), bool)
    kind = (not search.samples, search.top_k if search.samples else None, cut, penalises)
    loop = _loop(decoder, kind, compiled_with_xla(decoder, rows))
    generated, ends = loop(
        logits.astype(np.float32), rollout.seen, rollout.offsets.astype(np.int32), rollout.cache,
        draws.astype(np.float32), barred, ending, present, np.float32(search.temperature),
        np.float32(search.top_p), np.float32(search.repetition_penalty),
    )  # fmt: skip
    generated, ends = ops.convert_to_numpy(generated), ops.convert_to_numpy(ends)
    return [generated[row, : ends[row]].tolist() for row in range(rows)]


def token_masks(decoder, banned, end_ids):
    """`(barred, ending)` over `decoder`'s vocabulary: -inf at each banned id (0 elsewhere), True at each end id."""
    vocabulary = np.arange(decoder.vocab_size)
    return np.where(np.isin(vocabulary, banned), -np.inf, 0.0).astype(np.float32), np.isin(vocabulary, end_ids)


def fed(decoder, tokens, slot, seen, offsets, cache):
    """One token a row written at `slot` and run through the model: the float32 logits of the token after it,
    the cache and the seen slots, updated."""
    # A model that masks id 0 as padding never sees one as a key (generate_ids bans it there).
    visible = tokens != 0 if decoder.cached.masks_padding else ops.ones_like(tokens, "bool")
    seen = ops.slice_update(seen, (0, slot), visible[:, None])
    logits, cache = decoder.cached(
        tokens[:, None], ops.ones_like(tokens[:, None]), (slot - offsets)[:, None], seen[:, None, :], cache, slot
    )
    return ops.cast(logits[:, -1], "float32"), cache, seen


def compiled_with_xla(decoder, rows):
    """Whether TensorFlow compiles a search loop with XLA: always but for one row of a model `XLA_LEAST_WIDTH` wide
    or more on a CPU, whose matrix-vector products run faster in TensorFlow's own kernels (benchmarks/generation.py
    on 2 cores: 1.25x at 512 x 4, one row; XLA 1.7-14x faster with 8 rows or below 512 wide)."""
    width = max((layer.heads * layer.head_size for layer in decoder.cached.attentions), default=0)
    return not (rows == 1 and width >= XLA_LEAST_WIDTH) or accelerated()


def _loop(decoder, kind, xla):
    """The compiled loop of `decoder` for this `kind` of search (`choose`'s `greedy`, `top_k`, whether `top_p`
    cuts, whether a repetition penalty applies) and compiler; kept on it, one a kind, whatever the temperature,
    top-p, penalty, end and banned ids."""
    key = (*kind, xla)
    if key not in decoder.loops:
        decoder.loops[key] = compiled(functools.partial(_steps, decoder, kind), decoder.cached.model, xla)
    return decoder.loops[key]


def _steps(decoder, kind, logits, seen, offsets, cache, draws, barred, ending, present, temperature, top_p, penalty):
    """The tokens chosen `(rows, steps)` after the prompt whose next-token `logits`, cache and slots `seen`
    are given, and each row's count before its end token (`steps` where none came). `barred` is -inf at each
    banned token (0 elsewhere), `ending` True at each end token, `present` True at each token of a row's prompt
    (penalised by `penalty` where `kind` says so)."""
    greedy, top_k, cut, penalises = kind
    rows, steps = draws.shape
    prompt_length = seen.shape[1] - steps

    def chosen(step, logits, present, done, ends, generated):
        """Choose each row's token at `step` (0 for a row done); record it and which rows it ends."""
        draw = ops.take(draws, step, axis=1)
        logits = ops.cast(logits, "float32")
        logits = penalised(logits, present, penalty) if penalises else logits
        tokens = choose(logits + barred, draw, greedy, temperature, top_k, top_p if cut else None)
        tokens = ops.cast(tokens, "int32")
        tokens = ops.where(done, 0, tokens)
        stopped = ops.logical_and(ops.logical_not(done), ops.take(ending, tokens))
        ends = ops.where(stopped, step, ends)
        generated = ops.slice_update(generated, (0, step), tokens[:, None])
        return tokens, ops.logical_or(done, stopped), ends, generated

    def going(step, logits, cache, seen, present, done, ends, generated):
        return ops.logical_and(step < steps - 1, ops.logical_not(ops.all(done)))

    def advance(step, logits, cache, seen, present, done, ends, generated):
        tokens, done, ends, generated = chosen(step, logits, present, done, ends, generated)
        present = with_token(present, tokens) if penalises else present
        logits, cache, seen = fed(decoder, tokens, prompt_length + step, seen, offsets, cache)
        return step + 1, logits, cache, seen, present, done, ends, generated

    state = (
        ops.convert_to_tensor(0, "int32"), logits, cache, ops.cast(seen, "bool"), ops.cast(present, "bool"),
        ops.zeros((rows,), "bool"), ops.full((rows,), steps, "int32"), ops.zeros((rows, steps), "int32"),
    )  # fmt: skip
    step, logits, _, _, present, done, ends, generated = ops.while_loop(going, advance, state)
    # The last token is chosen, never fed.
    _, _, ends, generated = chosen(step, logits, present, done, ends, generated)
    return generated, ends
