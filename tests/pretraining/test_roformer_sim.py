"""RoFormer-Sim's additions to `--objective simbert` (and `seq2seq`): `--corrupt`'s whole-word-masked sources,
`--teacher`'s distillation and `--scale`, end to end on a tiny BERT that resumes, and their bad values named before
training."""

import dataclasses
import json
import re
import shutil
import types

import jieba
import numpy as np
import pytest
from conftest import TINY_BERT, TINY_RUN, after_update, assert_same_final, chinese_lines, kill

import kwiden
from kwiden.models import get_family
from kwiden.pretraining.objectives.seq2seq import Rows, Seq2Seq, source_starts
from kwiden.pretraining.objectives.simbert import SimBERT
from kwiden.pretraining.options import PretrainOptions
from kwiden.text import vocabulary

RUN = {**TINY_RUN, "seq_len": 24, "batch_size": 8}
MASK = 4


def synthetic_rows(count=2000, seed=0):
    """Sources of 100 tokens (ids 10–999) in words of 1–3 tokens, targets of 20, as `Rows` with their word starts."""
    rng = np.random.default_rng(seed)
    sources = [rng.integers(10, 1000, 100) for _ in range(count)]
    targets = [rng.integers(10, 1000, 20) for _ in range(count)]
    starts = []
    for _ in range(count):
        lengths = rng.integers(1, 4, 100)
        starts.append(np.isin(np.arange(100), np.cumsum(lengths) - lengths))
    objective = Seq2Seq(seq_len=128, vocab_size=1000, cls=2, separator=3, mask=MASK)
    token_ids, segment_ids, _ = objective.encoded(sources, targets)
    return Rows(token_ids, segment_ids, 0, source_starts(starts, segment_ids))


def test_corruption_masks_a_share_of_the_sources_whole_words_80_10_10_and_no_target():
    rows = synthetic_rows()
    clean = Seq2Seq(128, 1000, 2, 3, MASK).training_batch(rows, 2000, 0, 5, 0)
    objective = Seq2Seq(128, 1000, 2, 3, MASK, corrupt=0.3)
    (inputs, segments), (_, targets) = objective.training_batch(rows, 2000, 0, 5, 0)
    (original, clean_segments), (_, clean_targets) = clean  # the same rows, drawn from the same seed
    np.testing.assert_array_equal(targets, clean_targets)
    np.testing.assert_array_equal(segments, clean_segments)
    np.testing.assert_array_equal(inputs[segments == 1], original[segments == 1])  # the targets' tokens
    assert (inputs[:, [0, 101]] == [2, 3]).all()  # [CLS] and the source's [SEP]
    changed = inputs != original
    assert changed.any(1).mean() == pytest.approx(0.3, abs=0.03)  # of 50 words a source, one at least is changed
    # Each word of a corrupted source: all [MASK], all random (a random id may hit the original: 1 in 999), or kept.
    row_starts = rows.word_starts[np.random.default_rng([0, 5, 0]).integers(0, 2000, 2000)]
    words = masked = randomised = 0
    for row in np.flatnonzero(changed.any(1)):
        word = np.cumsum(row_starts[row, 1:101])
        for w in range(1, word[-1] + 1):
            tokens = inputs[row, 1:101][word == w]
            is_mask, is_changed = tokens == MASK, tokens != original[row, 1:101][word == w]
            assert is_mask.all() or not is_mask.any()  # whole words
            words += 1
            masked += is_mask.all()
            randomised += is_changed.any() and not is_mask.any()
    assert masked / words == pytest.approx(0.15 * 0.8, abs=0.01)
    assert randomised / words == pytest.approx(0.15 * 0.1, abs=0.004)
    again = objective.training_batch(rows, 2000, 0, 5, 0)  # seeded: a resume draws the same masks
    np.testing.assert_array_equal(again[0][0], inputs)


