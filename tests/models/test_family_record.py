"""A model's family is recorded on the model (`FamilyModel.family`, in its
config), not guessed from its name: it survives renames, growth of width and
depth, `admin.fold`, `.keras` files and backups; models without a record
(built by hand, or saved before kwiden recorded families) are read by their
name, as before."""

import json

import keras
import numpy as np
import pytest

import kwiden
from kwiden.models import FAMILIES, Family, FamilyModel, bert, family_of
from kwiden.models.family_model import recording
from kwiden.testing import numpy_outputs, padded_batch, randomize_weights, tiny_config

SMALL = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=12)
CONFIGS = {name: tiny_config(**SMALL) for name in FAMILIES}
CONFIGS["llama"] = tiny_config(**SMALL, num_key_value_heads=1, rms_norm_eps=1e-3)
CONFIGS["t5"] = tiny_config(**SMALL, relative_attention_num_buckets=8)

IDS = padded_batch(segments=False)


def small_llama(seed=0):
    return randomize_weights(kwiden.build_transformer_model(CONFIGS["llama"], model="llama"), seed)


def renamed(model, name="chat"):
    model.name = name
    return model


def saved_model_type(model, folder):
    return json.loads((kwiden.save_checkpoint(model, folder) / "config.json").read_text())["model_type"]


@pytest.mark.parametrize("name", ["bert", "gpt", "llama", "mistral", "qwen2", "roformer", "t5"])
def test_every_builder_records_its_family(name):
    model = kwiden.build_transformer_model(CONFIGS[name], model=name)
    assert isinstance(model, FamilyModel) and model.family == name and model.get_config()["family"] == name
    assert family_of(renamed(model)) is FAMILIES[name]


