"""What `kwiden.pretrain` refuses, with an error naming the file or flag, before it trains, and what a
failure mid-run leaves: the last backup loadable, no half-written final/."""

import gzip
import json
import os

import keras
import numpy as np
import pytest
from conftest import SMALL_RUN, TINY_BERT, TINY_GPT, TINY_RUN, copied

import kwiden
from kwiden.models.hf import masks_padding
from kwiden.pretraining import outputs


def pretrain(corpus, folder, **changes):
    return kwiden.pretrain(corpus, folder, **{"model": "gpt", "config": TINY_GPT, **TINY_RUN, **changes})


def test_an_empty_corpus_or_one_shorter_than_a_window(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"The corpus \(.*empty\.txt\) holds no text"):
        pretrain(empty, tmp_path / "a")
    short = tmp_path / "short.txt"
    short.write_text("a few words\n")
    with pytest.raises(ValueError, match=r"The corpus holds 12 tokens: too few for a training window of 17 tokens "
                                         r"\(--seq-len 16\) and 4 held out"):  # fmt: skip
        pretrain(short, tmp_path / "b")


def test_a_file_that_is_not_utf8_is_named_with_the_byte_offset(tmp_path):
    latin = tmp_path / "latin.txt"
    latin.write_bytes("ok\n".encode() * 10 + "café".encode("latin-1"))
    with pytest.raises(ValueError, match=r"The corpus file .*latin\.txt is not UTF-8 text: byte offset 33 "):
        pretrain(latin, tmp_path / "a")
    packed = tmp_path / "packed.txt.gz"
    packed.write_bytes(gzip.compress(b"x" * 100 + b"\xff"))
    with pytest.raises(ValueError, match=r"packed\.txt\.gz is not UTF-8 text: byte offset 100 "):
        pretrain(packed, tmp_path / "b")
    fake = tmp_path / "fake.gz"
    fake.write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match=r"The corpus file .*fake\.gz is not a readable gzip file"):
        pretrain(fake, tmp_path / "c")


def test_missing_paths_and_folders_without_text(tmp_path):
    with pytest.raises(ValueError, match=r"The corpus file .*nowhere\.txt does not exist"):
        pretrain(tmp_path / "nowhere.txt", tmp_path / "a")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.md").write_text("not a corpus file")
    with pytest.raises(ValueError, match=r"The corpus folder .*folder holds no \.txt or \.gz file"):
        pretrain(tmp_path / "folder", tmp_path / "b")


def test_a_vocabulary_that_contradicts_the_config(english, tmp_path):
    with pytest.raises(ValueError, match=r"--config says vocab_size 257, but the tokenizer \(bytes\) has 258 tokens"):
        pretrain(english, tmp_path, config={**TINY_GPT, "vocab_size": 257})


def test_a_budget_too_small_for_the_warmup_or_the_growth_points(english, tmp_path):
    with pytest.raises(ValueError, match=r"--budget 12 is too small for --warmup 40: the run makes 16 updates"):
        pretrain(english, tmp_path / "a", warmup=40)
    with pytest.raises(ValueError, match=r"--budget 12 is too small for the growth points: the growth at 0.01"):
        pretrain(english, tmp_path / "b", grow="0.01:k=2")


def test_growth_schedules_that_cannot_reach_the_target(english, tmp_path):
    with pytest.raises(ValueError, match=r"would need a smaller model with hidden_size 16 / 32 = 0.5"):
        pretrain(english, tmp_path / "a", grow="0.5:k=32")
    with pytest.raises(ValueError, match=r"num_hidden_layers 2 / 3 = 0.667"):
        pretrain(english, tmp_path / "b", grow="0.5:depth=3")
    with pytest.raises(ValueError, match=r"hidden_size= sets a size outright; give factors"):
        pretrain(english, tmp_path / "c", grow="0.5:hidden_size=32")
    with pytest.raises(ValueError, match=r"'q=2' is not one of kwiden.grow's arguments"):
        pretrain(english, tmp_path / "d", grow="0.5:q=2")
    with pytest.raises(ValueError, match=r"growth points must be strictly increasing"):
        pretrain(english, tmp_path / "e", grow="0.6:k=2 0.3:depth=2")
    with pytest.raises(ValueError, match=r"fractions of the run's updates, between 0 and 1; got 1.5"):
        pretrain(english, tmp_path / "f", grow="1.5:k=2")
    # Refused before any training, not at the growth.
    with pytest.raises(
        ValueError, match=r"the growth at 0.5 \(k=2, relax_learning_rates=-5\): `relax_learning_rates` must"
    ):
        pretrain(english, tmp_path / "g", grow="0.5:k=2,relax_learning_rates=-5")
    assert not (tmp_path / "g" / "metrics.jsonl").exists()
    with pytest.raises(ValueError, match=r"the growth at 0.5 .*`relax_learning_rates=500` relaxes width-aware"):
        pretrain(english, tmp_path / "h", grow="0.5:k=2,scale_learning_rates=False,relax_learning_rates=500")
    assert not (tmp_path / "h" / "metrics.jsonl").exists()