@pytest.fixture(scope="module")
def chinese_pairs(tmp_path_factory):
    lines = [line for line in dict.fromkeys(chinese_lines()) if 8 <= len(line) <= 30]
    folder = tmp_path_factory.mktemp("zh-pairs")
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps({"text": a, "synonyms": [b]}, ensure_ascii=False) + "\n"
                            for a, b in zip(lines, lines[1:])), encoding="utf-8")  # fmt: skip
    return path, vocabulary.build_vocabulary(iter(lines), 400, folder)


def test_chinese_sources_are_masked_by_jieba_words_whole(chinese_pairs, tmp_path):
    path, tokenizer = chinese_pairs
    objective = SimBERT(64, tokenizer.vocab_size, tokenizer.cls, tokenizer.separator, tokenizer.mask, corrupt=1.0)
    data = objective.read(path, tokenizer, tmp_path, verbose=0)
    single = [i for i, text in enumerate(data.texts) if len(data.ids[i]) == len(text)]  # a token a character
    assert len(single) > 20
    for i in single:  # the word starts are jieba's
        starts = np.cumsum([0] + [len(word) for word in jieba.lcut(data.texts[i])])[:-1]
        assert np.flatnonzero(data.starts[i]).tolist() == starts.tolist()
    (inputs, segments), (_, _, targets) = objective.training_batch(data, 64, 0, 7, 0)
    plain = SimBERT(64, tokenizer.vocab_size, tokenizer.cls, tokenizer.separator)
    (original, _), (_, _, clean_targets) = plain.training_batch(data, 64, 0, 7, 0)
    np.testing.assert_array_equal(targets, clean_targets)
    np.testing.assert_array_equal(inputs[segments == 1], original[segments == 1])
    masked_words = 0
    for row in range(64):
        end = np.argmax(segments[row] == 1) - 1
        source = [i for i in single if np.array_equal(data.ids[i][: end - 1], original[row, 1:end])]
        if not source:
            continue
        starts = source_starts([data.starts[source[0]]], segments[row : row + 1])[0, 1:end]
        word = np.cumsum(starts | (np.arange(end - 1) == 0))
        for w in np.unique(word):
            is_mask = inputs[row, 1:end][word == w] == tokenizer.mask
            assert is_mask.all() or not is_mask.any()
            masked_words += is_mask.all() and (word == w).sum() > 1
    assert masked_words > 0  # words of several characters, masked whole


@pytest.fixture(scope="module")
def similar(english, tmp_path_factory):
    """Each line of the English text with the next two as its synonyms, a vocabulary and a tiny teacher of it."""
    lines = [line.strip() for line in english.read_text().splitlines() if len(line.strip()) > 20][:300]
    folder = tmp_path_factory.mktemp("teacher")
    path = folder / "similar.jsonl"
    path.write_text("".join(json.dumps({"text": a, "synonyms": [b, c]}) + "\n" for a, b, c in
                            zip(lines, lines[1:], lines[2:])))  # fmt: skip
    (folder / "vocabulary").mkdir()
    words = vocabulary.build_vocabulary(iter(lines), 300, folder / "vocabulary")
    teacher = folder / "bert"
    model = kwiden.build_transformer_model({**TINY_BERT, "vocab_size": words.vocab_size, "hidden_size": 8})
    kwiden.save_checkpoint(model, teacher)
    shutil.copy(folder / "vocabulary" / "vocab.txt", teacher / "vocab.txt")
    return path, folder / "vocabulary" / "vocab.txt", teacher


