"""How to choose the tokens (`Search`: greedy, sampled with temperature,
top-k and top-p, or by beam search), and beam search itself, over a
`Rollout`'s logits on the host in float64 numpy (greedy and sampled
decoding run on the device: `sampling`)."""

import dataclasses

import numpy as np

from kwiden.generation.arguments import ArgumentError, GenerateOptions, checked
from kwiden.generation.rollout import Rollout

# Beam search ranks finished continuations by their log-probability over their length, as transformers'
# `length_penalty=1.0`.
LENGTH_PENALTY = 1.0


@dataclasses.dataclass(frozen=True)
class Search:
    """How to choose each next token: `greedy`, by a beam search of `beam`
    continuations, or by sampling from the distribution at `temperature`,
    cut to the `top_k` likeliest tokens and to the smallest set holding
    `top_p` of the probability."""

    greedy: bool = False
    beam: int = None
    top_k: int = None
    top_p: float = 1.0
    temperature: float = 1.0

    def __post_init__(self):
        sampling = self.top_k is not None or self.top_p != 1.0 or self.temperature != 1.0
        if self.greedy and self.beam is not None or (self.greedy or self.beam is not None) and sampling:
            raise ArgumentError(
                "Choose one of {greedy}, {beam}=K, or sampling ({top_k}=K, {top_p}=P, {temperature}=T)."
            )
        values = dict(greedy=self.greedy, beam=self.beam, top_k=self.top_k, top_p=self.top_p,
                      temperature=self.temperature)  # fmt: skip
        for name, value in checked(GenerateOptions, values).items():
            object.__setattr__(self, name, value)

    @property
    def samples(self):
        return not self.greedy and self.beam is None


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def beam_rows(decoder, prompts, max_new_tokens, beam, keep, end_ids, banned):
    """The `keep` best of `beam` continuations of each prompt, best first,
    as `(ids, score)`: finished ones leave the beam as they end, and a
    prompt is done once `beam` have (transformers' `early_stopping=True`):
    from then on it takes no candidate, and its beams still going are never
    ranked, so each prompt's result is the one it has alone, whatever the
    prompts beside it. Fewer than `keep` where fewer continuations exist."""
    rollout = Rollout(decoder, prompts, max_new_tokens, repeats=beam)
    logits = rollout.start()
    scores = np.tile([0.0] + [-np.inf] * (beam - 1), len(prompts))
    finished = [[] for _ in prompts]
    history = np.zeros((len(scores), 0), np.int64)
    for step in range(max_new_tokens):
        logits[:, banned] = -np.inf
        totals = (log_softmax(logits) + scores[:, None]).reshape(len(prompts), -1)
        rows, tokens, scores = _next_beams(totals, beam, logits.shape[-1], end_ids, history, finished, step)
        if all(len(done) >= beam for done in finished):
            return _best(finished, keep)
        history = np.concatenate([history[rows], tokens[:, None]], axis=1)
        if step == max_new_tokens - 1:
            break
        rollout.reorder(rows)
        logits = rollout.advance(tokens)
    for row, score in enumerate(scores):
        if np.isfinite(score):  # a done prompt's beams are at -inf: not ranked
            _finish(
                finished[row // beam], beam, history[row].tolist(), score / max(history.shape[1], 1) ** LENGTH_PENALTY
            )
    return _best(finished, keep)


def _best(finished, keep):
    return [sorted(done, key=lambda pair: -pair[1])[:keep] for done in finished]


def _finish(done, beam, ids, score):
    """Add a finished continuation to a prompt's best `beam`: in place of the worst if it is better; a
    continuation already there (ended by another end token) keeps its better score."""
    same = [i for i, (other, _) in enumerate(done) if other == ids]
    if same:
        done[same[0]] = (ids, max(score, done[same[0]][1]))
    elif len(done) < beam:
        done.append((ids, score))
    else:
        worst = min(range(len(done)), key=lambda i: done[i][1])
        if score > done[worst][1]:
            done[worst] = (ids, score)


def _next_beams(totals, beam, vocabulary, end_ids, history, finished, step):
    """Each prompt's `beam` best continuing candidates among its `2·beam`
    best; a candidate that ends within the first `beam` is finished. A
    prompt already done (`beam` finished) takes none: its rows go on at
    -inf, never chosen or ranked."""
    rows, tokens, scores = [], [], []
    for prompt, candidates in enumerate(np.argsort(-totals, axis=-1, kind="stable")[:, : 2 * beam]):
        chosen = (
            []
            if len(finished[prompt]) >= beam
            else _candidates(
                prompt, candidates, totals[prompt], beam, vocabulary, end_ids, history, finished[prompt], step
            )
        )
        chosen += [(prompt * beam, 0, -np.inf)] * (beam - len(chosen))
        for row, token, score in chosen:
            rows.append(row), tokens.append(token), scores.append(score)
    return np.array(rows), np.array(tokens), np.array(scores)


def _candidates(prompt, candidates, totals, beam, vocabulary, end_ids, history, finished, step):
    """A prompt's continuing candidates `(row, token, score)`, at most `beam`; its ending ones go to `finished`."""
    chosen = []
    for rank, candidate in enumerate(candidates):
        row, token = prompt * beam + candidate // vocabulary, candidate % vocabulary
        score = totals[candidate]
        if token in end_ids:
            if rank < beam and np.isfinite(score):
                _finish(finished, beam, history[row].tolist(), score / (step + 1) ** LENGTH_PENALTY)
        elif len(chosen) < beam:
            chosen.append((row, token, score))
    return chosen
