"""Generation from texts and checkpoint folders: `kwiden.generate`,
`kwiden.similar`, and the `kwiden generate` / `kwiden similar` commands."""

import json

import numpy as np
import pytest

import kwiden
from kwiden.cli import main
from kwiden.generation import Search, generate_ids, load_generator
from kwiden.testing import randomize_weights, tiny_config
from kwiden.text.vocabulary import byte_tokenizer, load_tokenizer

CHINESE = list("床前明月光疑是地上霜举头望低思故乡")
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHINESE]


@pytest.fixture(scope="module")
def gpt_folder(tmp_path_factory):
    return _gpt_folder(tmp_path_factory.mktemp("gpt"))


@pytest.fixture(scope="module")
def unilm_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("unilm")
    bert = kwiden.build_transformer_model(tiny_config(vocab_size=len(VOCABULARY)), with_mlm=True, unilm=True)
    kwiden.save_checkpoint(randomize_weights(bert, seed=2, std=0.3), folder)
    (folder / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n", "utf-8")
    return folder


# Each folder loaded once for the module: the tests that only generate from its model share it, and with it its
# compiled decoder (a trace a search and shape, not one a test). Those that test loading a folder still load it.
@pytest.fixture(scope="module")
def gpt(gpt_folder):
    return kwiden.Generator(gpt_folder)


@pytest.fixture(scope="module")
def unilm(unilm_folder):
    return kwiden.Generator(unilm_folder)


@pytest.fixture(scope="module")
def _loads(gpt, unilm):
    return {str(gpt.checkpoint): (gpt.model, gpt.tokenizer), str(unilm.checkpoint): (unilm.model, unilm.tokenizer)}


@pytest.fixture
def shared_loads(_loads, monkeypatch):
    """`kwiden.similar` reads its folder again at each call (the API's and the command's): here a folder's model
    is built once, by `load_generator`, and only read by each call after."""
    from kwiden.similarity import similar

    def loaded(checkpoint):
        if str(checkpoint) not in _loads:
            _loads[str(checkpoint)] = load_generator(checkpoint)
        return _loads[str(checkpoint)]

    monkeypatch.setattr(similar, "load_generator", loaded)


def test_a_decoder_continues_texts_as_its_ids_say(gpt_folder, gpt):
    model, tokenizer = gpt.model, gpt.tokenizer  # load_generator(gpt_folder)'s
    texts = kwiden.generate(model, tokenizer, ["ab", "xyz"], 5, greedy=True)
    ids = generate_ids(model, [[98, 99], [121, 122, 123]], 5, Search(greedy=True), banned=[0, 257])
    assert texts == [[bytes(i - 1 for i in found[0]).decode("utf-8", "replace")] for found in ids]
    assert kwiden.generate(gpt_folder, None, "ab", 5, greedy=True) == texts[0]  # a folder is model and tokenizer


def test_a_unilm_writes_the_second_segment_and_chinese_has_no_spaces(unilm):
    model, tokenizer = unilm.model, unilm.tokenizer
    texts = kwiden.generate(model, tokenizer, "床前明月光", 6, num_samples=4, seed=0, top_k=3)
    prompt = [2, *(VOCABULARY.index(c) for c in "床前明月光"), 3]
    ids = generate_ids(model, [prompt], 6, Search(top_k=3), end_ids=[3], banned=[0, 4, 2], num_samples=4, seed=0)
    assert texts == ["".join(VOCABULARY[i] for i in found) for found in ids[0]]
    assert all(" " not in text for text in texts)


def test_end_tokens_are_named_by_text_or_id(unilm):
    model, tokenizer = unilm.model, unilm.tokenizer
    greedy = kwiden.generate(model, tokenizer, "低头", 6, greedy=True, end_tokens=[])[0]
    end = greedy[1]
    assert kwiden.generate(model, tokenizer, "低头", 6, greedy=True, end_tokens=end) == [greedy[: greedy.index(end)]]
    with pytest.raises(ValueError, match="end_tokens='\\[NOPE\\]': not a token of the tokenizer"):
        kwiden.generate(model, tokenizer, "低头", 8, end_tokens=["[NOPE]"])
    with pytest.raises(ValueError, match="end_tokens='x': not a token of the tokenizer"):  # read as [UNK]
        kwiden.generate(model, tokenizer, "低头", 8, end_tokens="x")


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(greedy=True, beam=2), "Choose one of greedy=True, beam=K, or sampling"),
        (dict(beam=2, top_k=3), "Choose one of greedy=True, beam=K, or sampling"),
        (dict(beam=2, num_samples=3), "num_samples=3: beam=2 keeps 2 continuations at most"),
        (dict(greedy=True, num_samples=2), "greedy=True gives one continuation a prompt"),
        (dict(top_p=0), "top_p=0: must be in \\(0, 1\\]"),
        (dict(temperature=0.0), "temperature=0.0: must be a number of at least 1e-06"),
        (dict(top_k=0), "top_k=0: must be a whole number of at least 1"),
        (dict(max_new_tokens=0), "max_new_tokens=0: must be a whole number of at least 1"),
        (dict(seed=-1), "seed=-1: must be a whole number of at least 0\\."),
        (dict(seed="7"), "seed='7': must be a whole number of at least 0\\."),
        (dict(end_tokens=True), "end_tokens=True: an end token is a text or an id, not a bool"),
        (dict(end_tokens=[98, 1.5]), "end_tokens=1.5: an end token is a text or an id, not a float"),
        (dict(end_tokens="abc"), "end_tokens='abc': not a token .* \\(it reads it as 3 tokens; an end token is one\\)"),
    ],
)
def test_bad_options_are_refused_by_name(gpt, options, message):
    with pytest.raises(ValueError, match=message):
        kwiden.generate(gpt.model, gpt.tokenizer, "ab", **{"max_new_tokens": 3, **options})


