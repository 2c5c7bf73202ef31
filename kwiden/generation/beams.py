"""Beam search in one compiled loop on the device, the key/value cache its
state: each step ranks every beam's continuations, moves the ones that end
into their prompt's finished set and reorders the cache to the survivors,
until every prompt has `beam` finished or the tokens run out. The host sees
the finished sets alone. Its rules are transformers' `early_stopping=True`
and `length_penalty=1.0`."""

import functools

import numpy as np
from keras import ops

from kwiden.generation.cache import compiled
from kwiden.generation.rollout import Rollout
from kwiden.generation.sampling import compiled_with_xla, fed, penalised, presence, token_masks, with_token

# Beam search ranks finished continuations by their log-probability over their length, as transformers'
# `length_penalty=1.0`.
LENGTH_PENALTY = 1.0


def beam_rows(decoder, prompts, max_new_tokens, beam, keep, end_ids, banned, repetition_penalty=1.0):
    """The `keep` best of `beam` continuations of each prompt, best first,
    as `(ids, score)`: finished ones leave the beam as they end, and a
    prompt is done once `beam` have (transformers' `early_stopping=True`):
    from then on it takes no candidate, and its beams still going are never
    ranked, so each prompt's result is the one it has alone, whatever the
    prompts beside it. Fewer than `keep` where fewer continuations exist.
    A `repetition_penalty` applies to the log-probabilities of the tokens a
    beam holds (`sampling.penalised`), as transformers' beam search does."""
    rollout = Rollout(decoder, prompts, max_new_tokens, repeats=beam)
    logits = rollout.start()
    barred, ending = token_masks(decoder, banned, end_ids)
    xla, penalises = compiled_with_xla(decoder, len(logits)), repetition_penalty != 1.0
    present = presence(decoder, prompts, beam, end_ids) if penalises else np.zeros((len(logits), 1), bool)
    key = ("beam", beam, penalises, xla)
    if key not in decoder.loops:
        steps = functools.partial(_steps, decoder, beam, penalises)
        decoder.loops[key] = compiled(steps, decoder.cached.model, xla)
    lengths, ids, scores = decoder.loops[key](
        logits.astype(np.float32), rollout.seen, rollout.offsets.astype(np.int32), rollout.cache, barred,
        ending, present, np.float32(repetition_penalty), np.zeros((len(logits), max_new_tokens), np.int32),
    )  # fmt: skip
    lengths, ids, scores = (ops.convert_to_numpy(x) for x in (lengths, ids, scores))
    found = [[(ids[p, b, : lengths[p, b]].tolist(), float(scores[p, b])) for b in range(beam) if lengths[p, b] >= 0]
             for p in range(len(prompts))]  # fmt: skip
    return [sorted(done, key=lambda pair: -pair[1])[:keep] for done in found]


def _finish(finished, taking, ids, length, score):
    """Each prompt's finished set `(ids, lengths, scores)` `(prompts, beam, …)` with a continuation `ids` of
    `length` and `score` added where `taking`: in place of the worst (an empty slot first, the first of equals)
    if better; a continuation already there (ended by another end token) keeps its better score."""
    kept_ids, lengths, scores = finished
    beam = scores.shape[1]
    same = ops.logical_and(lengths == length, ops.all(kept_ids == ids[:, None, :], axis=-1))
    again = ops.logical_and(same, taking[:, None])
    scores = ops.where(again, ops.maximum(scores, score[:, None]), scores)
    worst = ops.min(scores, axis=-1, keepdims=True)
    slots = ops.arange(beam)[None, :]
    slot = ops.min(ops.where(scores == worst, slots, beam), axis=-1, keepdims=True)
    new = ops.logical_and(taking, ops.logical_not(ops.any(same, axis=-1)))
    placed = ops.logical_and(slots == slot, ops.logical_and(new, score > worst[:, 0])[:, None])
    return (
        ops.where(placed[..., None], ids[:, None, :], kept_ids),
        ops.where(placed, length, lengths),
        ops.where(placed, score[:, None], scores),
    )