@pytest.mark.filterwarnings("ignore:This LLaMA treats token id 0 as padding")
def test_a_renamed_llama_is_still_a_llama_and_saves_as_one(tmp_path):
    llama = small_llama()
    by_assignment = renamed(small_llama())
    rebuilt = FamilyModel(llama.inputs, llama.outputs, name="chat", family=llama.family)
    for model in (by_assignment, rebuilt):
        assert model.name == "chat" and family_of(model) is FAMILIES["llama"]
    assert saved_model_type(rebuilt, tmp_path / "chat") == "llama"
    reloaded = kwiden.build_transformer_model(checkpoint_path=tmp_path / "chat")
    assert reloaded.name == "llama" and reloaded.family == "llama"
    np.testing.assert_allclose(numpy_outputs(reloaded, IDS)[0], numpy_outputs(llama, IDS)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:This LLaMA treats token id 0 as padding")
@pytest.mark.parametrize("how", [dict(k=2), dict(depth=2), dict(k=2, num_layers=3)])
def test_a_renamed_llama_grows_into_a_llama(tmp_path, how):
    chat = renamed(small_llama())
    big = kwiden.grow(chat, heads="count", **how)
    assert isinstance(big, FamilyModel) and (big.name, big.family) == ("chat", "llama")
    assert family_of(big) is FAMILIES["llama"]
    assert saved_model_type(big, tmp_path / "big") == "llama"


@pytest.mark.backends
def test_the_family_survives_a_keras_file_and_its_growth(tmp_path):
    chat = renamed(small_llama())
    chat.save(tmp_path / "chat.keras")
    loaded = keras.saving.load_model(tmp_path / "chat.keras")
    assert isinstance(loaded, FamilyModel) and (loaded.name, loaded.family) == ("chat", "llama")
    np.testing.assert_array_equal(numpy_outputs(loaded, IDS)[0], numpy_outputs(chat, IDS)[0])
    big = kwiden.grow(loaded, 2, heads="count")
    assert (big.name, big.family) == ("chat", "llama")
    big.save(tmp_path / "big.keras")
    assert family_of(keras.saving.load_model(tmp_path / "big.keras")) is FAMILIES["llama"]
    assert FamilyModel.from_config(chat.get_config()).family == "llama"
    assert keras.models.model_from_json(chat.to_json()).family == "llama"


def test_a_keras_file_saved_before_families_were_recorded_reads_its_name(tmp_path):
    """Before, the builders returned plain functional models: what `keras.Model` saves now."""
    llama = small_llama()
    for name, family in (("llama", "llama"), ("chat", "bert")):
        keras.Model(llama.inputs, llama.outputs, name=name).save(tmp_path / f"{name}.keras")
        old = keras.saving.load_model(tmp_path / f"{name}.keras")
        assert not isinstance(old, FamilyModel) and "family" not in old.get_config()
        assert family_of(old) is FAMILIES[family]
        grown = kwiden.grow(old, 2, heads="count")
        assert not isinstance(grown, FamilyModel) and family_of(grown) is FAMILIES[family]


def test_a_model_built_by_hand_is_read_by_its_name_until_it_records_a_family():
    llama = small_llama()
    assert family_of(keras.Model(llama.inputs, llama.outputs, name="llama")) is FAMILIES["llama"]
    by_hand = keras.Model(llama.inputs, llama.outputs, name="chat")
    assert family_of(by_hand) is FAMILIES["bert"]  # as kwiden read every model before it had families
    recorded = recording(by_hand, "llama")
    assert isinstance(recorded, FamilyModel) and recorded.name == "chat" and family_of(recorded) is FAMILIES["llama"]
    assert [a is b for a, b in zip(recorded.layers, by_hand.layers)] == [True] * len(by_hand.layers)


def test_a_family_whose_builder_returns_a_plain_model_gets_it_recorded():
    def plain_bert(config, name, **flags):
        built = bert.build_bert(config, name=name, **flags)
        return keras.Model(built.inputs, built.outputs, name=name)

    plain = Family("plain-bert", plain_bert, defaults=bert.DEFAULTS, flags=bert.FLAGS)
    model = kwiden.build_transformer_model(tiny_config(**SMALL), model=plain)
    assert isinstance(model, FamilyModel) and (model.name, model.family) == ("plain-bert", "plain-bert")
    assert family_of(model) is FAMILIES["bert"]  # a family not registered is read as BERT, as by name


def test_the_record_wins_over_the_name():
    gpt = renamed(kwiden.build_transformer_model(CONFIGS["gpt"], model="gpt"), "llama")
    assert family_of(gpt) is FAMILIES["gpt"]


def test_admin_fold_keeps_the_family():
    admin = renamed(randomize_weights(kwiden.build_transformer_model(CONFIGS["gpt"], model="gpt", residual="admin")))
    plain = kwiden.training.admin.fold(admin)
    assert isinstance(plain, FamilyModel) and (plain.name, plain.family) == ("chat", "gpt")
    np.testing.assert_allclose(numpy_outputs(plain, IDS)[0], numpy_outputs(admin, IDS)[0], rtol=1e-4, atol=1e-5)


def test_clone_model_keeps_the_class_and_the_name():
    """Keras clones a functional model from its inputs, outputs and name alone: the name says the family."""
    llama = small_llama()
    clone = keras.models.clone_model(llama)
    assert isinstance(clone, FamilyModel) and clone.name == "llama" and family_of(clone) is FAMILIES["llama"]


def test_a_family_is_a_name():
    x = keras.Input((4,))
    with pytest.raises(TypeError, match=r"`family` is a registered family's name \(a str\) or None, got Family"):
        FamilyModel(x, keras.layers.Dense(2)(x), family=FAMILIES["llama"])
    assert FamilyModel(x, keras.layers.Dense(2)(x)).family is None


def test_the_registry_fills_whole_or_not_at_all(monkeypatch):
    """A failed first import of kwiden's families (a Ctrl-C in Keras' slow first import) leaves the registry to be
    filled again, not half filled; its names are known without importing any."""
    from kwiden.models import family as families

    registry = families._Registry()
    monkeypatch.setattr(families, "BUILT_IN", {**families.BUILT_IN, "broken": ("kwiden.models.nonesuch", "X")})
    assert registry.names() == sorted(families.BUILT_IN)
    with pytest.raises(ModuleNotFoundError, match="kwiden.models.nonesuch"):
        list(registry)
    monkeypatch.setattr(
        families, "BUILT_IN", {name: where for name, where in families.BUILT_IN.items() if name != "broken"}
    )
    assert list(registry) == list(families.BUILT_IN) and registry["t5"] is FAMILIES["t5"]
    copied = registry.copy()
    copied["mine"] = FAMILIES["gpt"]
    assert "mine" in copied and "mine" not in registry