def test_bad_prompts_are_refused(gpt):
    model, tokenizer = gpt.model, gpt.tokenizer
    with pytest.raises(ValueError, match="Prompt 1 \\(''\\) has no tokens"):
        kwiden.generate(model, tokenizer, ["ab", ""], 3)
    with pytest.raises(ValueError, match="Prompt 0 is a int, not a text"):
        kwiden.generate(model, tokenizer, [3], 3)
    with pytest.raises(ValueError, match=r"Prompt 1 is not valid Unicode: it holds a lone surrogate \(U\+DCFF\) at "):
        kwiden.generate(model, tokenizer, ["ab", "a" + chr(0xDCFF)], 3)
    with pytest.raises(ValueError, match="need 39 positions; the model has 32"):
        kwiden.generate(model, tokenizer, "abcdefghij", 30)


@pytest.mark.parametrize("folder", ["gpt_folder", "unilm_folder"])
def test_a_command_line_prompt_of_bytes_that_are_not_utf8_is_refused_in_one_line(folder, request, capsys):
    """`kwiden generate FOLDER $'\\xff'`: Python reads the byte as a lone surrogate (surrogateescape); tokenizers
    failed on it with a TypeError traceback, or the byte tokenizer with a codec message naming nothing."""
    prompt = b"caf\xff".decode("utf-8", "surrogateescape")
    assert main(["generate", str(request.getfixturevalue(folder)), "ok", prompt, "--max-new-tokens", "2"]) == 1
    assert "kwiden generate: Prompt 1 is not valid Unicode: it holds a lone surrogate (U+DCFF) at character 3" in (
        capsys.readouterr().err
    )


