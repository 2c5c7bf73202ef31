"""`--objective simbert`: the in-batch similarity loss against a numpy reference, the paired batches, and a tiny
BERT trained end to end (and resumed) on {"text", "synonyms"} lines; its bad input named before training."""

import json

import numpy as np
import pytest
from conftest import TINY_BERT, TINY_RUN, assert_resumes_bit_for_bit

import kwiden
from kwiden.pretraining.objectives import IGNORED
from kwiden.pretraining.objectives.simbert import Sentences, SimBERT
from kwiden.similarity import SCALE
from kwiden.similarity.losses import InBatchSimilarity
from kwiden.similarity.retrieval import retrieval_accuracy
from kwiden.text import vocabulary

RUN = {**TINY_RUN, "seq_len": 24, "build_vocab": 300}


def cosines_of(vectors):
    vectors = vectors.astype("float64")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors @ vectors.T


def softmax_reference(vectors, scale=SCALE):
    """SimBERT's in-batch loss in numpy: each row's partner (its neighbour) among the other rows by scaled cosine."""
    scores = scale * cosines_of(vectors)
    np.fill_diagonal(scores, -np.inf)
    log_softmax = scores - np.log(np.exp(scores - scores.max(1, keepdims=True)).sum(1, keepdims=True)) - scores.max(
        1, keepdims=True)  # fmt: skip
    return -np.mean([log_softmax[i, i ^ 1] for i in range(len(vectors))])


def test_the_in_batch_loss_is_each_rows_partner_by_scaled_cosine():
    vectors = np.random.default_rng(0).normal(size=(4, 5)).astype("float32")
    assert float(InBatchSimilarity()(np.zeros(4), vectors)) == pytest.approx(softmax_reference(vectors), rel=1e-5)
    loss = float(InBatchSimilarity(scale=7.5)(np.zeros(4), vectors))  # --scale
    assert loss == pytest.approx(softmax_reference(vectors, 7.5), rel=1e-5)


def test_the_distillation_term_is_the_mean_squared_cosine_difference_off_the_diagonal():
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(6, 5)).astype("float32")
    teacher = cosines_of(rng.normal(size=(6, 4)))
    targets = np.concatenate([teacher, np.zeros((6, 6))], axis=1).astype("float32")  # no sentence repeated
    loss = float(InBatchSimilarity(scale=20.0, distill_weight=100.0)(targets, vectors))
    off_diagonal = ~np.eye(6, dtype=bool)
    distilled = np.mean((teacher - cosines_of(vectors))[off_diagonal] ** 2)
    assert loss == pytest.approx(softmax_reference(vectors, 20.0) + 100 * distilled, rel=1e-5)
    again = InBatchSimilarity.from_config(InBatchSimilarity(20.0, 100.0).get_config())
    assert (again.scale, again.distill_weight) == (20.0, 100.0)  # as a backup reads it back


def test_the_retrieval_accuracy_is_the_share_of_rows_whose_nearest_other_row_is_their_partner():
    vectors = np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0, 0, 1], [0, 0.8, 0.6], [0, 0.6, 0.8]])
    cosines = vectors @ vectors.T / np.outer(*[np.linalg.norm(vectors, axis=1)] * 2)
    np.fill_diagonal(cosines, -np.inf)
    assert cosines.argmax(1).tolist() == [1, 0, 4, 5, 5, 4]  # partners 0-1, 2-3, 4-5: rows 2 and 3 miss theirs
    assert retrieval_accuracy(vectors) == 4 / 6
    assert retrieval_accuracy(vectors * [[3], [0.5], [2], [1], [7], [1]]) == 4 / 6  # cosines: lengths do not count
    assert retrieval_accuracy(vectors[[0, 2, 1, 3, 4, 5]]) == 2 / 6


