"""The two pretraining objectives on a token stream: the next token (causal
LM, decoders) and masked tokens (masked LM, encoders: BERT's 15%, 80/10/10,
loss on the masked positions only, optionally whole words)."""

import dataclasses

import keras
import numpy as np

MASKED = 0.15
# Of the masked positions: [MASK], a random token, the token itself.
REPLACED_BY_MASK, REPLACED_BY_RANDOM = 0.8, 0.1
# Targets the masked LM's loss ignores (every position it did not mask).
IGNORED = -1
MAX_VALID_WINDOWS = 256
LEAST_VALID_WINDOWS = 4
CAUSAL, MASKED_LM = "causal", "masked"


@dataclasses.dataclass
class Objective:
    """How windows of the token stream become `(inputs, targets)` batches."""

    kind: str
    seq_len: int
    vocab_size: int
    mask: int = None
    cls: int = None
    separator: int = None
    whole_words: bool = False

    @property
    def wrapped(self):
        """Masked windows go between [CLS] and [SEP] where the tokenizer has them, as BERT's inputs."""
        return self.kind == MASKED_LM and self.cls is not None and self.separator is not None

    @property
    def window(self):
        """Tokens of the stream one example reads."""
        if self.kind == CAUSAL:
            return self.seq_len + 1
        return self.seq_len - 2 if self.wrapped else self.seq_len

    def losses(self):
        """What `compile` takes: the decoder's one output's loss; for an
        encoder, none for its sequence output and the masked LM's for its logits."""
        if self.kind == CAUSAL:
            return keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return [None, keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORED)]

    def batch(self, tokens, starts, rng):
        """The examples whose windows start at `starts` of `tokens` (a `Split`);
        the masked LM draws its masks from `rng`."""
        windows = np.stack([tokens.ids[s : s + self.window] for s in starts]).astype(np.int32)
        if self.kind == CAUSAL:
            return windows[:, :-1], windows[:, 1:]
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
            masked = np.take_along_axis(np.where(word_starts, chosen, False), _first_of(words, word_starts), 1)
        # A row with nothing masked would give no loss: mask the word at one position.
        for row in np.flatnonzero(~masked.any(axis=1)):
            masked[row] = words[row] == words[row, rng.integers(0, shape[1])]
        return masked


def _first_of(words, word_starts):
    """For each position, the position of its word's first token."""
    positions = np.where(word_starts, np.arange(words.shape[1]), 0)
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