def test_the_generate_command_prints_each_continuation(gpt_folder, gpt, capsys):
    # What the folder's model generates (its lengths those of other tests here: their compiled loops).
    assert main(["generate", str(gpt_folder), "ab", "--greedy", "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == "ab" + kwiden.generate(gpt.model, gpt.tokenizer, "ab", 12, greedy=True)[0] + "\n"
    assert main(["generate", str(gpt_folder), "ab", "cd", "--num-samples", "2", "--seed", "3", "--top-k", "3",
                 "--max-new-tokens", "5"]) == 0  # fmt: skip
    printed = capsys.readouterr().out.split("\n---\n")
    expected = kwiden.generate(gpt.model, gpt.tokenizer, ["ab", "cd"], 5, num_samples=2, seed=3, top_k=3)
    assert printed[:4] == [prompt + text for prompt, texts in zip(["ab", "cd"], expected) for text in texts]
    assert main(["generate", str(gpt_folder / "nothing"), "ab"]) == 1
    assert "is not a checkpoint folder" in capsys.readouterr().err


def test_similar_ranks_distinct_generated_sentences_by_cosine(unilm_folder, shared_loads, capsys):
    found = kwiden.similar(unilm_folder, "床前明月光", n=3, candidates=20, seed=0)
    encoder = kwiden.SentenceEncoder(unilm_folder)
    assert 1 <= len(found) <= 3
    assert len({text for text, _ in found}) == len(found) and "床前明月光" not in [text for text, _ in found]
    for text, cosine in found:
        np.testing.assert_allclose(cosine, encoder.similarity("床前明月光", text), rtol=1e-5)
    assert [c for _, c in found] == sorted((c for _, c in found), reverse=True)
    assert main(["similar", str(unilm_folder), "床前明月光", "-n", "3", "--candidates", "20", "--seed", "0"]) == 0
    assert capsys.readouterr().out == "".join(f"{cosine:.4f}\t{text}\n" for text, cosine in found)
    with pytest.raises(ValueError, match="n=21: must be a whole number from 1 to candidates=20"):
        kwiden.similar(unilm_folder, "床前", n=21, candidates=20)


def test_a_bert_saved_without_its_mlm_head_cannot_generate(tmp_path, capsys):
    bert = kwiden.build_transformer_model(tiny_config(vocab_size=len(VOCABULARY)))
    kwiden.save_checkpoint(bert, tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n", "utf-8")
    advice = "holds no weights for the MLM head .* Generate from a run trained with kwiden pretrain --objective"
    with pytest.raises(ValueError, match=advice):
        load_generator(tmp_path)
    assert load_tokenizer(tmp_path).cls == 2
    assert main(["similar", str(tmp_path), "床前"]) == 1  # not "build without that head", which similar cannot
    assert "holds no weights for the MLM head" in capsys.readouterr().err


def test_a_continuation_keeps_the_space_that_starts_it(tmp_path):
    from kwiden.generation.prompts import _decoded

    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "##s", "床", "前"])
    )
    tokenizer = load_tokenizer(tmp_path / "vocab.txt")
    assert _decoded(tokenizer, [5], [4]) == " world"
    assert _decoded(tokenizer, [6], [4, 5]) == "s"
    assert _decoded(tokenizer, [8], [7]) == "前"  # Chinese: no space between characters


def test_a_tokenizer_larger_than_the_model_is_refused(gpt_folder):
    small = kwiden.build_transformer_model(tiny_config(vocab_size=200), model="gpt")
    with pytest.raises(ValueError, match="has 258 tokens, the model's logits 200"):
        kwiden.generate(small, "bytes", "ab", 3)


def test_similar_wants_a_simbert_folder(gpt_folder):
    with pytest.raises(
        ValueError,
        match=r"reads a BERT or RoFormer trained as SimBERT, with its tokenizer \(\[CLS\] and \[SEP\]\); \S+ holds a gpt",
    ):
        kwiden.similar(gpt_folder, "ab")


def test_an_end_token_is_any_text_the_tokenizer_reads_as_one_token(gpt_folder, gpt, capsys):
    model, tokenizer = gpt.model, gpt.tokenizer
    greedy = kwiden.generate(model, tokenizer, "ab", 12, greedy=True, end_tokens=[])[0]
    newline = kwiden.generate(model, tokenizer, "ab", 12, greedy=True, end_tokens="\n")  # byte 10, token 'Ċ'
    assert newline == kwiden.generate(model, tokenizer, "ab", 12, greedy=True, end_tokens=11)
    assert newline == [greedy.split("\n")[0]]
    end = greedy[3]  # a byte the greedy continuation holds: it stops there
    assert kwiden.generate(model, tokenizer, "ab", 12, greedy=True, end_tokens=end) == [greedy[: greedy.index(end)]]
    argv = ["generate", str(gpt_folder), "ab", "--greedy", "--max-new-tokens", "12", "--end-token"]
    assert main([*argv, "\\n"]) == 0  # the shell's backslash and n: an escape
    assert capsys.readouterr().out == "ab" + newline[0] + "\n"
    assert main([*argv, "\\x" + format(ord(end), "02x")]) == 0
    assert capsys.readouterr().out == "ab" + greedy[: greedy.index(end)] + "\n"


