"""The functional model kwiden's builders return: a `keras.Model` that records
the family it was built as, in its config.

`kwiden.models.family_of` reads the record first, so a LLaMA stays a LLaMA
under any name. Growth, depth growth and `kwiden.training.admin.fold` rebuild through
`functional_like`, which keeps the class and the record; `model.save` and
`keras.saving.load_model` keep it in the config (with kwiden imported, which
registers the class). A plain `keras.Model`, built by hand or saved before
kwiden recorded families, has no record; `family_of` falls back to its name.

This module imports only Keras (and `kwiden.keras_internals`), so
`kwiden.growth.graph` can use it.
"""

import keras

from kwiden import keras_internals


@keras.saving.register_keras_serializable(package="kwiden")
class FamilyModel(keras.Model):
    """A functional model that records its family: `FamilyModel(inputs,
    outputs, name=…, family="llama")`.

    `family` is a registered family's name (`kwiden.models.FAMILIES`), or None
    for no record. It is an attribute (`model.family`) and a key of
    `get_config()`, so it survives renames (`model.name = "chat"`), growth,
    `model.save` / `keras.saving.load_model` and `model.to_json()`.
    `keras.models.clone_model` keeps the class and the name but not the
    record (Keras rebuilds a clone from its inputs, outputs and name alone);
    set `clone.family = model.family` to keep it.

    >>> x = keras.Input((4,))
    >>> model = FamilyModel(x, keras.layers.Dense(2)(x), name="chat", family="llama")
    >>> model.family, model.get_config()["family"]
    ('llama', 'llama')
    >>> FamilyModel.from_config(model.get_config()).family
    'llama'
    """

    def __init__(self, *args, family=None, **kwargs):
        # `*args, **kwargs`: Keras reads the class as having a functional constructor (its
        # `functional_like_constructor`), so it serializes the graph and revives the model through it.
        super().__init__(*args, **kwargs)
        self.family = checked_family(family)

    def get_config(self):
        config = super().get_config()
        if self.family is not None:
            config["family"] = self.family
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        family = config.pop("family", None)
        model = super().from_config(config, custom_objects=custom_objects)
        model.family = checked_family(family)
        return model


def checked_family(family):
    """`family`, a family's name or None; anything else is refused."""
    if family is not None and not isinstance(family, str):
        raise TypeError(f"`family` is a registered family's name (a str) or None, got {type(family).__name__}.")
    return family


def functional_like(model, inputs, outputs):
    """The functional model of `inputs` → `outputs` named as `model`, of
    its class and with its family where `model` is a `FamilyModel`; a plain
    `keras.Model` otherwise. The folder it was loaded from
    (`checkpoint_folder`, whose tokenizer `kwiden.save_checkpoint` copies)
    goes with it: growth leaves the tokenizer true."""
    if isinstance(model, FamilyModel):
        made = FamilyModel(inputs, outputs, name=model.name, family=model.family)
    else:
        made = keras.Model(inputs, outputs, name=model.name)
    if getattr(model, "checkpoint_folder", None) is not None:
        made.checkpoint_folder = model.checkpoint_folder
    return made


def recording(model, family):
    """`model` recording `family` (a name): itself, its record set, where it
    is a `FamilyModel`; a `FamilyModel` on its graph (the same layers) where
    it is a plain functional model (`keras.Model(inputs, outputs)`);
    itself, unrecorded, otherwise (a model of another class keeps it)."""
    family = checked_family(family)
    if isinstance(model, FamilyModel):
        model.family = family
        return model
    if not keras_internals.is_plain_functional(model):
        return model
    return FamilyModel(model.inputs, model.outputs, name=model.name, family=family)