def _ranked(values, indices, beam, vocabulary, ending, done):
    """Each prompt's `beam` best continuing candidates among its `2·beam` best `(values, indices)`, as rows,
    tokens and scores `(prompts, beam)`; a done prompt, or one short of continuing candidates, fills in at
    -inf from its first row."""
    prompts, candidates = values.shape
    continuing = ops.logical_not(ops.take(ending, indices % vocabulary))
    ranks = ops.arange(candidates)[None, :]
    order = ops.argsort(ops.where(continuing, ranks, candidates + ranks), axis=-1)[:, :beam]  # continuing first
    found = ops.logical_and(ops.take_along_axis(continuing, order, axis=-1), ops.logical_not(done)[:, None])
    index = ops.take_along_axis(indices, order, axis=-1)
    first_row = (ops.arange(prompts) * beam)[:, None]
    return (
        ops.where(found, first_row + index // vocabulary, first_row),
        ops.where(found, index % vocabulary, 0),
        ops.where(found, ops.take_along_axis(values, order, axis=-1), -np.inf),
    )


def _steps(decoder, beam, penalises, logits, seen, offsets, cache, barred, ending, present, penalty, history):
    """Each prompt's finished set `(lengths, ids, scores)` `(prompts, beam, …)`, a length -1 where a slot is
    empty, after the prompts whose next-token `logits`, cache and slots `seen` are given (`beam` rows each);
    the tokens `present` in a row penalised by `penalty` where `penalises`."""
    rows, steps = history.shape
    prompts, prompt_length, vocabulary = rows // beam, seen.shape[1] - steps, logits.shape[-1]
    empty = (ops.zeros((prompts, beam, steps), "int32"), ops.full((prompts, beam), -1, "int32"),
             ops.full((prompts, beam), -np.inf, "float32"))  # fmt: skip
    starts = ops.convert_to_tensor(np.tile(np.float32([0.0] + [-np.inf] * (beam - 1)), prompts))

    def going(step, logits, cache, seen, offsets, present, scores, history, finished, all_done):
        return ops.logical_and(step < steps, ops.logical_not(all_done))

    def advance(step, logits, cache, seen, offsets, present, scores, history, finished, all_done):
        log_probabilities = ops.log_softmax(ops.cast(logits, "float32") + barred, axis=-1)
        if penalises:
            log_probabilities = penalised(log_probabilities, present, penalty)
        totals = log_probabilities + scores[:, None]
        values, indices = ops.top_k(ops.reshape(totals, (prompts, beam * vocabulary)), min(2 * beam, beam * vocabulary))
        done = ops.sum(ops.cast(finished[1] >= 0, "int32"), axis=-1) >= beam
        ended = ops.logical_and(ops.take(ending, indices % vocabulary), ops.isfinite(values))

        def enter(rank, finished):  # in rank order: a better ending enters first
            row = (ops.arange(prompts) * beam) + ops.take(indices, rank, axis=1) // vocabulary
            taking = ops.logical_and(ops.take(ended, rank, axis=1), ops.logical_not(done))
            score = ops.take(values, rank, axis=1) / ops.cast(step + 1, "float32") ** LENGTH_PENALTY
            return _finish(finished, taking, ops.take(history, row, axis=0), step, score)

        finished = ops.fori_loop(0, beam, enter, finished)
        all_done = ops.all(ops.sum(ops.cast(finished[1] >= 0, "int32"), axis=-1) >= beam)
        chosen, tokens, scores = (ops.reshape(x, (rows,)) for x in _ranked(values, indices, beam, vocabulary,
                                                                           ending, done))  # fmt: skip
        tokens = ops.cast(tokens, "int32")
        history = ops.slice_update(ops.take(history, chosen, axis=0), (0, step), tokens[:, None])
        cache = [tuple(ops.take(part, chosen, axis=0) for part in pair) for pair in cache]
        seen, offsets = ops.take(seen, chosen, axis=0), ops.take(offsets, chosen, axis=0)
        present = with_token(ops.take(present, chosen, axis=0), tokens) if penalises else present
        # The last step's call is never read.
        logits, cache, seen = fed(decoder, tokens, prompt_length + step, seen, offsets, cache)
        return step + 1, logits, cache, seen, offsets, present, scores, history, finished, all_done

    state = (ops.convert_to_tensor(0, "int32"), logits, cache, ops.cast(seen, "bool"), offsets,
             ops.cast(present, "bool"), starts, history, empty, ops.convert_to_tensor(False))  # fmt: skip
    _, _, _, _, _, _, scores, history, finished, all_done = ops.while_loop(going, advance, state)
    scores, history = ops.reshape(scores, (prompts, beam)), ops.reshape(history, (prompts, beam, steps))

    def rank(b, finished):  # the beams still going when the tokens ran out, each prompt's in row order
        score = ops.take(scores, b, axis=1)
        ids = ops.take(history, b, axis=1)
        return _finish(finished, ops.isfinite(score), ids, steps, score / float(steps) ** LENGTH_PENALTY)

    ranked = ops.fori_loop(0, beam, rank, finished)
    kept_ids, lengths, scores = (ops.where(all_done, a, b) for a, b in zip(finished, ranked))
    return lengths, kept_ids, scores