def test_the_commands_name_their_own_flags(gpt_folder, unilm_folder, capsys):
    assert main(["generate", str(gpt_folder), "ab", "--top-p", "0"]) == 1
    assert capsys.readouterr().err == "kwiden generate: --top-p=0.0: must be in (0, 1].\n"
    assert main(["generate", str(gpt_folder), "ab", "--repetition-penalty", "-1"]) == 1
    assert (
        capsys.readouterr().err == "kwiden generate: --repetition-penalty=-1.0: must be a number from 1e-06 to 1e+06.\n"
    )
    assert main(["generate", str(gpt_folder), "ab", "--seed", "-1"]) == 1
    assert "kwiden generate: --seed=-1: must be a whole number of at least 0." in capsys.readouterr().err
    assert main(["generate", str(gpt_folder), "abcdefghij", "--max-new-tokens", "30"]) == 1
    err = capsys.readouterr().err
    assert "--max-new-tokens=30" in err and "give --max-new-tokens=23 or fewer" in err and "max_new_tokens=" not in err
    assert main(["similar", str(unilm_folder), "床前明月光", "-n", "7", "--candidates", "5"]) == 1
    assert "kwiden similar: -n=7: must be a whole number from 1 to --candidates=5" in capsys.readouterr().err


def test_similar_fits_its_own_default_length_to_the_positions(unilm_folder, shared_loads, capsys):
    text = "床前明月光疑是地上霜举头望"  # 15 tokens with [CLS] and [SEP]: 32 more would pass 32 positions
    found = kwiden.similar(unilm_folder, text, n=2, candidates=4, seed=0)
    assert kwiden.similar(unilm_folder, text, n=2, candidates=4, seed=0, max_new_tokens=18) == found  # 15 + 18 - 1 = 32
    assert main(["similar", str(unilm_folder), text, "-n", "2", "--candidates", "4", "--seed", "0"]) == 0
    assert capsys.readouterr().out == "".join(f"{cosine:.4f}\t{sentence}\n" for sentence, cosine in found)
    assert main(["similar", str(unilm_folder), text, "--max-new-tokens", "20"]) == 1
    assert "give --max-new-tokens=18 or fewer" in capsys.readouterr().err
    full = "床前明月光疑是地上霜举头望明月低头思故乡床前明月光疑是地上霜举"  # 31 tokens: [CLS] and [SEP] pass the 32
    with pytest.raises(ValueError, match=r"Text 1 has 31 tokens: with \[CLS\] and \[SEP\] they fill every position"):
        kwiden.similar(unilm_folder, [text, full], n=1, candidates=2, seed=0)  # it was "prompt 0", another text


def test_the_generate_command_says_when_a_beam_finds_fewer_than_asked(gpt_folder, capsys):
    argv = ["generate", str(gpt_folder), "ab", "--beam", "300", "--num-samples", "300", "--max-new-tokens", "1"]
    assert main(argv) == 0  # 256 bytes: [PAD] and [MASK] are never generated
    printed = capsys.readouterr()
    assert printed.out.count("\n---\n") == 256
    assert printed.err == (
        "kwiden generate: Beam search found 256 continuations of prompt 0, not --num-samples=300: no more exist "
        "within --max-new-tokens=1 tokens (banned tokens are never generated).\n"
    )


