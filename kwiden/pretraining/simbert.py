"""SimBERT's objective (`--objective simbert`): UniLM's generation of a
similar sentence plus an in-batch contrastive loss on the `[CLS]` vectors,
as ZhuiyiTechnology's SimBERT trains. The corpus holds JSON lines
`{"text": …, "synonyms": [ … ]}`; each batch holds pairs in both directions
(`text → synonym` and `synonym → text`) as adjacent rows, and each row's
`[CLS]` vector should find its neighbour's among the batch's."""

import hashlib

import keras
import numpy as np
from keras import ops

from kwiden.pretraining.objectives import IGNORED, register_objective
from kwiden.pretraining.seq2seq import MAX_VALID_ROWS, Seq2Seq

# SimBERT's: the cosines are multiplied by this before the softmax over the batch.
SCALE = 30.0


@keras.saving.register_keras_serializable(package="kwiden")
class InBatchSimilarity(keras.losses.Loss):
    """Cross-entropy of each row's partner (rows 2i and 2i + 1 are partners)
    among the batch's other rows, by the cosines of their `[CLS]` vectors
    times `scale`; `y_true` is not read (the partners are the row order)."""

    def __init__(self, scale=SCALE, name="in_batch_similarity", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale = scale

    def call(self, y_true, y_pred):
        vectors = y_pred[:, 0]
        vectors = vectors / ops.sqrt(ops.sum(ops.square(vectors), axis=-1, keepdims=True) + 1e-12)
        scores = ops.matmul(vectors, ops.transpose(vectors)) * self.scale
        rows = ops.shape(scores)[0]
        scores = scores - ops.eye(rows, dtype=scores.dtype) * 1e12  # a row is not its own partner
        index = ops.arange(rows, dtype="int32")
        partners = index + 1 - 2 * (index % 2)  # 0 ↔ 1, 2 ↔ 3, …
        return keras.losses.sparse_categorical_crossentropy(partners, scores, from_logits=True)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


class Sentences:
    """Each record's text and synonyms, encoded: `ids[i]` a sentence's token ids, `groups[r]` record r's sentence
    indices (its text first); a length (the ids) and a digest, as a resume compares."""

    def __init__(self, ids, groups):
        self.ids, self.groups = ids, groups
        hashed = hashlib.sha256()
        for sentence in ids:
            hashed.update(np.asarray(sentence, np.int64).tobytes() + b"|")
        hashed.update(repr(groups).encode())
        self.digest = hashed.hexdigest()

    def __len__(self):
        return int(sum(len(sentence) for sentence in self.ids))

    @property
    def records(self):
        return len(self.groups)

    def take(self, records):
        return Sentences(self.ids, [self.groups[r] for r in records])


@register_objective
class SimBERT(Seq2Seq):
    """A similar sentence generated from each sentence, and the pair's `[CLS]` vectors pulled together."""

    name = "simbert"
    fields = ("text", "synonyms")
    line_format = '{"text": …, "synonyms": [ … ]}'
    records_are = "records"

    def losses(self):
        return [InBatchSimilarity(), keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORED)]

    def read(self, corpus, tokenizer, folder, verbose):
        records = list(self.records(corpus, folder))
        sentences = [sentence for text, synonyms in records for sentence in (text, *synonyms)]
        ids, _ = tokenizer.encode_lines(sentences)
        groups, start = [], 0
        for _, synonyms in records:
            groups.append(list(range(start, start + 1 + len(synonyms))))
            start += 1 + len(synonyms)
        return Sentences([np.asarray(sentence, np.int32) for sentence in ids], groups)

    def record(self, line, where):
        record = self.parsed(line, where)
        text = record.get("text") if isinstance(record, dict) else None
        synonyms = record.get("synonyms") if isinstance(record, dict) else None
        if not (isinstance(text, str) and text.strip()):
            raise ValueError(f"{where}: --objective simbert wants a non-empty text at 'text'.")
        if not (isinstance(synonyms, list) and synonyms and all(isinstance(s, str) and s.strip() for s in synonyms)):
            raise ValueError(f"{where}: --objective simbert wants 'synonyms', a list of one or more non-empty texts.")
        return text, synonyms

    def training_batch(self, train, batch_size, seed, update, micro_step):
        rng = np.random.default_rng([seed, update, micro_step])
        records = rng.integers(0, len(train.groups), self._pairs(batch_size))
        pairs = [(train.groups[r][0], train.groups[r][rng.integers(1, len(train.groups[r]))]) for r in records]
        return self._batch(train, pairs)

    def validation_batches(self, valid, batch_size, seed):
        pairs_a_batch = self._pairs(batch_size)
        count = max(min(len(valid.groups), MAX_VALID_ROWS // 2) // pairs_a_batch, 1) * pairs_a_batch
        records = np.resize(np.arange(len(valid.groups)), count)
        pairs = [(valid.groups[r][0], valid.groups[r][1]) for r in records]
        return [self._batch(valid, pairs[i : i + pairs_a_batch]) for i in range(0, count, pairs_a_batch)]

    def _pairs(self, batch_size):
        if batch_size % 2:
            raise ValueError(f"--batch-size {batch_size}: --objective simbert puts each pair in a batch both ways "
                             "(text → synonym, synonym → text): give an even batch size.")  # fmt: skip
        return batch_size // 2

    def _batch(self, sentences, pairs):
        """Each pair both ways, as adjacent rows."""
        sources = [sentences.ids[i] for a, b in pairs for i in (a, b)]
        targets = [sentences.ids[i] for a, b in pairs for i in (b, a)]
        token_ids, segment_ids, _ = self.encoded(sources, targets)
        (inputs, segments), (_, targets) = self.examples(token_ids, segment_ids)
        return (inputs, segments), (np.zeros(len(inputs), np.int32), targets)
