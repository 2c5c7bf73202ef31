"""The sequence-to-sequence objective (`--objective seq2seq`): UniLM's, on a
BERT or RoFormer built with its mask (`unilm=True`). Each example is one
JSON line `{"source": …, "target": …}`, encoded `[CLS] source [SEP] target
[SEP]` with the source as segment 0 and the target as segment 1; the loss is
the next token's cross-entropy at every position whose next token is the
target's (its closing [SEP] included), as bert4keras's UniLM trains.

`--corrupt F` (RoFormer-Sim's BART-style corruption): a share F of the
training rows get their source whole-word masked (15% of its words, each
whole: 80% [MASK] tokens, 10% random tokens, 10% kept; Chinese words by
jieba), and must still generate the target, which is never touched."""

import dataclasses
import hashlib
import json

import numpy as np

from kwiden.arguments import option
from kwiden.pretraining.objectives import (
    IGNORED,
    LEAST_VALID_WINDOWS,
    MASKED,
    REPLACED_BY_MASK,
    REPLACED_BY_RANDOM,
    Objective,
    first_of,
    token_loss,
)
from kwiden.text import tokens
from kwiden.text.tokenizer import check_json_texts

MAX_VALID_ROWS = 256


class Rows:
    """Encoded examples: token and segment ids a row, padded with 0, with a length (their ids) and a digest; for
    `--corrupt`, where the sources' words start (`word_starts`, the rows' shape, else None)."""

    def __init__(self, token_ids, segment_ids, truncated=0, word_starts=None):
        self.token_ids, self.segment_ids, self.truncated = token_ids, segment_ids, truncated
        self.word_starts = word_starts
        self.digest = hashlib.sha256(token_ids.tobytes() + segment_ids.tobytes()).hexdigest()

    def __len__(self):
        return int(np.count_nonzero(self.token_ids))

    @property
    def records(self):
        return len(self.token_ids)

    def take(self, rows):
        rows = np.asarray(rows, np.int64)
        starts = None if self.word_starts is None else self.word_starts[rows]
        return Rows(self.token_ids[rows], self.segment_ids[rows], word_starts=starts)


@dataclasses.dataclass(frozen=True)
class Corruption:
    corrupt: float = option(0.0, "the share of sources whole-word masked (RoFormer-Sim's)",
                            "portion", metavar="F")  # fmt: skip


