"""Google and Hugging Face BERT checkpoints: load, save, round trips, keep_tokens, errors."""

import json

import numpy as np
import pytest
import tensorflow as tf
from checkpoint_folders import google_bert_shapes

import kwiden
from kwiden.testing import numpy_outputs, padded_batch, randomize_weights, tiny_config


def google_checkpoint(folder, config, layers=2, positions=True, seed=0):
    """A Google-format BERT checkpoint written with TensorFlow's own op and the
    real variable names, independently of kwiden's name table."""
    shapes = google_bert_shapes({**config, "num_hidden_layers": layers}, positions)
    shapes["global_step"] = ()  # other variables in real checkpoints are ignored
    rng = np.random.default_rng(seed)
    arrays = {name: rng.normal(0, 0.5, shape).astype("float32") for name, shape in shapes.items()}
    folder.mkdir(parents=True, exist_ok=True)
    prefix = str(folder / "bert_model.ckpt")
    tf.raw_ops.SaveV2(
        prefix=prefix, tensor_names=list(arrays), shape_and_slices=[""] * len(arrays),
        tensors=[tf.constant(a) for a in arrays.values()],
    )  # fmt: skip
    (folder / "bert_config.json").write_text(json.dumps(config))
    return arrays


def test_google_checkpoint_loads_with_its_variable_names(tmp_path):
    config = tiny_config()
    arrays = google_checkpoint(tmp_path / "google", config)
    model = kwiden.build_transformer_model(checkpoint_path=tmp_path / "google", with_mlm=True, with_pool=True)
    attention = model.get_layer("Transformer-1-MultiHeadSelfAttention")
    np.testing.assert_array_equal(
        attention.query_kernel.numpy(), arrays["bert/encoder/layer_1/attention/self/query/kernel"].reshape(16, 2, 8)
    )
    np.testing.assert_array_equal(
        attention.output_kernel.numpy(), arrays["bert/encoder/layer_1/attention/output/dense/kernel"].reshape(2, 8, 16)
    )
    np.testing.assert_array_equal(
        attention.key_bias.numpy(), arrays["bert/encoder/layer_1/attention/self/key/bias"].reshape(2, 8)
    )
    np.testing.assert_array_equal(model.get_layer("MLM-Bias").bias.numpy(), arrays["cls/predictions/output_bias"])
    np.testing.assert_array_equal(
        model.get_layer("Transformer-0-FeedForward").output_kernel.numpy(),
        arrays["bert/encoder/layer_0/output/dense/kernel"],
    )


def test_roformer_google_checkpoint_has_no_position_table(tmp_path):
    google_checkpoint(tmp_path / "roformer", tiny_config(), positions=False)
    model = kwiden.build_transformer_model(checkpoint_path=tmp_path / "roformer", model="roformer", with_mlm=True)
    assert model.get_layer("Transformer-0-MultiHeadSelfAttention").rotary is not None
    with pytest.raises(
        ValueError, match=r"no tensor 'bert/embeddings/position_embeddings' for 'Embedding-Position/embeddings'"
    ):
        kwiden.build_transformer_model(checkpoint_path=tmp_path / "roformer", model="bert")


@pytest.mark.filterwarnings("ignore:Google's BERT code")
@pytest.mark.parametrize("format", ["hf", "google"])
def test_save_then_load_gives_identical_outputs(bert, tmp_path, format):
    model = bert(with_mlm=True, with_pool=True)
    if format == "google":  # ε = 1e-3 here
        with pytest.warns(UserWarning, match=r"Google's BERT code fixes LayerNorm's ε at 1e-12") as caught:
            folder = kwiden.save_checkpoint(model, tmp_path / format, format=format)
        assert {w.filename for w in caught if "Google's BERT" in str(w.message)} == {__file__}
    else:
        folder = kwiden.save_checkpoint(model, tmp_path / format, format=format)
    loaded = kwiden.build_transformer_model(checkpoint_path=folder, with_mlm=True, with_pool=True)
    for a, b in zip(numpy_outputs(model, padded_batch()), numpy_outputs(loaded, padded_batch())):
        np.testing.assert_array_equal(a, b)
    again = kwiden.save_checkpoint(loaded, tmp_path / f"{format}-again", format=format)
    assert json.loads((again / kwiden.checkpoints.CONFIG_FILES[format]).read_text())["layer_norm_eps"] == 1e-3


