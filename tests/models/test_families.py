"""Model families: each builds the same by name and as an object, the registry,
config translation both ways, and the import boundary of the format code."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import kwiden
from kwiden.models import FAMILIES, Family, bert, family_of, get_family, naming, register_family
from kwiden.testing import numpy_outputs, padded_batch, randomize_weights, tiny_config

CONFIGS = {
    "bert": tiny_config(),
    "roformer": tiny_config(),
    "gpt": tiny_config(),
    "llama": tiny_config(num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-3),
    "t5": tiny_config(relative_attention_num_buckets=8),
}


def architecture(model):
    """The model's config, with the numbers keras appends to the names of
    unnamed ops (the padding mask's `not_equal_1`) dropped."""
    return re.sub(r'"([a-z_]+)_\d+"', r'"\1"', json.dumps(model.get_config(), sort_keys=True, default=str))


def inputs_of(model):
    return padded_batch() if len(model.inputs) == 2 else padded_batch(segments=False)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_family_object_builds_what_its_name_builds(name):
    by_name = randomize_weights(kwiden.build_transformer_model(CONFIGS[name], model=name))
    by_object = kwiden.build_transformer_model(CONFIGS[name], model=FAMILIES[name])
    assert architecture(by_object) == architecture(by_name)
    by_object.set_weights(by_name.get_weights())
    for a, b in zip(numpy_outputs(by_name, inputs_of(by_name)), numpy_outputs(by_object, inputs_of(by_object))):
        np.testing.assert_array_equal(a, b)
    assert by_name.name == name and family_of(by_name) is FAMILIES[name]


def test_the_registry_takes_a_new_family_by_name():
    rms_bert = Family("rms-bert", bert.build_bert, defaults={**bert.DEFAULTS, "norm": "rms"}, flags=bert.FLAGS)
    register_family(rms_bert)
    try:
        model = kwiden.build_transformer_model(tiny_config(), model="rms-bert", with_mlm=True)
        assert model.name == "rms-bert" and model.get_layer(naming.MLM_NORM).rms
        assert get_family("rms-bert") is rms_bert and family_of(model) is rms_bert
        with pytest.raises(ValueError, match=r"A family named 'rms-bert' is registered already; pass replace=True"):
            register_family(Family("rms-bert", bert.build_bert))
        assert register_family(rms_bert, replace=True) is rms_bert
    finally:
        del FAMILIES["rms-bert"]
    with pytest.raises(
        ValueError,
        match=r"`model` must be one of \['bert', 'gpt', 'llama', 'mistral', 'qwen2', 'roformer', 't5'\], got model='rms-bert'",
    ):
        kwiden.build_transformer_model(tiny_config(), model="rms-bert")
    with pytest.raises(TypeError, match=r"register_family takes a kwiden.models.Family, got dict"):
        register_family({"name": "x"})


def test_family_errors():
    plain = Family("plain", bert.build_bert)  # no flags, no checkpoint names
    assert plain.title == "plain" and plain.defaults == {}
    with pytest.raises(ValueError, match=r"`with_pool` applies to BERT-style models \(bert, roformer\), not 'plain'"):
        kwiden.build_transformer_model(tiny_config(), model=plain, with_pool=True)
    with pytest.raises(
        ValueError,
        match=r"load the weights of model='bert', 'gpt', 'llama', 'mistral', 'qwen2', 'roformer', not model='plain'",
    ):
        kwiden.build_transformer_model(tiny_config(), model=plain, checkpoint_path="anywhere")
    with pytest.raises(
        ValueError, match=r"Family 'half': give `checkpoint_names` and the `formats` they cover, or neither"
    ):
        Family("half", bert.build_bert, checkpoint_names=bert.checkpoint_names)


def test_bert_config_round_trips_through_hugging_face_keys():
    model = kwiden.build_transformer_model(tiny_config(initializer_range=0.05), with_mlm=True)
    config = bert.to_hf_config(model)
    assert config == {
        "architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 97, "hidden_size": 16,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 24, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "type_vocab_size": 2,
        "layer_norm_eps": 1e-3, "pad_token_id": 0, "torch_dtype": "float32", "initializer_range": 0.05,
        "max_position_embeddings": 32,
    }  # fmt: skip
    again = kwiden.build_transformer_model(bert.from_hf_config(config), with_mlm=True)
    assert architecture(again) == architecture(model)  # the config says all the builder reads
    assert bert.to_hf_config(again) == config


@pytest.mark.filterwarnings("ignore:Google's BERT code")
def test_bert_ignores_a_roformer_rotary_base(tmp_path):
    roformer = randomize_weights(kwiden.build_transformer_model(tiny_config(), model="roformer"))
    folder = kwiden.save_checkpoint(roformer, tmp_path, format="google")
    assert json.loads((folder / "bert_config.json").read_text())["rotary_base"] == 10000.0
    as_bert = kwiden.build_transformer_model(config_path=folder / "bert_config.json", model="bert")
    assert as_bert.get_layer(naming.block(0, naming.ATTENTION)).rotary is None
    loaded = kwiden.build_transformer_model(checkpoint_path=folder)  # model_type "roformer"
    assert loaded.name == "roformer"
    with pytest.raises(ValueError, match=r"config is a RoFormer's \(model_type 'roformer'\).*Pass model='roformer'"):
        kwiden.build_transformer_model(checkpoint_path=folder, model="bert")
    np.testing.assert_array_equal(numpy_outputs(roformer, padded_batch())[0], numpy_outputs(loaded, padded_batch())[0])


def test_llama_reads_hugging_face_keys_and_an_override_beats_them(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_config(rope_theta=500.0, rms_norm_eps=1e-5, head_dim=4, num_attention_heads=2)))
    model = kwiden.build_transformer_model(config_path=path, model="llama", layer_norm_eps=1e-4)
    attention = model.get_layer(naming.block(0, naming.ATTENTION))
    assert attention.rotary.base == 500.0 and attention.head_size == 4
    assert model.get_layer(naming.OUTPUT_NORM).epsilon == 1e-4
    with pytest.raises(
        ValueError, match=r"kwiden's rotary attention has no RoPE scaling \({'type': 'linear', 'factor': 2.0}\)"
    ):
        kwiden.build_transformer_model(tiny_config(rope_scaling={"type": "linear", "factor": 2.0}), model="llama")