def test_an_output_folder_of_another_run_is_refused_naming_the_argument(english, tmp_path, finished):
    folder = copied(finished(english, **SMALL_RUN), tmp_path / "run")  # a finished run's folder (one a worker)
    with pytest.raises(ValueError, match=r"holds a run made with --lr 0.003, not 0.001: run the same command"):
        pretrain(english, folder, budget=2, grow="none", lr=1e-3)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "thesis.tex").write_text("mine")
    with pytest.raises(
        ValueError,
        match=r"other holds files kwiden did not write \(thesis\.tex\); kwiden writes a run into an empty or new folder",
    ):
        pretrain(english, tmp_path / "other")
    assert (tmp_path / "other" / "thesis.tex").read_text() == "mine"


def test_options_that_do_not_fit_the_model(english, tmp_path):
    with pytest.raises(
        ValueError,
        match=r"--whole-word-mask is not an option of --objective causal_lm; it is for masked_lm: mask whole words",
    ):
        pretrain(english, tmp_path / "a", whole_word_mask=True)
    with pytest.raises(ValueError, match=r"--seq-len 64 is longer than the config's max_position_embeddings 32"):
        pretrain(english, tmp_path / "b", seq_len=64)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\n")
    with pytest.raises(ValueError, match=r"has no \[MASK\] token, which the masked LM of bert needs"):
        pretrain(english, tmp_path / "c", model="bert", config=TINY_BERT, tokenizer=str(vocab))
    with pytest.raises(ValueError, match=r"Give the target model: --config"):
        pretrain(english, tmp_path / "d", config=None)
    with pytest.raises(ValueError, match=r"--budget must be a whole number of at least 1, got 0"):
        pretrain(english, tmp_path / "e", budget=0)


def test_a_full_disk_mid_run_keeps_the_last_backup_and_writes_no_final(english, tmp_path, monkeypatch):
    real = keras.Model.save
    saves = {"n": 0}

    def full_disk(self, *args, **kwargs):
        saves["n"] += 1
        if saves["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(keras.Model, "save", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        pretrain(english, tmp_path, save_every=3, grow="none")
    assert not (tmp_path / outputs.FINAL).exists()
    state = json.loads((tmp_path / "backup" / "state.json").read_text())
    assert state["update"] == 6 and (tmp_path / "backup" / state["model"]).is_file()
    assert [p.name for p in (tmp_path / "backup").iterdir() if ".kwiden-tmp" in p.name] == []
    monkeypatch.setattr(keras.Model, "save", real)
    result = pretrain(english, tmp_path, save_every=3, grow="none")
    assert result.updates == 12 and (tmp_path / outputs.FINAL / "model.safetensors").is_file()


def test_a_failed_final_leaves_no_half_written_folder(english, tmp_path, monkeypatch):
    from kwiden.text import vocabulary

    def fail(self, folder):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vocabulary.CorpusTokenizer, "save", fail)
    with pytest.raises(OSError, match=r"\[Errno 28\] No space left on device"):
        pretrain(english, tmp_path, budget=2, grow="none")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("final")) == []