def test_save_checkpoint_shards_as_grow_checkpoint_does(bert, tmp_path):
    model = bert(with_mlm=True)
    folder = kwiden.save_checkpoint(model, tmp_path / "sharded", max_shard_size=2000)
    shards = sorted(p.name for p in folder.glob("model-*-of-*.safetensors"))
    index = json.loads((folder / kwiden.checkpoints.SAFETENSORS_INDEX).read_text())
    assert len(shards) > 1 and not (folder / kwiden.checkpoints.SAFETENSORS).exists()
    assert sorted(set(index["weight_map"].values())) == shards
    tensors = kwiden.checkpoints.read_tensors("hf", folder / kwiden.checkpoints.SAFETENSORS_INDEX)
    for shard in shards:  # at most 2000 bytes of tensors a file, or one larger tensor alone
        held = [tensors[name].nbytes for name, file in index["weight_map"].items() if file == shard]
        assert sum(held) <= 2000 or len(held) == 1
    whole = kwiden.save_checkpoint(model, tmp_path / "whole")
    assert kwiden.checkpoints.read_tensors("hf", folder / kwiden.checkpoints.SAFETENSORS_INDEX).keys() == (
        kwiden.checkpoints.read_tensors("hf", whole / kwiden.checkpoints.SAFETENSORS).keys()
    )
    loaded = kwiden.build_transformer_model(checkpoint_path=folder, with_mlm=True)
    for a, b in zip(numpy_outputs(model, padded_batch()), numpy_outputs(loaded, padded_batch())):
        np.testing.assert_array_equal(a, b)
    # saved again in one file, the shards and their index go: one checkpoint in the folder
    kwiden.save_checkpoint(model, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "kwiden-manifest.json", "model.safetensors"]
    kwiden.build_transformer_model(checkpoint_path=folder, with_mlm=True)
    with pytest.raises(ValueError, match=r"`max_shard_size` shards Hugging Face folders"):
        kwiden.save_checkpoint(model, tmp_path / "google", format="google", max_shard_size="1GB")
    with pytest.raises(ValueError, match=r"`max_shard_size` must be a number of bytes or a size such as '5GB'"):
        kwiden.save_checkpoint(model, tmp_path / "bad", max_shard_size="big")


def test_one_read_plan_names_each_weight_and_its_tensor(bert, tmp_path):
    model = bert(with_mlm=True)
    folder = kwiden.save_checkpoint(model, tmp_path / "ckpt")
    plan = kwiden.checkpoints.read_plan(model, folder)
    assert [entry.variable.path for entry in plan.entries] == [v.path for layer in model.layers for v in layer.weights]
    entry = plan["Embedding-Token", "embeddings"]
    assert entry.tensor == "bert.embeddings.word_embeddings.weight"
    np.testing.assert_array_equal(plan.value(entry), model.get_layer("Embedding-Token").embeddings.numpy())


def test_keep_tokens_reads_past_nan_in_the_rows_it_drops(bert, tmp_path):
    import safetensors.numpy

    model = bert(with_mlm=True)
    folder = kwiden.save_checkpoint(model, tmp_path / "ckpt")
    (folder / kwiden.checkpoints.MANIFEST).unlink()  # changed below on purpose
    tensors = safetensors.numpy.load_file(folder / "model.safetensors")
    rows = tensors["bert.embeddings.word_embeddings.weight"].shape[0]
    tensors["bert.embeddings.word_embeddings.weight"][rows - 1] = np.nan
    safetensors.numpy.save_file(tensors, str(folder / "model.safetensors"))
    keep = list(range(rows - 1))
    loaded = kwiden.build_transformer_model(checkpoint_path=folder, with_mlm=True, keep_tokens=keep)
    assert loaded.get_layer("Embedding-Token").input_dim == rows - 1
    with pytest.raises(ValueError, match=r"'bert.embeddings.word_embeddings.weight' \(for 'Embedding-Token/embeddings'\) holds 16 NaN"):  # fmt: skip
        kwiden.build_transformer_model(checkpoint_path=folder, with_mlm=True, keep_tokens=[0, rows - 1])


