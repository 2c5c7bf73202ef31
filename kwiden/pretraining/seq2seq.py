"""The sequence-to-sequence objective (`--objective seq2seq`): UniLM's, on a
BERT or RoFormer built with its mask (`unilm=True`). Each example is one
JSON line `{"source": …, "target": …}`, encoded `[CLS] source [SEP] target
[SEP]` with the source as segment 0 and the target as segment 1; the loss is
the next token's cross-entropy at every position whose next token is the
target's (its closing [SEP] included), as bert4keras's UniLM trains."""

import hashlib
import json

import keras
import numpy as np

from kwiden.pretraining import tokens
from kwiden.pretraining.objectives import IGNORED, LEAST_VALID_WINDOWS, Objective, register_objective

MAX_VALID_ROWS = 256


class Rows:
    """Encoded examples: token and segment ids a row, padded with 0, with a length (their ids) and a digest."""

    def __init__(self, token_ids, segment_ids, truncated=0):
        self.token_ids, self.segment_ids, self.truncated = token_ids, segment_ids, truncated
        self.digest = hashlib.sha256(token_ids.tobytes() + segment_ids.tobytes()).hexdigest()

    def __len__(self):
        return int(np.count_nonzero(self.token_ids))

    @property
    def records(self):
        return len(self.token_ids)

    def take(self, rows):
        rows = np.asarray(rows)
        return Rows(self.token_ids[rows], self.segment_ids[rows])


@register_objective
class Seq2Seq(Objective):
    """The target generated from the source, left to right (UniLM)."""

    name = "seq2seq"
    model_arguments = {"with_mlm": True, "unilm": True}
    fields = ("source", "target")
    line_format = '{"source": …, "target": …}'
    records_are = "pairs"

    def __init__(self, seq_len, vocab_size, cls, separator):
        super().__init__(seq_len, vocab_size)
        self.cls, self.separator = cls, separator

    @classmethod
    def made_for(cls, tokenizer, seq_len, whole_words, family):
        if "unilm" not in family.flags:
            raise ValueError(f"--objective {cls.name} trains a UniLM (--model bert or roformer), not {family.name}.")
        if whole_words:
            raise ValueError(f"--whole-word-mask is for masked LMs; --objective {cls.name} does not mask.")
        if tokenizer.cls is None or tokenizer.separator is None:
            raise ValueError(f"--objective {cls.name} needs a tokenizer with [CLS] and [SEP] (a WordPiece vocab.txt "
                             f"or --build-vocab); {tokenizer.source} has none.")  # fmt: skip
        if seq_len < 5:
            raise ValueError(f"--seq-len {seq_len}: a pair needs [CLS], [SEP] twice and a token of each side.")
        return cls(seq_len, tokenizer.vocab_size, tokenizer.cls, tokenizer.separator)

    def losses(self):
        return [None, keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORED)]

    def counted(self, targets):
        return int(np.sum(targets[1] != IGNORED))

    # Its data: records, not the token stream.
    def read(self, corpus, tokenizer, folder, verbose):
        pairs = list(self.records(corpus, folder))
        sources, _ = tokenizer.encode_lines([source for source, _ in pairs])
        targets, _ = tokenizer.encode_lines([target for _, target in pairs])
        rows = Rows(*self.encoded(sources, targets))
        if verbose and rows.truncated:
            print(f"{rows.truncated:,} of {len(pairs):,} pairs were longer than --seq-len {self.seq_len}: the longer "
                  "side cut first")  # fmt: skip
        return rows

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
            return json.loads(line)
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
        rows = np.random.default_rng([seed, update, micro_step]).integers(0, len(train.token_ids), batch_size)
        return self.examples(train.token_ids[rows], train.segment_ids[rows])

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