def test_a_batch_carries_the_teachers_cosines_of_the_clean_sources(similar, tmp_path):
    path, words, teacher = similar
    tokenizer = vocabulary.load_tokenizer(words)
    shared = PretrainOptions.checked(config=TINY_BERT, seq_len=24)
    own = SimBERT.options(dict(teacher=str(teacher), corrupt=1.0))
    options = types.SimpleNamespace(**dataclasses.asdict(shared), **dataclasses.asdict(own))
    objective = SimBERT.made_for(tokenizer, get_family("bert"), options)
    assert (objective.distill_weight, objective.scale, objective.corrupt) == (100.0, 30.0, 1.0)
    data = objective.read(path, tokenizer, tmp_path, verbose=0)
    (_, _), (_, cosines, _) = objective.validation_batches(data, 8, 0)[0]
    texts = [data.texts[i] for group in data.groups[:4] for i in group[:2]]  # each record's text and first synonym
    vectors = kwiden.SentenceEncoder(teacher, maxlen=24).encode(texts)
    np.testing.assert_allclose(cosines[:, :8], vectors @ vectors.T, atol=1e-6)  # then the repeated sentences
    (inputs, _), (_, trained, _) = objective.training_batch(data, 8, 0, 3, 0)
    assert (inputs == tokenizer.mask).any() and trained.shape == (8, 16)  # corrupted rows, the clean texts' cosines


def test_a_run_with_a_teacher_and_corruption_trains_and_resumes_bit_for_bit(similar, tmp_path, monkeypatch):
    path, words, teacher = similar
    teacher = shutil.copytree(teacher, tmp_path / "teacher")
    run = dict(model="bert", objective="simbert", config=TINY_BERT, tokenizer=str(words), teacher=str(teacher),
               corrupt=0.5, scale=20.0, **RUN)  # fmt: skip
    result = kwiden.pretrain(path, tmp_path / "whole", **run)
    for row in result.metrics:  # one validation batch: the loss is its three parts
        parts = row["valid_seq2seq_loss"] + row["valid_similarity_loss"] + 100 * row["valid_distill_loss"]
        assert row["valid_loss"] == pytest.approx(parts, rel=1e-5)
    assert result.metrics[-1]["valid_loss"] < result.metrics[0]["valid_loss"]
    recorded = json.loads((tmp_path / "whole" / "run.json").read_text())["arguments"]
    assert (recorded["teacher"], recorded["distill_weight"], recorded["corrupt"], recorded["scale"]) == (
        str(teacher.resolve()), 100.0, 0.5, 20.0)  # fmt: skip
    # Killed at update 3, resumed from the backup at 2 (its optimizer state, data position, corruption's masks and
    # Dropout's generators): the uninterrupted run's rows, and bit for bit its final/.
    after_update(monkeypatch, 3, kill)
    with pytest.raises(SystemExit, match="^killed$"):
        kwiden.pretrain(path, tmp_path / "resumed", **{**run, "save_every": 2})
    monkeypatch.undo()
    resumed = kwiden.pretrain(path, tmp_path / "resumed", **{**run, "save_every": 2})
    assert "resuming from the backup at update 2" in (tmp_path / "resumed" / "log.txt").read_text()
    assert [{k: v for k, v in row.items() if k != "seconds"} for row in resumed.metrics] == [
        {k: v for k, v in row.items() if k != "seconds"} for row in result.metrics
    ]
    assert_same_final(result.final, resumed.final)
    with pytest.raises(
        ValueError, match=r"holds a run made with --distill-weight 100.0, not None: run the same command"
    ):
        kwiden.pretrain(path, tmp_path / "resumed", **{**run, "teacher": None})
    with (teacher / "config.json").open("a") as file:
        file.write("\n")
    with pytest.raises(ValueError, match=rf"--teacher {teacher} is not the folder this run began with \(config\.json "
                                         r"changed since\): restore it, or give another --output-dir"):  # fmt: skip
        kwiden.pretrain(path, tmp_path / "resumed", **run)