def test_the_validation_measures_are_the_losses_parts_and_the_accuracy():
    objective = SimBERT(seq_len=8, vocab_size=7, cls=2, separator=3)
    rng = np.random.default_rng(2)
    sequences = rng.normal(size=(4, 8, 5)).astype("float32")
    vectors = rng.normal(size=(4, 5)).astype("float32")  # the pooler's: the sequences are not read
    logits = rng.normal(size=(4, 8, 7)).astype("float32")
    tokens = np.full((4, 8), IGNORED)
    tokens[:, 3:6] = rng.integers(0, 7, (4, 3))
    measures = objective.measures([sequences, vectors, logits], (None, np.zeros((4, 8)), tokens))
    assert set(measures) == set(objective.measured) == {"seq2seq_loss", "similarity_loss", "retrieval_accuracy"}
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_softmax, np.maximum(tokens, 0)[..., None], -1)[..., 0]
    assert measures["seq2seq_loss"] == (pytest.approx(-picked[tokens != IGNORED].mean(), rel=1e-5), 12)
    assert measures["similarity_loss"] == (pytest.approx(softmax_reference(vectors), rel=1e-5), 4)
    assert measures["retrieval_accuracy"] == (retrieval_accuracy(vectors), 4)


def test_a_batch_holds_each_pair_both_ways_as_adjacent_rows():
    objective = SimBERT(seq_len=8, vocab_size=50, cls=2, separator=3)
    sentences = Sentences([np.array([10, 11]), np.array([20]), np.array([30, 31]), np.array([40]), np.array([41])],
                          [[0, 1, 2], [3, 4]])  # fmt: skip
    (token_ids, segment_ids), (_, _, targets) = objective.training_batch(sentences, 4, 0, 0, 0)
    rows = [tuple(row) for row in token_ids.tolist()]
    first = {(2, 10, 11, 3, 20, 3, 0), (2, 20, 3, 10, 11, 3, 0), (2, 10, 11, 3, 30, 31, 3), (2, 30, 31, 3, 10, 11, 3)}
    second = {(2, 40, 3, 41, 3, 0, 0), (2, 41, 3, 40, 3, 0, 0)}
    record = [first if row[:7] in first else second for row in rows]
    assert [row[:7] in record[i] for i, row in enumerate(rows)] == [True] * 4
    assert record[0] is record[1] and record[2] is record[3] and record[0] is not record[2]  # each record once
    for a, b in (rows[:2], rows[2:]):  # the second row of a pair is the first turned round
        assert a != b and set(a[1:]) == set(b[1:])
    with pytest.raises(ValueError, match=r"--batch-size 3: --objective simbert puts each pair in a batch both ways"):
        objective.training_batch(sentences, 3, 0, 0, 0)


@pytest.fixture(scope="module")
def similar(english, tmp_path_factory):
    """Each line of the English text with the next two as its synonyms."""
    lines = [line.strip() for line in english.read_text().splitlines() if len(line.strip()) > 20][:300]
    path = tmp_path_factory.mktemp("simbert") / "similar.jsonl"
    path.write_text("".join(json.dumps({"text": a, "synonyms": [b, c]}) + "\n" for a, b, c in
                            zip(lines, lines[1:], lines[2:])))  # fmt: skip
    return path


def test_validation_holds_each_record_once_in_a_batch():
    objective = SimBERT(seq_len=8, vocab_size=50, cls=2, separator=3)
    sentences = Sentences([np.array([10 + i]) for i in range(6)], [[0, 1], [2, 3], [4, 5]])
    (batch,) = objective.validation_batches(sentences, 8, 0)  # 4 pairs a batch, 3 records: one batch of 3
    (token_ids, _), _ = batch
    assert sorted(map(tuple, token_ids[:, 1:4].tolist())) == sorted(
        [(10, 3, 11), (11, 3, 10), (12, 3, 13), (13, 3, 12), (14, 3, 15), (15, 3, 14)]
    )
    batches = objective.validation_batches(sentences, 4, 0)  # 2 pairs a batch: one batch, the third record left
    assert len(batches) == 1 and len({tuple(row) for row in batches[0][0][0].tolist()}) == 4