class Seq2Seq(Objective):
    """The target generated from the source, left to right (UniLM)."""

    name = "seq2seq"
    model_arguments = {"with_mlm": True, "unilm": True}
    fields = ("source", "target")
    line_format = '{"source": …, "target": …}'
    records_are = "pairs"
    Options = Corruption

    def __init__(self, seq_len, vocab_size, cls, separator, mask=None, corrupt=0.0):
        super().__init__(seq_len, vocab_size)
        self.cls, self.separator, self.mask, self.corrupt = cls, separator, mask, corrupt

    @classmethod
    def made_for(cls, tokenizer, family, options):
        if "unilm" not in family.flags:
            raise ValueError(f"--objective {cls.name} trains a UniLM (--model bert or roformer), not {family.name}.")
        if tokenizer.cls is None or tokenizer.separator is None:
            raise ValueError(f"--objective {cls.name} needs a tokenizer with [CLS] and [SEP] (a WordPiece vocab.txt "
                             f"or --build-vocab); {tokenizer.source} has none.")  # fmt: skip
        if options.seq_len < 5:
            raise ValueError(f"--seq-len {options.seq_len}: a pair needs [CLS], [SEP] twice and a token of each side.")
        if options.corrupt and tokenizer.mask is None:
            raise ValueError(f"--corrupt {options.corrupt:g} masks words with [MASK]; the tokenizer "
                             f"{tokenizer.source} has none.")  # fmt: skip
        return cls(options.seq_len, tokenizer.vocab_size, tokenizer.cls, tokenizer.separator, tokenizer.mask,
                   options.corrupt)  # fmt: skip

    def losses(self):
        return [None, token_loss(IGNORED)]

    def counted(self, targets):
        return int(np.sum(targets[-1] != IGNORED))  # the tokens, the last target

    # Its data: records, not the token stream.
    def read(self, corpus, tokenizer, folder, verbose):
        pairs = list(self.records(corpus, folder))
        sources, offsets = tokenizer.encode_lines([source for source, _ in pairs])
        targets, _ = tokenizer.encode_lines([target for _, target in pairs])
        token_ids, segment_ids, cut = self.encoded(sources, targets)
        starts = None
        if self.corrupt:
            starts = source_starts(word_starts([source for source, _ in pairs], offsets), segment_ids)
        return Rows(token_ids, segment_ids, cut, starts)

    def notes(self, data):
        return [f"pairs longer than --seq-len {self.seq_len}: {data.truncated:,} of {data.records:,}, the longer "
                "side cut first"]  # fmt: skip

    def records(self, corpus, folder):
        """The `(source, target)` of each JSON line of the corpus files; a line that is not one refused by name."""
        count = 0
        for path in tokens.corpus_files(corpus, folder):
            for number, line in enumerate(tokens.lines_of(path), 1):
                if line.strip():
                    count += 1
                    yield self.record(line, f"{path}, line {number}")
        if not count:
            raise ValueError(f"--objective {self.name}: the corpus holds no JSON lines.")

    def parsed(self, line, where):
        """The JSON value of one corpus line; a line that is not JSON refused naming `where`."""
        try:
            return check_json_texts(json.loads(line), where)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}: not JSON ({error.msg}); --objective {self.name} reads one "
                             f"{self.line_format} a line.") from None  # fmt: skip

    def record(self, line, where):
        record = self.parsed(line, where)
        if not isinstance(record, dict) or not all(isinstance(record.get(f), str) and record[f].strip()
                                                   for f in self.fields):  # fmt: skip
            raise ValueError(f"{where}: --objective {self.name} wants a non-empty text at each of "
                             f"{', '.join(repr(f) for f in self.fields)}.")  # fmt: skip
        return record["source"], record["target"]

    def encoded(self, sources, targets):
        """`(token ids, segment ids, pairs cut)`: `[CLS] source [SEP] target [SEP]` a row, the longer side cut
        first where the pair is longer than `seq_len`."""
        token_ids = np.zeros((len(sources), self.seq_len), np.int32)
        segment_ids = np.zeros_like(token_ids)
        cut = 0
        for row, (source, target) in enumerate(zip(sources, targets)):
            source, target = list(source), list(target)
            cut += len(source) + len(target) + 3 > self.seq_len
            while len(source) + len(target) + 3 > self.seq_len:
                (source if len(source) > len(target) else target).pop()
            ids = [self.cls, *source, self.separator, *target, self.separator]
            token_ids[row, : len(ids)] = ids
            segment_ids[row, len(source) + 2 : len(ids)] = 1
        return token_ids, segment_ids, cut

    def split(self, data, valid_fraction):
        """The last `valid_fraction` of the records (at least `LEAST_VALID_WINDOWS`) held out."""
        count = data.records
        held = max(int(valid_fraction * count), LEAST_VALID_WINDOWS)
        if count - held < 1:
            raise ValueError(f"--objective {self.name}: {count} {self.records_are} are too few for training and "
                             f"{LEAST_VALID_WINDOWS} held out; give more.")  # fmt: skip
        return data.take(range(count - held)), data.take(range(count - held, count))

    def training_batch(self, train, batch_size, seed, update, micro_step):
        rng = np.random.default_rng([seed, update, micro_step])
        rows = rng.integers(0, len(train.token_ids), batch_size)
        token_ids, segment_ids = train.token_ids[rows], train.segment_ids[rows]
        if self.corrupt:
            token_ids = self.corrupted(token_ids, segment_ids, train.word_starts[rows], rng)
        return self.examples(token_ids, segment_ids)

    def corrupted(self, token_ids, segment_ids, starts, rng):
        """`token_ids` with a share `corrupt` of the rows' sources whole-word masked (RoFormer-Sim's): 15% of a
        source's words, each whole: 80% [MASK] tokens, 10% random tokens (not padding), 10% kept. `starts`: where
        the sources' words start (`source_starts`); the targets and special tokens are not touched."""
        rows, length = token_ids.shape
        positions = np.arange(length)
        in_source = (positions >= 1) & (positions < np.argmax(segment_ids == 1, axis=1)[:, None] - 1)
        starts = (starts | (positions == 1)) & in_source
        picked = rng.random(rows) < self.corrupt
        draw = np.take_along_axis(rng.random((rows, length)), first_of(starts), 1)  # one draw a word
        random_ids = rng.integers(1, self.vocab_size, (rows, length))
        chosen = picked[:, None] & in_source & (draw < MASKED)
        draw = draw / MASKED  # of the chosen: [MASK], a random token, kept
        corrupted = np.where(chosen & (draw < REPLACED_BY_MASK), self.mask, token_ids)
        randomised = chosen & (draw >= REPLACED_BY_MASK) & (draw < REPLACED_BY_MASK + REPLACED_BY_RANDOM)
        return np.where(randomised, random_ids, corrupted).astype(token_ids.dtype)

    def validation_batches(self, valid, batch_size, seed):
        count = max(min(len(valid.token_ids), MAX_VALID_ROWS) // batch_size, 1) * batch_size
        rows = np.resize(np.arange(len(valid.token_ids)), count)  # whole batches, repeating a short part
        return [self.examples(valid.token_ids[rows[i : i + batch_size]], valid.segment_ids[rows[i : i + batch_size]])
                for i in range(0, count, batch_size)]  # fmt: skip

    @staticmethod
    def examples(token_ids, segment_ids):
        """`((token ids, segment ids), (None, targets))`: the next token where it is the target's, else ignored."""
        targets = np.full_like(token_ids, IGNORED)
        is_target = (segment_ids[:, 1:] == 1) & (token_ids[:, 1:] != 0)
        targets[:, :-1] = np.where(is_target, token_ids[:, 1:], IGNORED)
        return (token_ids, segment_ids), (None, targets)


def word_starts(lines, offsets):
    """Which tokens of each line start a word, for `--corrupt` (jieba's words, as `--whole-word-mask` cuts them)."""
    segment = tokens.segmenter("--corrupt")
    return [tokens.word_starts(line, o, segment) for line, o in zip(lines, offsets or [None] * len(lines))]


def source_starts(starts, segment_ids):
    """Each row's word starts (of its source, `starts[row]`) at the positions of the source it kept: after [CLS],
    before its [SEP]."""
    aligned = np.zeros(segment_ids.shape, bool)
    for row, end in enumerate(np.argmax(segment_ids == 1, axis=1) - 1):
        aligned[row, 1:end] = starts[row][: end - 1]
    return aligned
