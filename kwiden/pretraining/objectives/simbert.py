"""SimBERT's objective (`--objective simbert`): UniLM's generation of a
similar sentence plus an in-batch contrastive loss on the sentence vectors,
as ZhuiyiTechnology's SimBERT trains. The sentence vector is BERT's pooler
Dense on `[CLS]` without its tanh (bert4keras' `with_pool="linear"`, the
checkpoint's `bert/pooler/dense`), which `kwiden.SentenceEncoder` pools by
(`pooling="pooler"`). The corpus holds JSON lines `{"text": …, "synonyms":
[ … ]}`; each batch holds pairs in both directions (`text → synonym` and
`synonym → text`) as adjacent rows, and each row's vector should find its
neighbour's among the batch's other rows.

RoFormer-Sim's additions: `--corrupt F` (`Seq2Seq`'s: a share of the sources
whole-word masked; a corrupted source still gives the row's `[CLS]` vector and
must still generate its partner) and `--teacher CHECKPOINT` (distillation: the
squared differences of the batch's cosines from a teacher's, weighted by
`--distill-weight`)."""

import dataclasses
import hashlib
import pathlib

import numpy as np

from kwiden.arguments import option
from kwiden.files import file_digest
from kwiden.models import naming
from kwiden.pretraining.objectives import IGNORED, token_loss
from kwiden.pretraining.objectives.seq2seq import MAX_VALID_ROWS, Corruption, Seq2Seq, source_starts, word_starts
from kwiden.similarity import DISTILL_WEIGHT, SCALE
from kwiden.similarity.retrieval import retrieval_accuracy
from kwiden.text import vocabulary


class Sentences:
    """Each record's text and synonyms, encoded: `ids[i]` a sentence's token ids, `groups[r]` record r's sentence
    indices (its text first), `texts[i]` the sentence (what a teacher reads), `starts[i]` where its words start
    (for `--corrupt`, else None); a length (the ids) and a digest, as a resume compares."""

    def __init__(self, ids, groups, texts=None, starts=None):
        self.ids, self.groups, self.texts, self.starts = ids, groups, texts, starts
        self.keys = [np.asarray(sentence, np.int64).tobytes() for sentence in ids]  # a sentence as the model reads it
        hashed = hashlib.sha256()
        for key in self.keys:
            hashed.update(key + b"|")
        hashed.update(repr(groups).encode())
        self.digest = hashed.hexdigest()

    def __len__(self):
        return int(sum(len(self.ids[i]) for group in self.groups for i in group))

    @property
    def records(self):
        return len(self.groups)

    def take(self, records):
        return Sentences(self.ids, [self.groups[r] for r in records], self.texts, self.starts)


@dataclasses.dataclass(frozen=True)
class SimilarityOptions(Corruption):
    scale: float = option(SCALE, "the cosines' scale in the in-batch softmax", "positive", metavar="S")
    teacher: str = option(None, "distil the cosines of this checkpoint's sentence vectors (RoFormer-Sim)",
                          "checkpoint", metavar="CHECKPOINT")  # fmt: skip
    distill_weight: float = option(None, f"with --teacher: the weight of the squared cosine differences (default: "
                                   f"{DISTILL_WEIGHT:g})", "weight", metavar="W")  # fmt: skip


