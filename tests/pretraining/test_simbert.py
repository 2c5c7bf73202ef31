"""`--objective simbert`: the in-batch similarity loss against a numpy reference, the paired batches, and a tiny
BERT trained end to end (and resumed) on {"text", "synonyms"} lines; its bad input named before training."""

import json

import numpy as np
import pytest
from conftest import TINY_BERT, TINY_RUN

import kwiden
from kwiden.pretraining.simbert import SCALE, InBatchSimilarity, Sentences, SimBERT

RUN = {**TINY_RUN, "seq_len": 24, "build_vocab": 300}


def test_the_in_batch_loss_is_each_rows_partner_by_scaled_cosine():
    rng = np.random.default_rng(0)
    sequence = rng.normal(size=(4, 3, 5)).astype("float32")
    loss = float(InBatchSimilarity()(np.zeros(4), sequence))
    vectors = sequence[:, 0].astype("float64")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = SCALE * vectors @ vectors.T
    np.fill_diagonal(scores, -np.inf)
    log_softmax = scores - np.log(np.exp(scores - scores.max(1, keepdims=True)).sum(1, keepdims=True)) - scores.max(
        1, keepdims=True)  # fmt: skip
    expected = -np.mean([log_softmax[i, i ^ 1] for i in range(4)])
    assert loss == pytest.approx(expected, rel=1e-5)


def test_a_batch_holds_each_pair_both_ways_as_adjacent_rows():
    objective = SimBERT(seq_len=8, vocab_size=50, cls=2, separator=3)
    sentences = Sentences([np.array([10, 11]), np.array([20]), np.array([30, 31])], [[0, 1, 2]])
    (token_ids, segment_ids), (_, targets) = objective.training_batch(sentences, 2, 0, 0, 0)
    a, b = token_ids.tolist()
    assert a[0] == b[0] == 2 and set(map(tuple, (a, b))) <= {
        (2, 10, 11, 3, 20, 3, 0, 0),
        (2, 20, 3, 10, 11, 3, 0, 0),
        (2, 10, 11, 3, 30, 31, 3, 0),
        (2, 30, 31, 3, 10, 11, 3, 0),
    }
    assert a[1:3] == b[4:6] or a[1:3] == b[3:5]  # the second row is the first turned round
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


def test_trains_a_tiny_bert_and_resumes(similar, tmp_path):
    run = dict(model="bert", objective="simbert", config=TINY_BERT, **RUN)
    result = kwiden.pretrain(similar, tmp_path / "run", **run)
    losses = [row["valid_loss"] for row in result.metrics]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    assert kwiden.pretrain(similar, tmp_path / "run", **run).updates == result.updates


def test_bad_records_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    run = dict(model="bert", objective="simbert", config=TINY_BERT, **RUN)
    for text, message in [
        ('{"synonyms": ["a"]}\n', r"bad\.jsonl, line 1: --objective simbert wants a non-empty text at 'text'"),
        ('{"text": "a", "synonyms": []}\n', r"line 1: .* wants 'synonyms', a list of one or more non-empty texts"),
        ('{"text": "a", "synonyms": "b"}\n', r"line 1: .* wants 'synonyms', a list"),
        ('{"text": "a", "synonyms": ["b"]}\n{"text"\n', r"line 2: not JSON"),
    ]:
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            kwiden.pretrain(bad, tmp_path / f"run{len(list(tmp_path.iterdir()))}", **run)