def test_bad_options_are_named_before_training(similar, tmp_path):
    path, words, teacher = similar

    def pretrain(**changes):
        arguments = dict(model="bert", objective="simbert", config=TINY_BERT, tokenizer=str(words), **RUN)
        return kwiden.pretrain(path, tmp_path / f"run{len(list(tmp_path.iterdir()))}", **{**arguments, **changes})

    other = tmp_path / "other"
    shutil.copytree(teacher, other)
    vocab = (other / "vocab.txt").read_text().splitlines()
    for changes, message in [
        (dict(scale=0), r"--scale must be a positive number, got 0\."),
        (dict(scale=float("nan")), r"--scale must be a positive number, got nan\."),
        (dict(corrupt=1.5), r"--corrupt must be in \[0, 1\], got 1\.5\."),
        (dict(corrupt=-0.1), r"--corrupt must be in \[0, 1\], got -0\.1\."),
        (dict(teacher=str(teacher), distill_weight=-1), r"--distill-weight must be a finite number of at least 0, got -1\."),
        (dict(teacher=str(teacher), distill_weight=float("inf")), r"--distill-weight must be a finite number of at least 0"),
        (dict(distill_weight=1.0), r"--distill-weight weighs the distillation from a --teacher: give --teacher CHECKPOINT\."),
        (dict(teacher=str(tmp_path / "nope")), r"--teacher .*nope does not exist: give a checkpoint folder"),
        (dict(objective=None, scale=20.0), r"--scale is not an option of --objective masked_lm; it is for simbert: the cosines' scale in the in-batch softmax\."),
        (dict(objective="seq2seq", teacher=str(teacher)), r"--teacher is not an option of --objective seq2seq; it is for simbert: distil"),
        (dict(objective=None, corrupt=0.5), r"--corrupt is not an option of --objective masked_lm; it is for seq2seq, simbert: the share"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            pretrain(**changes)
    (other / "vocab.txt").write_text("\n".join([*vocab[:10], vocab[11], vocab[10], *vocab[12:]]) + "\n")
    differ = re.escape(f"300 tokens) (token 10 is {vocab[11]!r} there, {vocab[10]!r} here). The student learns the "
                       "teacher's cosines of the same texts: give a teacher of the run's vocabulary.")  # fmt: skip
    with pytest.raises(
        ValueError, match=rf"--teacher {other}: its vocabulary \(300 tokens\) is not the run's \(.*{differ}"
    ):
        pretrain(teacher=str(other))
    (other / "vocab.txt").write_text("\n".join(vocab[:-1]) + "\n")
    with pytest.raises(ValueError, match=r"its vocabulary \(299 tokens\) is not the run's \(.*, 300 tokens\)\. The"):
        pretrain(teacher=str(other))
    (other / "vocab.txt").unlink()
    with pytest.raises(ValueError, match=rf"--teacher {other} has no vocab\.txt: a teacher is a BERT or RoFormer"):
        pretrain(teacher=str(other))
    gpt = tmp_path / "gpt"  # a decoder of the run's vocabulary: no sentence vector to learn from
    kwiden.save_checkpoint(kwiden.build_transformer_model({**TINY_BERT, "vocab_size": len(vocab)}, model="gpt"), gpt)
    shutil.copy(words, gpt / "vocab.txt")
    with pytest.raises(ValueError, match=rf"--teacher {gpt}: SentenceEncoder encodes with a BERT or RoFormer .* GPT"):
        pretrain(teacher=str(gpt))
    longer = {**TINY_BERT, "max_position_embeddings": 64}  # the student reads 40 positions; the teacher 32
    with pytest.raises(
        ValueError, match=rf"--teacher {teacher}: its model reads 32 positions, fewer than --seq-len 40"
    ):
        pretrain(teacher=str(teacher), config=longer, seq_len=40)
    short = shutil.copytree(teacher, tmp_path / "short")
    (short / "generation_config.json").write_text('{"max_length": 20}')  # trained on 20 positions of its 32
    with pytest.raises(ValueError, match=rf"--teacher {short} cannot read --seq-len 24 tokens \(maxlen=24: the model "
                                         r"was trained on 20 positions"):  # fmt: skip
        pretrain(teacher=str(short))
