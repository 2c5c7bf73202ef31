"""The pieces under `kwiden.pretrain`: tokenizers, the token file, masking, the growth spec."""

import hashlib
import json

import numpy as np
import pytest
from conftest import TINY_GPT, TINY_RUN, chinese_lines

from kwiden.pretraining import objectives
from kwiden.text import corpus, tokens, vocabulary


def test_the_byte_tokenizer_is_the_shipped_corpus_encoding_and_a_real_tokenizer_json(tmp_path):
    text = "Hello, 世界!\n\tend"
    byte_tokenizer = vocabulary.byte_tokenizer()
    ids, _ = byte_tokenizer.encode_lines([text])
    np.testing.assert_array_equal(ids[0], corpus.encode(text))
    through_tokenizers = byte_tokenizer.tokenizer.encode(text, add_special_tokens=False).ids
    assert through_tokenizers == list(corpus.encode(text))
    assert (byte_tokenizer.vocab_size, byte_tokenizer.pad, byte_tokenizer.mask) == (258, 0, 257)
    saved = byte_tokenizer.save(tmp_path)
    again = vocabulary.load_tokenizer(str(saved))
    assert again.kind == "bytes" and again.tokenizer.decode(through_tokenizers) == text  # read back as bytes


def test_a_vocabulary_built_on_chinese_splits_every_character(tmp_path):
    lines = chinese_lines()
    built = vocabulary.build_vocabulary(iter(lines), 400, tmp_path)
    words = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert words[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(words) <= 400
    assert (built.pad, built.cls, built.separator, built.mask) == (0, 2, 3, 4)
    assert not any(len(w) > 1 and "\u4e00" <= w[0] <= "\u9fff" for w in words)  # no CJK word pieces
    ids, _ = built.encode_lines(["花呗逾期"])
    assert [words[i] for i in ids[0]] == ["花", "呗", "逾", "期"]
    with pytest.raises(ValueError, match=r"--build-vocab 3 is too small"):
        vocabulary.build_vocabulary(iter(lines), 3, tmp_path)
    with pytest.raises(ValueError, match=r"--build-vocab 400: the corpus gave the vocabulary no token beside"):
        vocabulary.build_vocabulary(iter(["", "   "]), 400, tmp_path)


def test_whole_words_are_masked_whole(tmp_path):
    path = tmp_path / "zh.txt"
    path.write_text("\n".join(chinese_lines()), encoding="utf-8")
    built = vocabulary.build_vocabulary(iter(chinese_lines()), 400, tmp_path)
    token_file = tokens.tokenized(path, built, tmp_path / "run", whole_words=True, verbose=False)
    starts = np.asarray(token_file.word_starts, bool)
    assert 0.3 < starts.mean() < 0.95  # jieba joins characters into words, and separators start words
    objective = objectives.MaskedLM(32, built.vocab_size, built.mask, built.cls,
                                     built.separator, whole_words=True)  # fmt: skip
    train = objectives.Split(token_file, 0, len(token_file))
    (inputs, segments), (_, targets) = objectives.training_batch(objective, train, 64, 0, 0, 0)
    window = objective.window
    starts_of = np.stack(
        [starts[s : s + window] for s in np.random.default_rng([0, 0, 0]).integers(0, len(train) - window + 1, 64)]
    )
    masked = targets[:, 1:-1] != objectives.IGNORED
    word = np.cumsum(starts_of | (np.arange(window) == 0), axis=1)
    for row in range(64):  # every word is masked whole or not at all
        for w in np.unique(word[row]):
            assert len(set(masked[row][word[row] == w])) == 1
    assert (inputs[:, 0] == built.cls).all() and (inputs[:, -1] == built.separator).all()


def test_masking_is_bert_s_15_percent_80_10_10():
    stream = np.random.default_rng(0).integers(5, 1000, 200_000)

    class Stream:
        ids, word_starts = stream, None

        def __len__(self):
            return len(stream)

    objective = objectives.MaskedLM(128, 1000, mask=4)
    (inputs, segments), (_, targets) = objectives.training_batch(objective, Stream(), 512, 0, 3, 0)
    masked = targets != objectives.IGNORED
    assert masked.mean() == pytest.approx(0.15, abs=0.01)
    original = np.where(masked, targets, inputs)
    assert (inputs[masked] == 4).mean() == pytest.approx(0.8, abs=0.02)
    kept = inputs[masked] == original[masked]
    assert kept.mean() == pytest.approx(0.1, abs=0.02)  # (a random token is the original one time in 1000 more)
    assert (segments == 0).all() and (inputs[~masked] == original[~masked]).all()
    again = objectives.training_batch(objective, Stream(), 512, 0, 3, 0)
    np.testing.assert_array_equal(again[0][0], inputs)  # drawn from (seed, update, micro-step) alone


class NextButOne(objectives.CausalLM):
    """A test's own objective: the token after next, from a window two longer than the inputs."""

    name = "next_but_one"

    @property
    def window(self):
        return self.seq_len + 2

    def batch(self, tokens, starts, rng):
        windows = self.windows(tokens, starts)
        return windows[:, :-2], windows[:, 2:]


def test_a_family_and_an_objective_registered_outside_the_package_pretrain(english, tmp_path, monkeypatch):
    import dataclasses

    import kwiden
    from kwiden.models import family as families
    from kwiden.models import get_family, register_family

    # The registries as they were once this test ends.
    monkeypatch.setattr(objectives, "OBJECTIVES", dict(objectives.OBJECTIVES))
    monkeypatch.setattr(families, "FAMILIES", families.FAMILIES.copy())
    assert objectives.register_objective(NextButOne) is NextButOne
    register_family(dataclasses.replace(get_family("gpt"), name="skip-gpt", pretrains_with="next_but_one"))
    result = kwiden.pretrain(english, tmp_path / "run", model="skip-gpt", config=TINY_GPT, grow="none",
                             **{**TINY_RUN, "budget": 4})  # fmt: skip
    assert result.updates == 4 and "objective: next_but_one" in (tmp_path / "run" / "log.txt").read_text()
    assert result.model.name == "skip-gpt"
    seen = {}
    real = NextButOne.batch

    def batch(self, tokens, starts, rng):
        seen["batch"] = real(self, tokens, starts, rng)
        return seen["batch"]

    NextButOne.batch = batch
    try:  # the targets are the inputs two tokens on
        kwiden.pretrain(english, tmp_path / "again", model="skip-gpt", config=TINY_GPT, grow="none",
                        **{**TINY_RUN, "budget": 1})  # fmt: skip
    finally:
        NextButOne.batch = real
    inputs, targets = seen["batch"]
    np.testing.assert_array_equal(inputs[:, 2:], targets[:, :-2])
    # --objective picks another for a family; a family with none must be given one
    chosen = kwiden.pretrain(english, tmp_path / "causal", model="skip-gpt", objective="causal_lm", config=TINY_GPT,
                             grow="none", **{**TINY_RUN, "budget": 1})  # fmt: skip
    assert "objective: causal_lm" in (tmp_path / "causal" / "log.txt").read_text() and chosen.updates == 1
    register_family(dataclasses.replace(get_family("gpt"), name="plain-gpt", pretrains_with=None))
    with pytest.raises(
        ValueError, match=r"--model plain-gpt: the family names no pretraining objective; give --objective"
    ):
        kwiden.pretrain(english, tmp_path / "none", model="plain-gpt", config=TINY_GPT, **TINY_RUN)
    with pytest.raises(
        ValueError, match=r"--objective nope: pretraining knows causal_lm, masked_lm, next_but_one, seq2seq, simbert"
    ):
        kwiden.pretrain(english, tmp_path / "nope", objective="nope", config=TINY_GPT, **TINY_RUN)
    with pytest.raises(ValueError, match=r"--model nope: the families kwiden knows are bert, gpt"):
        kwiden.pretrain(english, tmp_path / "nofamily", model="nope", config=TINY_GPT, **TINY_RUN)


class Records:
    """What a records objective reads: one padded row of ids a line (a length and a digest, as a resume compares)."""

    def __init__(self, rows):
        self.rows = rows
        self.digest = hashlib.sha256(rows.tobytes()).hexdigest()

    def __len__(self):
        return int(self.rows.size)


class LineByLine(objectives.CausalLM):
    """A test's own objective on records, not the token stream: each example one line of the corpus."""

    name = "line_by_line"

    def read(self, corpus, tokenizer, folder, verbose):
        lines = [line for path in tokens.corpus_files(corpus, folder) for line in tokens.lines_of(path) if line.strip()]
        ids, _ = tokenizer.encode_lines(lines)
        rows = np.zeros((len(lines), self.seq_len + 1), np.int32)
        for row, line_ids in zip(rows, ids):
            row[: min(len(line_ids), len(row))] = line_ids[: len(row)]
        return Records(rows)

    def split(self, data, valid_fraction):
        held = max(4, int(len(data.rows) * valid_fraction))
        return Records(data.rows[:-held]), Records(data.rows[-held:])

    def training_batch(self, train, batch_size, seed, update, micro_step):
        rows = train.rows[np.random.default_rng([seed, update, micro_step]).integers(0, len(train.rows), batch_size)]
        return rows[:, :-1], rows[:, 1:]

    def validation_batches(self, valid, batch_size, seed):
        rows = np.resize(valid.rows, (batch_size, valid.rows.shape[1]))
        return [(rows[:, :-1], rows[:, 1:])]


def test_an_objective_reads_its_own_data_records_not_the_token_stream(english, tmp_path, monkeypatch):
    import kwiden

    monkeypatch.setattr(objectives, "OBJECTIVES", dict(objectives.OBJECTIVES))
    objectives.register_objective(LineByLine)
    result = kwiden.pretrain(english, tmp_path / "run", objective="line_by_line", config=TINY_GPT, grow="none",
                             **{**TINY_RUN, "budget": 3})  # fmt: skip
    assert result.updates == 3 and "objective: line_by_line" in (tmp_path / "run" / "log.txt").read_text()
    lines = [line for line in english.read_text().splitlines() if line.strip()]
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["tokens"]
    assert recorded["count"] == len(lines) * (TINY_RUN["seq_len"] + 1)  # the records, as a resume compares them
    assert not (tmp_path / "run" / "tokens").exists()  # no token stream was made
    assert kwiden.pretrain(english, tmp_path / "run", objective="line_by_line", config=TINY_GPT, grow="none",
                           **{**TINY_RUN, "budget": 3}).updates == 3  # resumed  # fmt: skip


def test_a_vocabulary_keeps_every_character_of_a_chinese_corpus_its_size_allows(tmp_path):
    characters = [chr(0x4E00 + i) for i in range(1500)]  # more than the trainer's default alphabet of 1,000
    lines = ["".join(characters[i : i + 30]) for i in range(0, 1500, 30)]
    vocabulary.build_vocabulary(iter(lines), 2000, tmp_path)
    words = set((tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert set(characters) <= words


def test_a_wordpiece_tokenizer_json_is_saved_with_its_vocab_txt(tmp_path):
    built = vocabulary.build_vocabulary(iter(chinese_lines()), 400, tmp_path / "built")
    built.tokenizer.save(str(tmp_path / "tokenizer.json"))
    read = vocabulary.load_tokenizer(tmp_path / "tokenizer.json")
    assert read.kind == "json"
    read.save(tmp_path / "final")
    assert (tmp_path / "final" / "vocab.txt").read_text("utf-8") == (tmp_path / "built" / "vocab.txt").read_text(
        "utf-8"
    )
    assert (tmp_path / "final" / "tokenizer.json").is_file()


def test_what_is_registered_does_not_depend_on_what_was_imported():
    import subprocess
    import sys

    listed = subprocess.run(
        [sys.executable, "-c", "from kwiden.pretraining import objectives as o; print(*sorted(o.registered()))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert listed.stdout.split() == ["causal_lm", "masked_lm", "seq2seq", "simbert"]


def test_an_objective_that_is_not_one_is_refused_naming_what_register_objective_takes():
    with pytest.raises(ValueError, match=r"register_objective takes an Objective subclass with a `name`, got 3"):
        objectives.register_objective(3)