class SimBERT(Seq2Seq):
    """A similar sentence generated from each sentence, and the pair's `[CLS]` vectors pulled together."""

    name = "simbert"
    fields = ("text", "synonyms")
    line_format = '{"text": …, "synonyms": [ … ]}'
    records_are = "records"
    Options = SimilarityOptions
    measured = ("seq2seq_loss", "similarity_loss", "retrieval_accuracy")
    model_arguments = {**Seq2Seq.model_arguments, "with_pool": "linear"}  # outputs: sequence, vector, logits
    scale, distill_weight, teacher, pairs_a_batch = SCALE, 0.0, None, None

    @classmethod
    def options(cls, values):
        """Its options, checked; `distill_weight` only with a teacher, whose default it takes then."""
        options = super().options(values)
        if options.distill_weight is not None and options.teacher is None:
            raise ValueError("--distill-weight weighs the distillation from a --teacher: give --teacher CHECKPOINT.")
        if options.teacher is not None and options.distill_weight is None:
            options = dataclasses.replace(options, distill_weight=DISTILL_WEIGHT)
        return options

    @classmethod
    def check_run(cls, options):
        cls._pairs(options.batch_size)

    @classmethod
    def made_for(cls, tokenizer, family, options):
        objective = super().made_for(tokenizer, family, options)
        objective.pairs_a_batch = objective._pairs(options.batch_size)
        objective.scale = options.scale
        if options.teacher is not None:
            objective.teacher = teacher_for(options.teacher, tokenizer, objective.seq_len)
            objective.distill_weight = options.distill_weight
            objective.measured = (*objective.measured, "distill_loss")
        return objective

    @classmethod
    def fingerprint(cls, options):
        """The `--teacher` folder's files (their SHA-256): another teacher's cosines would make another run."""
        if options.teacher is None:
            return {}
        files = sorted(path for path in pathlib.Path(options.teacher).rglob("*") if path.is_file())
        return {"teacher": {str(path.relative_to(options.teacher)): file_digest(path) for path in files}}

    @classmethod
    def differs(cls, options, key, began, now):
        changed = sorted(name for name in set(began) | set(now) if began.get(name) != now.get(name))
        return (f"--teacher {options.teacher} is not the folder this run began with ({', '.join(changed[:4])} changed since): "
                "restore it, or give another --output-dir for a new run.")  # fmt: skip

    def losses(self):
        from kwiden.similarity.losses import InBatchSimilarity  # here: the declarations are read without Keras

        return [None, InBatchSimilarity(self.scale, self.distill_weight), token_loss(IGNORED)]

    def measures(self, outputs, targets):
        """The seq2seq loss (weighed by the targets it averages), the in-batch softmax's loss, the retrieval
        accuracy and, with a teacher, the distillation's loss (unweighted) of one validation batch."""
        _, vectors, logits = outputs
        _, similar, tokens = targets
        from keras import ops  # here: the declarations are read without Keras

        _, similarity, seq2seq = self.losses()
        cosines = similarity.cosines(ops.convert_to_tensor(vectors, "float32"))
        teacher, repeats = similarity.targets(ops.convert_to_tensor(similar), cosines)
        rows = len(vectors)
        repeated = None if repeats is None else ops.convert_to_numpy(repeats)
        measures = dict(
            seq2seq_loss=(_number(seq2seq(tokens, logits)), self.counted(targets)),
            similarity_loss=(_number(ops.mean(similarity.softmax_loss(cosines, repeats))), rows),
            retrieval_accuracy=(retrieval_accuracy(np.asarray(vectors), repeated), rows),
        )
        if self.teacher is not None:
            measures["distill_loss"] = (_number(ops.mean(similarity.distill_loss(teacher, cosines))), rows)
        return measures

    def read(self, corpus, tokenizer, folder, verbose):
        records = list(self.records(corpus, folder))
        sentences = [sentence for text, synonyms in records for sentence in (text, *synonyms)]
        ids, offsets = tokenizer.encode_lines(sentences)
        groups, start = [], 0
        for _, synonyms in records:
            groups.append(list(range(start, start + 1 + len(synonyms))))
            start += 1 + len(synonyms)
        starts = word_starts(sentences, offsets) if self.corrupt else None
        return Sentences([np.asarray(sentence, np.int32) for sentence in ids], groups, sentences, starts)

    def notes(self, data):
        pairs = [(group[0], other) for group in data.groups for other in group[1:]]
        cut = sum(len(data.ids[a]) + len(data.ids[b]) + 3 > self.seq_len for a, b in pairs)
        return [f"pairs (a text and a synonym) longer than --seq-len {self.seq_len}: {cut:,} of {len(pairs):,}, "
                "the longer side cut first"]  # fmt: skip

    def record(self, line, where):
        record = self.parsed(line, where)
        text = record.get("text") if isinstance(record, dict) else None
        synonyms = record.get("synonyms") if isinstance(record, dict) else None
        if not (isinstance(text, str) and text.strip()):
            raise ValueError(f"{where}: --objective simbert wants a non-empty text at 'text'.")
        if not (isinstance(synonyms, list) and synonyms and all(isinstance(s, str) and s.strip() for s in synonyms)):
            raise ValueError(f"{where}: --objective simbert wants 'synonyms', a list of one or more non-empty texts.")
        return text, synonyms

    def split(self, data, valid_fraction):
        """Seq2Seq's split, refused where the training records are fewer than a batch's pairs."""
        train, valid = super().split(data, valid_fraction)
        if self.pairs_a_batch is not None:
            _check_records(train.records, self.pairs_a_batch)
        return train, valid

    def training_batch(self, train, batch_size, seed, update, micro_step):
        rng = np.random.default_rng([seed, update, micro_step])
        pairs = _check_records(len(train.groups), self._pairs(batch_size))
        records = rng.choice(len(train.groups), pairs, replace=False)  # a record twice would be its own negative
        pairs = [(train.groups[r][0], train.groups[r][rng.integers(1, len(train.groups[r]))]) for r in records]
        return self._batch(train, pairs, rng)

    def validation_batches(self, valid, batch_size, seed):
        # Fewer records than a batch's pairs: one smaller batch, each record once (a repeat would be its own
        # negative in the in-batch softmax).
        pairs_a_batch = min(self._pairs(batch_size), len(valid.groups))
        count = max(min(len(valid.groups), MAX_VALID_ROWS // 2) // pairs_a_batch, 1) * pairs_a_batch
        records = np.resize(np.arange(len(valid.groups)), count)
        pairs = [(valid.groups[r][0], valid.groups[r][1]) for r in records]
        return [self._batch(valid, pairs[i : i + pairs_a_batch]) for i in range(0, count, pairs_a_batch)]

    @staticmethod
    def _pairs(batch_size):
        if batch_size % 2:
            raise ValueError(f"--batch-size {batch_size}: --objective simbert puts each pair in a batch both ways "
                             "(text → synonym, synonym → text): give an even batch size.")  # fmt: skip
        if batch_size < 4:
            raise ValueError(f"--batch-size {batch_size}: --objective simbert needs 2 pairs a batch or more (4 rows): "
                             "with one, each row's only other row is its partner, so the similarity loss is 0 and the "
                             "retrieval accuracy 1 whatever the vectors. Give --batch-size 4 or more.")  # fmt: skip
        return batch_size // 2

    def _batch(self, sentences, pairs, rng=None):
        """Each pair both ways, as adjacent rows; with `rng` (training) the sources corrupted as `--corrupt` says.
        The similarity's target: the teacher's cosines of the (uncorrupted) sources, or zeros without a teacher."""
        sources = [i for a, b in pairs for i in (a, b)]
        targets = [i for a, b in pairs for i in (b, a)]
        token_ids, segment_ids, _ = self.encoded([sentences.ids[i] for i in sources],
                                                 [sentences.ids[i] for i in targets])  # fmt: skip
        if rng is not None and self.corrupt:
            starts = source_starts([sentences.starts[i] for i in sources], segment_ids)
            token_ids = self.corrupted(token_ids, segment_ids, starts, rng)
        (inputs, segments), (_, targets) = self.examples(token_ids, segment_ids)
        rows = len(inputs)
        teacher = np.zeros((rows, rows), np.float32)
        if self.teacher is not None:
            vectors, _ = self.teacher.vectors_and_cut([sentences.texts[i] for i in sources])  # cut as the log counts
            teacher = (vectors @ vectors.T).astype(np.float32)
        return (inputs, segments), (None, np.concatenate([teacher, _repeats(sentences, sources)], axis=1), targets)


def _repeats(sentences, sources):
    """`(rows, rows)`: 1 where row j's source is row i's sentence again (by its token ids), j neither i nor its
    partner: the same sentence, of another record, is no negative."""
    keys = np.array([sentences.keys[i] for i in sources], dtype=object)
    same = (keys[:, None] == keys[None, :]).astype(np.float32)
    rows = np.arange(len(sources))
    same[rows, rows] = same[rows, rows ^ 1] = 0
    return same


def _check_records(records, pairs):
    """`pairs`, refused where `records` are fewer: each pair of a batch is of another record (a record twice would
    be its own negative in the in-batch softmax)."""
    if records < pairs:
        fits = f"--batch-size {2 * records} or less, or more records" if records >= 2 else "more records"
        raise ValueError(f"--batch-size {2 * pairs} holds {pairs} pairs, each of another record, but {records} "
                         f"record(s) are left for training: give {fits}.")  # fmt: skip
    return pairs


def _number(tensor):
    from keras import ops  # here: the declarations are read without Keras

    return float(ops.convert_to_numpy(tensor))


def teacher_for(folder, tokenizer, seq_len):
    """A `SentenceEncoder` on the `--teacher` folder (its texts cut to `seq_len` tokens), refused where its
    vocabulary is not the run's tokenizer's (its cosines would be of other tokens) or it cannot read them."""
    words = pathlib.Path(folder) / "vocab.txt"
    if not words.is_file():
        raise ValueError(f"--teacher {folder} has no vocab.txt: a teacher is a BERT or RoFormer folder with its "
                         "WordPiece vocab.txt, as kwiden.SentenceEncoder reads.")  # fmt: skip
    theirs = vocabulary.load_tokenizer(words, flag="--teacher").tokenizer.get_vocab(with_added_tokens=True)
    ours = tokenizer.tokenizer.get_vocab(with_added_tokens=True)
    if theirs != ours:
        raise ValueError(
            f"--teacher {folder}: its vocabulary ({len(theirs):,} tokens) is not the run's ({tokenizer.source}, "
            f"{len(ours):,} tokens){_first_difference(theirs, ours)}. The student learns the teacher's cosines of "
            "the same texts: give a teacher of the run's vocabulary."
        )
    from kwiden.similarity.sentence import SentenceEncoder  # here: the declarations are read without Keras

    try:
        teacher = SentenceEncoder(folder, batch_size=MAX_VALID_ROWS)
    except (OSError, ValueError) as error:
        raise ValueError(f"--teacher {folder}: {error}") from None
    rows = teacher.model.get_layer(naming.EMBEDDING_TOKEN).input_dim
    if rows < len(ours):
        raise ValueError(f"--teacher {folder}: its model has {rows:,} token embeddings, fewer than the "
                         f"{len(ours):,} tokens of its vocabulary; give a teacher of the run's vocabulary.")  # fmt: skip
    positions = {layer.name: layer for layer in teacher.model.layers}.get(naming.EMBEDDING_POSITION)
    if positions is not None and positions.input_dim < seq_len:
        raise ValueError(f"--teacher {folder}: its model reads {positions.input_dim} positions, fewer than --seq-len "
                         f"{seq_len}; give a shorter --seq-len or a teacher of more positions.")  # fmt: skip
    try:  # its texts cut to --seq-len, as the student's are: the same model and pooling, read once
        return SentenceEncoder(folder, teacher.pooling, MAX_VALID_ROWS, seq_len, model=teacher.model)
    except ValueError as error:  # a length it was not trained on
        raise ValueError(
            f"--teacher {folder} cannot read --seq-len {seq_len} tokens ({error}); give a shorter "
            "--seq-len or a teacher trained on more."
        ) from None


def _first_difference(theirs, ours):
    """Where two vocabularies of one size first differ, as words; else nothing."""
    if len(theirs) != len(ours):
        return ""
    by_id = [{i: token for token, i in words.items()} for words in (theirs, ours)]
    first = min(i for i in by_id[0] if by_id[0][i] != by_id[1].get(i))
    return f" (token {first} is {by_id[0][first]!r} there, {by_id[1].get(first)!r} here)"