@pytest.mark.parametrize("command", ["generate", "similar"])
def test_ctrl_c_stops_a_command_in_one_line(command, gpt_folder, unilm_folder, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    from kwiden.generation import prompts
    from kwiden.similarity import similar  # imported before either is patched: it binds the real generate

    monkeypatch.setattr(prompts, "generate", interrupted)
    monkeypatch.setattr(similar, "generate", interrupted)
    folder = gpt_folder if command == "generate" else unilm_folder
    assert main([command, str(folder), "床前"]) == 130
    assert capsys.readouterr().err == f"kwiden {command}: interrupted\n"


def _gpt_folder(folder, **config):
    """The tiny byte-level GPT of `gpt_folder`, saved with `config`'s keys in its config.json."""
    gpt = kwiden.build_transformer_model(tiny_config(vocab_size=258), model="gpt")
    kwiden.save_checkpoint(randomize_weights(gpt, seed=1, std=0.3), folder, base_config=config)
    byte_tokenizer().save(folder)
    return folder


def test_every_eos_token_id_of_the_checkpoint_ends_a_continuation(gpt, tmp_path, capsys):
    sample = dict(max_new_tokens=12, top_k=8, seed=3)  # each row's draws are its own: an end only cuts them
    plain = kwiden.generate(gpt.model, gpt.tokenizer, "ab", **sample)[0]  # _gpt_folder's, without an eos_token_id
    first, later = plain[1], plain[3]  # ASCII bytes of the continuation: ids one above them
    assert first not in plain[:1] and later not in plain[:3] and max(first, later) < "\x80"
    ids = [ord(later) + 1, ord(first) + 1]  # a list, as Llama 3's config.json holds
    listed = _gpt_folder(tmp_path / "listed", eos_token_id=ids)
    assert kwiden.generate(listed, None, "ab", **sample) == [plain[:1]]
    (listed / "generation_config.json").write_text(json.dumps({"eos_token_id": ids[:1]}))  # what transformers reads
    assert kwiden.generate(listed, None, "ab", **sample) == [plain[:3]]
    assert main(["generate", str(listed), "ab", "--max-new-tokens", "12", "--top-k", "8", "--seed", "3"]) == 0
    assert capsys.readouterr().out == "ab" + plain[:3] + "\n"


@pytest.mark.parametrize("eos, message", [
    ([], "eos_token_id \\[\\] is not a token id or a list of them"),
    (["2"], "eos_token_id \\['2'\\] is not a token id or a list of them"),
    (True, "eos_token_id True is not a token id"),
    (300, "eos_token_id 300 is not a token id or a list of them below the vocabulary's 258"),
])  # fmt: skip
def test_a_bad_eos_token_id_is_refused_naming_its_file(tmp_path, eos, message):
    folder = _gpt_folder(tmp_path / "gpt", eos_token_id=0)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    with pytest.raises(ValueError, match=f"{folder / 'generation_config.json'}: {message}"):
        load_generator(folder)


def test_similar_names_candidates_where_memory_would_not_hold_them(unilm_folder, capsys, monkeypatch):
    from kwiden.generation import footprint

    monkeypatch.setattr(footprint, "available_memory", lambda: 200_000)
    with pytest.raises(
        ValueError, match=r"candidates=100 .*the most that fit: .*candidates=\d+ \(with max_new_tokens=12\)"
    ):
        kwiden.similar(unilm_folder, "床前明月光", candidates=100)
    assert main(["similar", str(unilm_folder), "床前明月光"]) == 1
    err = capsys.readouterr().err
    assert "--candidates=100" in err and "--max-new-tokens=" in err and "num_samples" not in err


def test_a_folder_recording_its_trained_length_refuses_to_go_past_it(tmp_path, capsys):
    folder = _gpt_folder(tmp_path / "gpt")
    kwiden.generate(folder, None, "abcde", 28, greedy=True)  # no record: as far as its 32 positions go
    (folder / "generation_config.json").write_text(json.dumps({"max_length": 20}))
    past = r"past the 20 the model was trained on \(.*generation_config.json's max_length\)"
    with pytest.raises(ValueError, match=rf"Prompt 0 has 5 tokens: with max_new_tokens=16 that makes 21, {past}: "
                       r"give max_new_tokens=15 or fewer"):  # fmt: skip
        kwiden.generate(folder, None, "abcde", 16)
    assert len(kwiden.generate(folder, None, "abcde", 15, greedy=True)) == 1
    model, _ = load_generator(folder)
    with pytest.raises(ValueError, match=rf"Prompt 1 has 5 tokens: with max_new_tokens=16 that makes 21, {past}"):
        generate_ids(model, [[98], [98, 99, 100, 101, 102]], 16)
    with pytest.raises(ValueError, match=rf"Prompt 0 has 20 tokens: .*{past}: shorten the prompt to 19 tokens"):
        kwiden.generate(folder, None, "a" * 20, 1)
    assert main(["generate", str(folder), "abcde", "--max-new-tokens", "16"]) == 1
    err = capsys.readouterr().err
    assert "with --max-new-tokens=16 that makes 21" in err and "give --max-new-tokens=15 or fewer" in err


def test_similar_fits_its_default_length_to_the_trained_length(unilm_folder, tmp_path, shared_loads):
    import shutil

    folder = tmp_path / "unilm"
    shutil.copytree(unilm_folder, folder)
    (folder / "generation_config.json").write_text(json.dumps({"max_length": 12}))
    text = "床前明月光"  # 7 tokens with [CLS] and [SEP]: 12 more by default, 5 within the record
    assert kwiden.similar(folder, text, n=2, candidates=4, seed=0) == kwiden.similar(
        folder, text, n=2, candidates=4, seed=0, max_new_tokens=5
    )
    with pytest.raises(ValueError, match="give max_new_tokens=5 or fewer"):
        kwiden.similar(folder, text, max_new_tokens=6)


def test_similar_gives_each_text_what_it_gets_alone(unilm_folder, shared_loads):
    texts = ["床前", "床前明月光疑是地上霜"]  # their own default lengths differ: 6 and 21 new tokens
    together = kwiden.similar(unilm_folder, texts, n=3, candidates=8, seed=1)
    assert together == [kwiden.similar(unilm_folder, text, n=3, candidates=8, seed=1) for text in texts]
    assert max(len(sentence) for sentence, _ in together[0]) <= 6


def test_a_generator_generates_as_kwiden_generate_with_transformers_names(gpt_folder, gpt, unilm):
    # gpt and unilm: kwiden.Generator(folder)s, built once for the module.
    sampled = dict(max_new_tokens=12, top_k=3, temperature=0.7, seed=1)
    assert gpt.generate("ab", **sampled) == kwiden.generate(gpt_folder, None, "ab", **sampled)[0]  # str in, str out
    # The generators' own models from here: the same as a folder's (above), and compiled once.
    penalised = gpt.generate("ab", **sampled, repetition_penalty=1.5)
    assert penalised == kwiden.generate(gpt.model, gpt.tokenizer, "ab", **sampled, repetition_penalty=1.5)[0]
    assert gpt.generate(["ab", "xyz"], max_new_tokens=5, do_sample=False) == [
        texts[0] for texts in kwiden.generate(gpt.model, gpt.tokenizer, ["ab", "xyz"], 5, greedy=True)
    ]  # list in, list out
    beams = unilm.generate(["床前明月光"], 6, num_beams=3, num_return_sequences=2)
    assert beams == kwiden.generate(unilm.model, unilm.tokenizer, ["床前明月光"], 6, beam=3, num_samples=2)
    assert unilm.generate("低头", 6, num_return_sequences=4, top_k=3, seed=0) == kwiden.generate(
        unilm.model, unilm.tokenizer, "低头", 6, num_samples=4, top_k=3, seed=0
    )
    with pytest.raises(
        ValueError, match=r"do_sample=False gives one continuation a prompt, not num_return_sequences=2"
    ):
        gpt.generate("ab", do_sample=False, num_return_sequences=2)
    with pytest.raises(ValueError, match=r"Choose one of do_sample=False, num_beams=K, or sampling \(top_k=K"):
        gpt.generate("ab", do_sample=False, top_k=3)
    with pytest.raises(ValueError, match=r"num_return_sequences=3: num_beams=2 keeps 2 continuations at most"):
        unilm.generate("低头", num_beams=2, num_return_sequences=3)
    with pytest.raises(ValueError, match=r"num_beams=2 with do_sample=True: kwiden's beam search does not sample"):
        gpt.generate("ab", num_beams=2, do_sample=True)
    with pytest.raises(ValueError, match=r"num_beams=0: must be a whole number of at least 1"):
        gpt.generate("ab", num_beams=0)
