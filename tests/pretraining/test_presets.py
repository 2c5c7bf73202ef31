"""`--config NAME`: a named model size (the demo's GPT, Google's BERT sizes) with its family, in place of a
config.json; what a preset or a config leaves out, its family's defaults."""

import json

import pytest
from conftest import TINY_RUN

import kwiden
from kwiden.cli import main
from kwiden.models import get_family
from kwiden.models.presets import DEMO, PRESETS


def test_a_preset_names_the_size_and_the_family(english, tmp_path):
    result = kwiden.pretrain(english, tmp_path / "run", config="gpt-demo", grow="none", **{**TINY_RUN, "budget": 2})
    arguments = json.loads((tmp_path / "run" / "run.json").read_text())["arguments"]
    assert arguments["model"] == "gpt" and arguments["config"] == DEMO  # what it stood for, as a file's content is
    assert result.model.name == "gpt" and result.model.get_layer("Embedding-Token").output_dim == 64
    assert kwiden.pretrain(english, tmp_path / "run", config="gpt-demo", grow="none",
                           **{**TINY_RUN, "budget": 2}).updates == 2  # resumed  # fmt: skip
    with pytest.raises(ValueError, match=r"--config bert-tiny is a bert's size, not a gpt's: give --model bert"):
        kwiden.pretrain(english, tmp_path / "other", config="bert-tiny", model="gpt", **TINY_RUN)


def test_each_family_fills_in_its_own_defaults():
    size = dict(vocab_size=10, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    assert get_family("gpt").config(size)["layer_norm_eps"] == 1e-5  # GPT-2's, not BERT's
    assert get_family("bert").config(size)["layer_norm_eps"] == 1e-12
    assert get_family("llama").config(size)["layer_norm_eps"] == 1e-6
    assert all(family in ("gpt", "bert") for family, _ in PRESETS.values())


def test_the_help_lists_the_presets(capsys):
    with pytest.raises(SystemExit, match=r"^0$"):
        main(["pretrain", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "gpt-demo (gpt 64×2), gpt2-small (gpt 768×12), bert-tiny (bert 128×2)" in shown


def test_every_preset_reads_the_window_pretrain_gives_by_default():
    from kwiden.arguments import defaults
    from kwiden.pretraining.options import PretrainOptions

    window = defaults(PretrainOptions)["seq_len"]
    for name, (family, config) in PRESETS.items():
        complete = get_family(family).config({**config, "vocab_size": 10})
        assert complete["max_position_embeddings"] >= window, name