def test_gpt2_and_t5_sizes_translate():
    gpt2 = dict(vocab_size=97, n_embd=16, n_layer=3, n_head=2, n_positions=20, layer_norm_epsilon=1e-5)
    gpt = kwiden.build_transformer_model(gpt2, model="gpt")
    assert naming.count_blocks(layer.name for layer in gpt.layers) == 3
    assert gpt.get_layer(naming.EMBEDDING_POSITION).input_dim == 20
    t5 = dict(
        vocab_size=97,
        d_model=16,
        num_layers=1,
        num_heads=2,
        d_kv=4,
        d_ff=24,
        feed_forward_proj="relu",
        dropout_rate=0.0,
    )
    model = kwiden.build_transformer_model(t5, model="t5")
    ffn = model.get_layer(naming.block(0, naming.FEED_FORWARD))
    assert not ffn.glu and ffn.get_config()["activation"] == "relu" and ffn.intermediate_size == 24
    assert model.get_layer(naming.block(0, naming.ATTENTION)).head_size == 4


@pytest.mark.filterwarnings("ignore:Google's BERT code")
def test_a_family_says_which_checkpoints_hold_it(tmp_path):
    t5 = kwiden.build_transformer_model(tiny_config(), model="t5")
    with pytest.raises(
        ValueError,
        match=r"A T5 model has no place in a checkpoint: kwiden reads and writes checkpoints of BERT, GPT, LLaMA, "
        r"Mistral, Qwen2, RoFormer",
    ):
        kwiden.save_checkpoint(t5, tmp_path / "t5")
    roformer = kwiden.build_transformer_model(tiny_config(), model="roformer")
    with pytest.raises(
        ValueError, match=r"This model's attention is rotary, a RoFormer's: save it with family='roformer'"
    ):
        kwiden.save_checkpoint(roformer, tmp_path / "as-bert", format="google", family="bert")
    google_bert = kwiden.save_checkpoint(kwiden.build_transformer_model(tiny_config()), tmp_path / "g", "google")
    llama = kwiden.build_transformer_model(tiny_config(), model="llama")
    with pytest.raises(
        ValueError, match=r"LLaMA weights are kept in Hugging Face's \(model.safetensors\) checkpoints only"
    ):
        kwiden.checkpoints.load_weights(llama, google_bert)


def test_models_and_checkpoints_import_no_tensorflow():
    """TensorFlow is imported only to read or write Google-format files."""
    code = "import keras, sys; before = 'tensorflow' in sys.modules; import kwiden.models, kwiden.checkpoints; print(before, 'tensorflow' in sys.modules)"
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(kwiden.__file__))] + sys.path),
    }
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"], result.stderr
