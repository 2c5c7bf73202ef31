"""`--objective seq2seq`: UniLM on {"source", "target"} lines, end to end through `kwiden.pretrain` on a tiny BERT
and RoFormer, its batches as UniLM trains, and its bad input named before training."""

import json

import numpy as np
import pytest
from conftest import TINY_BERT, TINY_RUN, assert_resumes_bit_for_bit

import kwiden
from kwiden.pretraining import objectives
from kwiden.pretraining.objectives.seq2seq import Seq2Seq
from kwiden.text import vocabulary

RUN = {**TINY_RUN, "seq_len": 24, "build_vocab": 300}


@pytest.fixture(scope="module")
def pairs(english, tmp_path_factory):
    """Each line of the English text and the next, as a source and its target."""
    lines = [line.strip() for line in english.read_text().splitlines() if len(line.strip()) > 20][:300]
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text("".join(json.dumps({"source": a, "target": b}) + "\n" for a, b in zip(lines, lines[1:])))
    return path


def test_a_batch_predicts_each_next_token_of_the_target_alone():
    objective = Seq2Seq(seq_len=9, vocab_size=50, cls=2, separator=3)
    token_ids, segment_ids, cut = objective.encoded([[10, 11, 12, 13, 14]], [[20, 21, 22, 23]])
    assert cut == 1  # 5 + 4 + 3 > 9: the longer side (the source) cut first, then they take turns
    assert token_ids.tolist() == [[2, 10, 11, 12, 3, 20, 21, 22, 3]]
    assert segment_ids.tolist() == [[0, 0, 0, 0, 0, 1, 1, 1, 1]]
    (inputs, segments), (none, targets) = objective.examples(token_ids, segment_ids)
    ignored = objectives.IGNORED
    assert none is None and targets.tolist() == [[ignored] * 4 + [20, 21, 22, 3, ignored]]


@pytest.mark.parametrize("family, corrupt", [("bert", 0.0), ("roformer", 0.5)])
def test_pretrains_a_unilm_and_resumes(pairs, tmp_path, monkeypatch, family, corrupt):
    # --corrupt 0.5: RoFormer-Sim's half. Backups every 6 updates.
    run = dict(model=family, objective="seq2seq", config=TINY_BERT, corrupt=corrupt, save_every=6, **RUN)
    result = kwiden.pretrain(pairs, tmp_path / "run", **run)
    assert result.updates > RUN["budget"] and result.growths  # grown on the way, as any run
    losses = [row["valid_loss"] for row in result.metrics]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "objective: seq2seq" in log
    tokenizer = vocabulary.load_tokenizer(tmp_path / "run" / "vocab.txt")  # the pairs cut, counted with its words
    records = [json.loads(line) for line in pairs.read_text().splitlines()]
    sources, targets = (tokenizer.encode_lines([r[side] for r in records])[0] for side in ("source", "target"))
    cut = sum(len(a) + len(b) + 3 > RUN["seq_len"] for a, b in zip(sources, targets))
    assert 0 < cut < len(records)
    assert f"pairs longer than --seq-len 24: {cut:,} of {len(records):,}, the longer side cut first\n" in log
    assert_resumes_bit_for_bit(pairs, run, result, tmp_path / "killed", monkeypatch)


def test_bad_input_is_named_before_training(pairs, tmp_path):
    def pretrain(corpus, **changes):
        arguments = dict(model="bert", objective="seq2seq", config=TINY_BERT, **RUN)
        return kwiden.pretrain(corpus, tmp_path / f"run{len(list(tmp_path.iterdir()))}", **{**arguments, **changes})

    bad = tmp_path / "bad.jsonl"
    for text, message in [
        ('{"source": "a b"}\n', r"bad\.jsonl, line 1: --objective seq2seq wants a non-empty text at each of 'source', "
                                r"'target'"),
        ('{"source": "a", "target": "b"}\nnot json\n', r"bad\.jsonl, line 2: not JSON"),
        ('{"source": "a", "target": "  "}\n', r"line 1: .* wants a non-empty text"),
    ]:  # fmt: skip
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            pretrain(bad)
    bad.write_text("\n\n")
    with pytest.raises(ValueError, match=r"--build-vocab 300: the corpus gave the vocabulary no token beside the spec"):
        pretrain(bad)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(token + "\n" for token in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]))
    with pytest.raises(ValueError, match=r"the corpus holds no JSON lines"):
        pretrain(bad, build_vocab=None, tokenizer=str(vocab))
    with pytest.raises(ValueError, match=r"--objective seq2seq trains a UniLM \(--model bert or roformer\), not gpt"):
        pretrain(pairs, model="gpt")
    with pytest.raises(ValueError, match=r"--objective seq2seq needs a tokenizer with \[CLS\] and \[SEP\]"):
        pretrain(pairs, build_vocab=None)  # bytes
