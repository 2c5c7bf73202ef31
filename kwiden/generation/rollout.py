"""Rows decoded together: their prompts left-padded into one buffer, the
buffer's key/value cache, and the masks and positions each call needs."""

import numpy as np
from keras import ops

from kwiden.generation.arguments import ArgumentError
from kwiden.generation.cache import CachedModel, compiled

# Prompt lengths are padded up to a multiple of this: fewer shapes to compile (TensorFlow traces each).
PROMPT_BUCKET = 16


class Decoder:
    """A model ready to decode: its `CachedModel` compiled, and what it takes
    (`segments`: a UniLM, whose prompt is segment 0 and whose generated
    tokens are segment 1) and how far its positions go (None: no table)."""

    def __init__(self, model):
        self.cached = CachedModel(model)
        self.step = compiled(self.cached.__call__, model)
        self.segments = self.cached.segment_input is not None
        if not (self.cached.causal or self.cached.unilm):
            raise ValueError(
                f"Model {model.name!r} attends both ways over its whole input (a BERT built without unilm=True): "
                "it cannot generate left to right. Build it with unilm=True and train it as a UniLM "
                "(kwiden pretrain --objective seq2seq or simbert)."
            )
        tables = [layer for layer in model.layers if getattr(layer, "mode", None) == "position"]
        self.max_positions = tables[0].input_dim if tables else None
        self.vocab_size = self.cached.vocab_size
        self.loops = {}  # the compiled search loops (sampling._loop), one a search, end ids and banned ids

    def most_new_tokens(self, prompt_length):
        """The most tokens a prompt of `prompt_length` may be given within the
        position table (the last is chosen, never fed); None: no table."""
        return None if self.max_positions is None else self.max_positions - prompt_length + 1


class Rollout:
    """`prompts` (lists of ids), each `repeats` times in a row of its own,
    and room for `max_new_tokens` more, decoded together through `decoder`.
    Prompts are left-padded, so every row's next token goes in the same
    slot; each row's positions count from its own first token. A prompt is
    computed once and its keys and values copied to its repeats."""

    def __init__(self, decoder, prompts, max_new_tokens, repeats=1):
        self.decoder, self.repeats = decoder, repeats
        lengths = np.array([len(prompt) for prompt in prompts])
        check_positions(decoder, int(lengths.max()), max_new_tokens)
        total = buffer_length(prompts, max_new_tokens)
        self.prompt_length = total - max_new_tokens
        self.offsets = self.prompt_length - lengths
        self.tokens = np.zeros((len(prompts), total), np.int32)
        self.seen = np.zeros((len(prompts), total), bool)  # the slots holding a real token
        for row, prompt in enumerate(prompts):
            self.tokens[row, self.offsets[row] : self.prompt_length] = prompt
            self.seen[row, self.offsets[row] : self.prompt_length] = True
        self.cache = decoder.cached.empty_cache(len(prompts), total)
        self.filled = 0

    def start(self):
        """The logits of each row's next token after its prompt, `(rows, vocabulary)`."""
        length = self.prompt_length
        slots = np.arange(self.tokens.shape[1])
        visible = np.repeat(slots[None, :] < length, length, axis=0)  # (queries, slots): the prompt's; a
        if self.decoder.cached.causal:  # decoder's, up to the query's
            visible = visible & (slots[None, :] <= np.arange(length)[:, None])
        mask = self.seen[:, None, :] & visible[None]
        mask[:, np.arange(length), np.arange(length)] |= ~self.seen[:, :length]  # padding sees itself, never read
        positions = np.maximum(np.arange(length)[None, :] - self.offsets[:, None], 0)
        logits = self._call(self.tokens[:, :length], 0, positions, mask, segment=0)
        if self.repeats > 1:
            self.tokens, self.seen, self.offsets = (np.repeat(a, self.repeats, axis=0) for a in
                                                    (self.tokens, self.seen, self.offsets))  # fmt: skip
            self.cache = [tuple(ops.repeat(part, self.repeats, axis=0) for part in pair) for pair in self.cache]
            logits = np.repeat(logits, self.repeats, axis=0)
        return logits

    def append(self, tokens):
        """Append one token a row, without running the model on it (the last one); its slot."""
        slot = self.prompt_length + self.filled
        self.tokens[:, slot] = tokens
        # A model that masks id 0 as padding never sees one as a key (generate_ids bans it there).
        self.seen[:, slot] = tokens != 0 if self.decoder.cached.masks_padding else True
        self.filled += 1
        return slot

    def advance(self, tokens):
        """Append one token a row; the logits of the token after it."""
        slot = self.append(tokens)
        positions = (slot - self.offsets)[:, None]
        return self._call(self.tokens[:, slot : slot + 1], slot, positions, self.seen[:, None, :], segment=1)

    def _call(self, tokens, slot, positions, mask, segment):
        """Run `tokens` written at `slot` onwards; the last one's logits."""
        segments = np.full(tokens.shape, segment, np.int32)
        logits, self.cache = self.decoder.step(
            tokens, segments, positions.astype(np.int32), mask, self.cache, np.int32(slot)
        )
        return np.asarray(ops.convert_to_numpy(logits[:, -1]), np.float64)

    def generated(self):
        """The tokens appended so far, `(rows, count)`."""
        return self.tokens[:, self.prompt_length : self.prompt_length + self.filled]


def buffer_length(prompts, max_new_tokens):
    """The slots a rollout of `prompts` holds: the longest, rounded up to a multiple of `PROMPT_BUCKET`,
    then `max_new_tokens`."""
    longest = max(len(prompt) for prompt in prompts)
    return -(-longest // PROMPT_BUCKET) * PROMPT_BUCKET + max_new_tokens


def check_positions(decoder, length, max_new_tokens):
    """Refuse a prompt of `length` tokens and `max_new_tokens` more that the position table cannot hold."""
    most = decoder.most_new_tokens(length)
    if most is not None and max_new_tokens > most:
        advice = "give {max_new_tokens}={most} or fewer, or a shorter prompt" if most >= 1 else "shorten the prompt"
        raise ArgumentError(
            "A prompt of {length} tokens and {max_new_tokens}={value} need {needed} positions; the model has "
            "{positions}: " + advice + ".", length=length, value=max_new_tokens, positions=decoder.max_positions,
            needed=length + max_new_tokens - 1, most=most,
        )  # fmt: skip