def test_a_refused_call_leaves_the_folder_to_the_corrected_one(english, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        pretrain(tmp_path / "nope.txt", tmp_path / "run", budget=2, grow="none")
    with pytest.raises(ValueError, match="vocab_size 257"):
        pretrain(english, tmp_path / "run", budget=2, grow="none", config={**TINY_GPT, "vocab_size": 257})
    result = pretrain(english, tmp_path / "run/", budget=2, grow="none")  # "run/" and "run" are one folder
    assert result.updates == 2
    assert pretrain(english, tmp_path / "run", budget=2, grow="none", verbose=1).updates == 2  # resumed, done


def test_rotary_targets_grow_more_heads_so_that_final_can_say_them(english, tmp_path):
    llama = {**TINY_GPT, "num_key_value_heads": 2, "num_hidden_layers": 3}  # odd: auto widens instead of deepening
    result = pretrain(english, tmp_path / "llama", model="llama", config=llama, budget=6)
    assert "heads ×2 (1 → 2, rotary)" in (tmp_path / "llama" / "log.txt").read_text()
    assert (result.final / "model.safetensors").is_file()
    with pytest.raises(ValueError, match=r"widens rotary heads, .* add heads=count"):
        pretrain(english, tmp_path / "wide", model="llama", config=llama, grow="0.5:k=2")
    even = {**llama, "num_hidden_layers": 2}  # auto deepens: the heads and their frequencies stay as they were
    result = pretrain(english, tmp_path / "deep", model="llama", config=even, budget=6)
    assert "depth ×2" in (tmp_path / "deep" / "log.txt").read_text()
    ids = np.random.default_rng(0).integers(1, 256, (2, 16))
    loaded = kwiden.build_transformer_model(checkpoint_path=result.final)
    np.testing.assert_allclose(
        loaded.predict(ids, verbose=0), result.model.predict(ids, verbose=0), rtol=1e-5, atol=1e-5
    )


def test_tokenizer_files_and_corpora_that_would_mislead(english, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.train_from_iterator(english.read_text().splitlines(), trainers.BpeTrainer(vocab_size=300))
    bpe.enable_truncation(4)
    bpe.enable_padding(pad_id=0)
    bpe.save(str(tmp_path / "tokenizer.json"))
    result = pretrain(english, tmp_path / "bpe", tokenizer=str(tmp_path / "tokenizer.json"), budget=2, grow="none")
    lines = [line for line in english.read_text().splitlines() if line.strip()]
    stream = np.memmap(tmp_path / "bpe" / "tokens" / "ids.bin", "uint16", "r")
    assert len(stream) == sum(len(bpe_ids(tmp_path / "tokenizer.json", line)) for line in lines)  # not cut or padded
    assert not masks_padding(result.model)  # id 0 is a real token
    assert not masks_padding(kwiden.build_transformer_model(checkpoint_path=result.final))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n\t\n")
    with pytest.raises(ValueError, match="holds no text"):
        pretrain(blank, tmp_path / "blank")
    corrupt = tmp_path / "corrupt.gz"
    packed = bytearray(gzip.compress(english.read_bytes()[:5000]))
    packed[40:60] = b"\x00" * 20
    corrupt.write_bytes(bytes(packed))
    with pytest.raises(ValueError, match=r"corrupt\.gz is not (a readable gzip file|UTF-8 text)"):
        pretrain(corrupt, tmp_path / "corrupt")


def bpe_ids(path, line):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer.encode(line, add_special_tokens=False).ids


def test_a_run_inside_its_corpus_folder_does_not_read_itself(english, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text(english.read_text())
    (corpus / ".hidden.txt").write_text("secret")
    pretrain(corpus, corpus / "run", budget=2, grow="none")
    first = json.loads((corpus / "run" / "tokens" / "index.json").read_text())
    assert [name for name, *_ in first["key"]["files"]] == [str((corpus / "a.txt").resolve())]
    pretrain(corpus, corpus / "run", budget=2, grow="none")  # the same run: its log and final/ are not corpus
    assert json.loads((corpus / "run" / "tokens" / "index.json").read_text()) == first


def test_whole_word_masks_of_bytes(english, tmp_path):
    result = pretrain(english, tmp_path, model="bert", config=TINY_BERT, whole_word_mask=True, budget=2, grow="none")
    assert result.updates == 2


def test_a_run_recorded_with_an_option_since_taken_out_resumes_only_where_it_changed_nothing(
    english, tmp_path, finished
):
    copied(finished(english, **SMALL_RUN), tmp_path / "run")  # a finished run's folder (one a worker)
    record = tmp_path / "run" / "run.json"
    recorded = json.loads(record.read_text())
    older = dict(after_growth="continue", learned_growth=0, learned_growth_lr=0.01)  # as an earlier kwiden wrote it
    record.write_text(json.dumps({**recorded, "arguments": {**recorded["arguments"], **older}}))
    assert pretrain(english, tmp_path / "run", budget=2, grow="none").updates == 2  # resumed, done
    assert "learned_growth" not in json.loads(record.read_text())["arguments"]
    record.write_text(json.dumps({**recorded, "arguments": {**recorded["arguments"], **older, "learned_growth": 3}}))
    with pytest.raises(ValueError, match=r"made with --learned-growth 3, an option measured not to pay and taken out"):
        pretrain(english, tmp_path / "run", budget=2, grow="none")


def test_a_resume_may_evaluate_and_back_up_at_other_intervals(english, tmp_path):
    pretrain(english, tmp_path / "run", budget=4, grow="none", eval_every=2)
    again = pretrain(english, tmp_path / "run", budget=4, grow="none", eval_every=1, save_every=2)
    assert again.updates == 4
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["arguments"]
    assert (recorded["eval_every"], recorded["save_every"]) == (1, 2)
    with pytest.raises(ValueError, match=r"holds a run made with --budget 4, not 5"):
        pretrain(english, tmp_path / "run", budget=5, grow="none", eval_every=1)


def test_a_run_resumed_on_other_text_is_refused(english, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text(english.read_text()[:8000])
    pretrain(corpus, tmp_path / "run", budget=2, grow="none")
    index = tmp_path / "run" / "tokens" / "index.json"
    older = json.loads(index.read_text())
    del older["digest"]  # as an older kwiden wrote it: the digest is read from the token file itself
    index.write_text(json.dumps(older))
    assert pretrain(corpus, tmp_path / "run", budget=2, grow="none").updates == 2
    (corpus / "b.txt").write_text("more text, added after the run began\n" * 20)
    with pytest.raises(
        ValueError, match=r"holds a run that began on other text: its corpus gave [\d,]+ tokens then and gives"
    ):
        pretrain(corpus, tmp_path / "run", budget=2, grow="none")
    (corpus / "b.txt").unlink()
    os.utime(corpus / "a.txt", ns=(1, 1))  # a new time, the same text: the same tokens, resumed
    assert pretrain(corpus, tmp_path / "run", budget=2, grow="none").updates == 2
    (corpus / "a.txt").write_text(english.read_text()[1:8001])  # as many bytes, other ones
    with pytest.raises(ValueError, match=r"gives [\d,]+ other tokens now \(a file added, removed or edited\)"):
        pretrain(corpus, tmp_path / "run", budget=2, grow="none")


def test_numbers_of_the_wrong_kind_are_refused_naming_the_flag_and_numpy_numbers_are_taken(english, tmp_path):
    refused = [
        (dict(valid_fraction="0.1"), r"--valid-fraction must be in \(0, 1\), got '0.1'"),
        (dict(valid_fraction=1.0), r"--valid-fraction must be in \(0, 1\), got 1.0"),
        (dict(decay_fraction="0.2"), r"--decay-fraction must be in \(0, 1\], got '0.2'"),
        (dict(seed=-1), r"--seed must be a whole number from 0 to 4294967295, got -1"),
        (dict(seed=1.5), r"--seed must be a whole number from 0 to 4294967295, got 1.5"),
        (dict(seed=None), r"--seed must be a whole number from 0 to 4294967295, got None"),
        (dict(accum_steps=np.float64(2.0)), r"--accum-steps must be a whole number of at least 1"),
    ]
    for arguments, message in refused:
        with pytest.raises(ValueError, match=message):
            pretrain(english, tmp_path / "run", budget=2, grow="none", **arguments)
    numpy_numbers = dict(budget=np.int64(2), lr=np.float64(3e-3), seed=np.int32(0), decay_fraction=np.float32(0.25))
    assert pretrain(english, tmp_path / "run", grow="none", **numpy_numbers).updates == 2  # the folder was left free
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["arguments"]
    assert (recorded["budget"], recorded["lr"], recorded["seed"], recorded["decay_fraction"]) == (2, 3e-3, 0, 0.25)
    assert pretrain(english, tmp_path / "run", budget=2, grow="none", decay_fraction=0.25).updates == 2  # the same run