def test_hugging_face_names_and_layouts(bert, tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    model = bert(with_mlm=True)
    path = kwiden.save_checkpoint(model, tmp_path) / "model.safetensors"
    tensors = load_file(path)
    query = model.get_layer("Transformer-0-MultiHeadSelfAttention").query_kernel.numpy()
    # BertForMaskedLM's names: the encoder under `bert.`, the head under `cls.`
    np.testing.assert_array_equal(tensors["bert.encoder.layer.0.attention.self.query.weight"], query.reshape(16, 16).T)
    assert tensors["cls.predictions.bias"].shape == (97,) and "bert.embeddings.LayerNorm.weight" in tensors
    assert "cls.predictions.transform.dense.weight" in tensors
    with safe_open(path, "np") as f:
        assert f.metadata() == {"format": "pt"}
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "bert" and config["intermediate_size"] == 24 and config["hidden_act"] == "gelu"
    assert config["architectures"] == ["BertForMaskedLM"]
    plain = json.loads((kwiden.save_checkpoint(bert(), tmp_path / "plain") / "config.json").read_text())
    assert plain["architectures"] == ["BertModel"]


def test_older_hugging_face_names_load(bert, tmp_path):
    """LayerNorm `gamma`/`beta` (bert-base-uncased and other older files) and a
    decoder-only MLM bias."""
    from safetensors.numpy import load_file, save_file

    model = bert(with_mlm=True)
    folder = kwiden.save_checkpoint(model, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    renamed = {}
    for name, value in tensors.items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        renamed[name.replace("cls.predictions.bias", "cls.predictions.decoder.bias")] = value
    save_file(renamed, str(folder / "model.safetensors"))
    (folder / "kwiden-manifest.json").unlink()  # the file is another tool's now, without kwiden's record
    loaded = kwiden.build_transformer_model(checkpoint_path=folder, with_mlm=True)
    for a, b in zip(numpy_outputs(model, padded_batch()), numpy_outputs(loaded, padded_batch())):
        np.testing.assert_array_equal(a, b)


def test_a_grown_model_is_written_and_read_back(bert, tmp_path):
    small = bert()
    big = kwiden.grow(small, 2)
    folder = kwiden.save_checkpoint(big, tmp_path / "big")
    loaded = kwiden.build_transformer_model(checkpoint_path=folder)
    np.testing.assert_array_equal(numpy_outputs(big, padded_batch())[0], numpy_outputs(loaded, padded_batch())[0])
    grown = kwiden.grow(bert(with_mlm=True), 2)
    with pytest.warns(UserWarning, match=r"one layer_norm_eps; 0.0005 is written.*'MLM-Norm': 0.001") as caught:
        kwiden.save_checkpoint(grown, tmp_path / "mlm")
    assert {w.filename for w in caught if "layer_norm_eps" in str(w.message)} == {__file__}


def test_keep_tokens_keeps_rows_in_order(bert, tmp_path):
    model = bert(with_mlm=True)
    folder = kwiden.save_checkpoint(model, tmp_path)
    keep = [0, 5, 3, 96]
    small = kwiden.build_transformer_model(checkpoint_path=folder, with_mlm=True, keep_tokens=keep)
    assert small.get_layer("Embedding-Token").input_dim == 4
    np.testing.assert_array_equal(
        small.get_layer("Embedding-Token").embeddings.numpy(),
        model.get_layer("Embedding-Token").embeddings.numpy()[keep],
    )
    np.testing.assert_array_equal(
        small.get_layer("MLM-Bias").bias.numpy(), model.get_layer("MLM-Bias").bias.numpy()[keep]
    )
    with pytest.raises(
        ValueError, match=r"`keep_tokens` selects rows of a checkpoint's vocabulary; pass `checkpoint_path`"
    ):
        kwiden.build_transformer_model(tiny_config(), keep_tokens=keep)


def test_checkpoint_errors(bert, tmp_path):
    google_checkpoint(tmp_path / "google", tiny_config())
    with pytest.raises(
        ValueError,
        match=r"'Transformer-0-FeedForward/inner_kernel' \(shape \(16, 30\)\) needs 'bert/encoder/layer_0/intermediate/dense/kernel' of shape \(16, 30\); the checkpoint's has \(16, 24\)",
    ):
        kwiden.build_transformer_model(checkpoint_path=tmp_path / "google", intermediate_size=30)
    with pytest.raises(FileNotFoundError, match=r"The checkpoint file \S+elsewhere.safetensors does not exist\.$"):
        kwiden.build_transformer_model(checkpoint_path=tmp_path / "elsewhere.safetensors")
    with pytest.raises(FileNotFoundError, match=r"The checkpoint folder \S+nowhere does not exist \(nor a Google"):
        kwiden.build_transformer_model(tiny_config(), checkpoint_path=tmp_path / "nowhere")
    (tmp_path / "weights-only").mkdir()
    (tmp_path / "google" / "bert_model.ckpt.index").rename(tmp_path / "weights-only" / "bert_model.ckpt.index")
    with pytest.raises(FileNotFoundError, match=r"No config.json or bert_config.json beside \S+weights-only"):
        kwiden.build_transformer_model(checkpoint_path=tmp_path / "weights-only")
    (tmp_path / "weights-only" / "bert_model.ckpt.index").rename(tmp_path / "google" / "bert_model.ckpt.index")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        FileNotFoundError, match=r"No model.safetensors, model.safetensors.index.json or \*.ckpt.index in"
    ):
        kwiden.build_transformer_model(tiny_config(), checkpoint_path=tmp_path / "empty")
    with pytest.raises(ValueError, match=r"`format` must be one of \('hf', 'google'\)"):
        kwiden.save_checkpoint(bert(), tmp_path / "x", format="torch")
    with pytest.raises(ValueError, match=r"blocks \[1\] beyond the model's 1: loading would drop them"):
        kwiden.build_transformer_model(checkpoint_path=tmp_path / "google", num_hidden_layers=1)
    with pytest.raises(ValueError, match=r"`keep_tokens` must be a non-empty list of vocabulary ids in \[0, 97\)"):
        kwiden.build_transformer_model(checkpoint_path=tmp_path / "google", keep_tokens=[3, -1])
    roformer = kwiden.build_transformer_model(tiny_config(), model="roformer", rotary_base=5000.0)
    with pytest.raises(ValueError, match=r"Hugging Face's RoFormer turns at base 10000 and this model's is 5000"):
        kwiden.save_checkpoint(roformer, tmp_path / "roformer")
    t5 = randomize_weights(kwiden.build_transformer_model(tiny_config(), model="t5"))
    with pytest.raises(ValueError, match=r"A T5 model has no place in a checkpoint"):
        kwiden.save_checkpoint(t5, tmp_path / "t5")