def test_trains_a_tiny_bert_and_resumes(similar, tmp_path, monkeypatch):
    # 24 updates, grown at 20: backups at 6, 12, 18 and 20.
    run = dict(model="bert", objective="simbert", config=TINY_BERT, save_every=6, **{**RUN, "batch_size": 8})
    result = kwiden.pretrain(similar, tmp_path / "run", **run)
    losses = [row["valid_loss"] for row in result.metrics]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    for row in result.metrics:  # 4 held-out records: one validation batch, whose loss is its two parts
        assert row["valid_loss"] == pytest.approx(row["valid_seq2seq_loss"] + row["valid_similarity_loss"], rel=1e-5)
        assert row["valid_retrieval_accuracy"] * 8 in range(9)  # of 8 rows
    written = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert written == result.metrics
    resumed = assert_resumes_bit_for_bit(similar, run, result, tmp_path / "killed", monkeypatch)
    assert resumed.updates == 24
    # final/ holds the pooler it trained, and SentenceEncoder pools by it: the vectors of the model's second output
    encoder = kwiden.SentenceEncoder(result.final)
    texts = [json.loads(line)["text"] for line in similar.read_text().splitlines()[:5]]
    token_ids, segment_ids = encoder.tokenizer(texts)
    pooled = np.asarray(result.model([token_ids, segment_ids])[1], "float64")
    assert encoder.pooling == "pooler" and result.model.get_layer("Pooler-Dense").activation.__name__ == "linear"
    np.testing.assert_allclose(encoder.encode(texts), pooled / np.linalg.norm(pooled, axis=1, keepdims=True),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    # log.txt: how many (text, synonym) pairs are longer than --seq-len, counted with the run's vocabulary
    tokenizer = vocabulary.load_tokenizer(tmp_path / "run" / "vocab.txt")
    records = [json.loads(line) for line in similar.read_text().splitlines()]
    pairs = [(r["text"], synonym) for r in records for synonym in r["synonyms"]]
    lengths = [len(ids) for ids in tokenizer.encode_lines([text for pair in pairs for text in pair])[0]]
    cut = sum(a + b + 3 > RUN["seq_len"] for a, b in zip(lengths[::2], lengths[1::2]))
    assert 0 < cut < len(pairs)
    assert (f"pairs (a text and a synonym) longer than --seq-len 24: {cut:,} of {len(pairs):,}, the longer side cut "
            "first\n") in (tmp_path / "run" / "log.txt").read_text()  # fmt: skip


def test_bad_records_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    run = dict(model="bert", objective="simbert", config=TINY_BERT, **RUN)
    for text, message in [
        ('{"synonyms": ["a"]}\n', r"bad\.jsonl, line 1: --objective simbert wants a non-empty text at 'text'"),
        ('{"text": "a", "synonyms": []}\n', r"line 1: .* wants 'synonyms', a list of one or more non-empty texts"),
        ('{"text": "a", "synonyms": "b"}\n', r"line 1: .* wants 'synonyms', a list"),
        ('{"text": "a", "synonyms": ["b"]}\n{"text"\n', r"line 2: not JSON"),
        (
            '{"text": "a", "synonyms": ["b\\udc80"]}\n',
            r"bad\.jsonl, line 1: synonyms\[0\] is not valid Unicode: .*U\+DC80",
        ),
    ]:
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            kwiden.pretrain(bad, tmp_path / f"run{len(list(tmp_path.iterdir()))}", **run)


def test_a_batch_of_one_pair_or_of_a_record_twice_is_refused(similar, tmp_path):
    """One pair a batch: each row's only other row is its partner (loss 0, accuracy 1 whatever the vectors); a
    record twice in a batch: its own negative. Both refused before training, so the corrected command runs in the
    same folder."""
    objective = SimBERT(seq_len=8, vocab_size=50, cls=2, separator=3)
    sentences = Sentences([np.array([10 + i]) for i in range(6)], [[0, 1], [2, 3], [4, 5]])
    with pytest.raises(ValueError, match=r"--batch-size 2: --objective simbert needs 2 pairs a batch or more"):
        objective.training_batch(sentences, 2, 0, 0, 0)
    with pytest.raises(ValueError, match=r"--batch-size 8 holds 4 pairs, .* 3 record\(s\) .* --batch-size 6 or less"):
        objective.training_batch(sentences, 8, 0, 0, 0)
    for update in range(50):  # 3 pairs of 3 records: every record once in every batch
        (token_ids, _), _ = objective.training_batch(sentences, 6, 0, update, 0)
        assert sorted(min(row[1], row[3]) for row in token_ids.tolist()) == [10, 10, 12, 12, 14, 14]
    # Refused or run, whatever the budget: 2 updates and no growth (no second model to build and trace) tell it.
    run = dict(model="bert", objective="simbert", config=TINY_BERT, grow="none", **{**RUN, "budget": 2})
    with pytest.raises(ValueError, match=r"--batch-size 2: --objective simbert needs 2 pairs a batch or more"):
        kwiden.pretrain(similar, tmp_path / "run", **{**run, "batch_size": 2})
    few = tmp_path / "few.jsonl"
    few.write_text("".join(line + "\n" for line in similar.read_text().splitlines()[:9]))  # 5 train, 4 held out
    with pytest.raises(ValueError, match=r"--batch-size 16 holds 8 pairs, .* but 5 record\(s\) are left for training"):
        kwiden.pretrain(few, tmp_path / "run", **{**run, "batch_size": 16})
    assert kwiden.pretrain(few, tmp_path / "run", **{**run, "batch_size": 10}).updates > 0


def test_a_sentence_two_records_share_is_no_negative_of_itself():
    """A corpus of adjacent lines (line i with lines i+1 and i+2 as its synonyms) repeats sentences across records:
    a row whose sentence another row holds again (not its partner) would be pushed away from itself."""
    objective = SimBERT(seq_len=8, vocab_size=50, cls=2, separator=3)
    ids = [np.array([10]), np.array([11]), np.array([11]), np.array([12]), np.array([13]), np.array([14])]
    sentences = Sentences(ids, [[0, 1], [2, 3], [4, 5]])  # records 0 and 1 share the sentence [11]
    (_, _), (_, similar, _) = objective._batch(sentences, [(0, 1), (2, 3), (4, 5)])
    teacher, repeats = similar[:, :6], similar[:, 6:]
    assert not teacher.any() and repeats.tolist() == [[0] * 6, [0, 0, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0], *[[0] * 6] * 3]
    vectors = np.random.default_rng(3).normal(size=(6, 5)).astype("float32")
    vectors[2] = vectors[1]  # one sentence, one vector
    scores = SCALE * cosines_of(vectors)
    scores[np.eye(6, dtype=bool) | (repeats > 0)] = -np.inf  # neither itself nor its repeat
    log_softmax = scores - np.log(np.exp(scores - scores.max(1, keepdims=True)).sum(1, keepdims=True)) - scores.max(
        1, keepdims=True)  # fmt: skip
    expected = -np.mean([log_softmax[i, i ^ 1] for i in range(6)])
    assert float(InBatchSimilarity()(similar, vectors)) == pytest.approx(expected, rel=1e-5)
    assert float(InBatchSimilarity()(np.zeros(6), vectors)) > expected + 1  # unmasked: its repeat wins rows 1 and 2
    assert retrieval_accuracy(vectors, repeats) > retrieval_accuracy(vectors)


def test_a_tie_with_the_partner_counts_against_it():
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # row 0's partner and row 2 tie
    assert retrieval_accuracy(vectors) == 0.0  # row 1 ties too; rows 2 and 3 find others first
