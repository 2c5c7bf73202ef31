"""Growing KerasHub models: `BertBackbone`, `RobertaBackbone`, `GPT2Backbone`,
and the tasks whose logits are tied to the token embedding, `GPT2CausalLM` and
`BertMaskedLM`.

The grown model is the same KerasHub class built from the widened config; its
weights are the source's expanded by the axes kwiden's own layers declare
(an `ExpandableMultiHeadAttention` twin for KerasHub's attention, a
`FeedForward` twin for its two dense layers, …), so the math is the one of
docs/widening.md. KerasHub fixes each LayerNorm's epsilon in code rather than in the
config; the grown model's norms get ε/k set on the live layers (exact), which
a save and reload of the KerasHub model would put back to the class default
(a change of order ε).
"""

import keras
import numpy as np

from kwiden.growth.expansion import GrowthError, Space, expand, grown_size
from kwiden.growth.verify import VerifyReport, compare_output
from kwiden.keras_internals import all_layers
from kwiden.layers import (
    ExpandableDense,
    ExpandableEmbedding,
    ExpandableLayerNormalization,
    ExpandableMultiHeadAttention,
    FeedForward,
)

BACKBONES = ("BertBackbone", "RobertaBackbone", "GPT2Backbone")
TASKS = ("GPT2CausalLM", "BertMaskedLM")


def grow_keras_hub(model, growth, spread=0.0, rng=None):
    """A KerasHub model of `model`'s class, widened by `growth`, computing the same function."""
    name = type(model).__name__
    if name not in BACKBONES + TASKS:
        raise GrowthError(
            f"kwiden grows KerasHub's {', '.join(BACKBONES + TASKS)}; not {name}. For a classifier, "
            "grow its backbone and build the task on the grown one."
        )
    backbone = model.backbone if name in TASKS else model
    config = backbone.get_config()
    heads, hidden = config["num_heads"], config["hidden_dim"]
    big_config = {
        **config,
        "hidden_dim": grown_size(hidden, growth.k, f"{name} hidden_dim"),
        "intermediate_dim": grown_size(config["intermediate_dim"], growth.ffn_factor, f"{name} intermediate_dim"),
    }
    if growth.heads == "count":
        big_config["num_heads"] = Space.copy(growth.k).grown_size(heads, f"{name} num_heads")
    elif not isinstance(growth.k, int):
        raise GrowthError(f"{name}: a non-integer factor grows the number of heads only: pass heads='count'.")
    twins = _twins(heads, hidden // heads, config["intermediate_dim"])
    spaces = {"stream": Space.stream(growth.k), "copy": Space.copy(growth.k)}
    axes = [_axes_of(variable.path, twins, growth, spaces) for variable in model.weights]
    # ε̃/ε of a norm, by the space of its input (this also refuses LayerNorm where it cannot stay exact)
    epsilons = {name: twins["norm"].get_expanded_config(growth, space)["epsilon"] for name, space in spaces.items()}
    big_backbone = type(backbone).from_config(big_config)
    big = type(model)(backbone=big_backbone, preprocessor=model.preprocessor) if name in TASKS else big_backbone
    big.set_weights([expand(keras.ops.convert_to_numpy(w), a, spread, rng) for w, a in zip(model.weights, axes)])
    for layer in all_layers(big):
        if isinstance(layer, keras.layers.LayerNormalization):
            layer.epsilon = layer.epsilon * epsilons[_entry(layer.gamma.path)[2]]
    return big


def _twins(heads, head_size, intermediate):
    """kwiden layers that say how each kind of KerasHub weight grows."""
    return {
        "attention": ExpandableMultiHeadAttention(heads, head_size),
        "ffn": FeedForward(intermediate, activation="gelu"),
        "norm": ExpandableLayerNormalization(epsilon=1.0),
        "embedding": ExpandableEmbedding(1, 1),
        "pooler": ExpandableDense(1, activation="tanh"),
        "mlm_dense": ExpandableDense(1, activation="gelu"),
    }


# Path suffix -> (twin, the twin's weight of that role, the twin's input space); first match wins.
# The MLM head's norm reads its GeLU dense: a pure copy, so its ε stays.
SUFFIXES = {
    "mlm_head/intermediate_dense/kernel": ("mlm_dense", "kernel", "stream"),
    "mlm_head/intermediate_dense/bias": ("mlm_dense", "bias", "stream"),
    "mlm_head/intermediate_layer_norm/gamma": ("norm", "gamma", "copy"),
    "mlm_head/intermediate_layer_norm/beta": ("norm", "beta", "copy"),
    "mlm_head/output_bias": (None, None, None),  # the vocabulary does not grow
    "query/kernel": ("attention", "query_kernel", "stream"), "query/bias": ("attention", "query_bias", "stream"),
    "key/kernel": ("attention", "key_kernel", "stream"), "key/bias": ("attention", "key_bias", "stream"),
    "value/kernel": ("attention", "value_kernel", "stream"), "value/bias": ("attention", "value_bias", "stream"),
    "attention_output/kernel": ("attention", "output_kernel", "stream"), "attention_output/bias": ("attention", "output_bias", "stream"),
    "feedforward_intermediate_dense/kernel": ("ffn", "inner_kernel", "stream"), "feedforward_intermediate_dense/bias": ("ffn", "inner_bias", "stream"),
    "feedforward_output_dense/kernel": ("ffn", "output_kernel", "stream"), "feedforward_output_dense/bias": ("ffn", "output_bias", "stream"),
    "layer_norm/gamma": ("norm", "gamma", "stream"), "layer_norm/beta": ("norm", "beta", "stream"),
    "embedding/embeddings": ("embedding", "embeddings", "stream"),
    "pooled_dense/kernel": ("pooler", "kernel", "stream"), "pooled_dense/bias": ("pooler", "bias", "stream"),
}  # fmt: skip


def _entry(path):
    for suffix, entry in SUFFIXES.items():
        if path.endswith(suffix):
            return entry
    raise GrowthError(f"kwiden does not know how KerasHub's weight '{path}' grows.")


def _axes_of(path, twins, growth, spaces):
    twin, weight, space = _entry(path)
    return [None] if twin is None else twins[twin].get_expanded_weight_axes(growth, spaces[space])[weight]


def check_options(**options):
    """Growth options that only kwiden's own functional models support."""
    given = [name for name, value in options.items() if value]
    if given:
        raise GrowthError(f"kwiden.grow on a KerasHub model does not support {', '.join(given)} yet.")


def config_of(model):
    """The backbone config of a KerasHub backbone or task."""
    return getattr(model, "backbone", model).get_config()


def output_spaces(model, growth):
    """How each output of a grown KerasHub model holds the small one's."""
    if type(model).__name__ in TASKS:
        return {None: Space()}  # tied logits: the vocabulary does not grow
    # BertBackbone returns a dict; RobertaBackbone and GPT2Backbone the sequence.
    return {
        "sequence_output": Space.stream(growth.k),
        "pooled_output": Space.copy(growth.k),
        None: Space.stream(growth.k),
    }


def compare(small, big, inputs, growth, rtol):
    """A `VerifyReport` of `big` against `small`, output by output, each carried
    into its space (no layer-by-layer search: KerasHub's layers are nested)."""

    def run(model):
        values = model(inputs, training=False)
        values = values if isinstance(values, dict) else {None: values}
        return {key: np.asarray(keras.ops.convert_to_numpy(value), np.float64) for key, value in values.items()}

    small_values, big_values = run(small), run(big)
    spaces = output_spaces(small, growth)
    outputs = [
        compare_output(key or type(small).__name__, spaces[key], value, big_values[key])
        for key, value in small_values.items()
    ]
    return VerifyReport(growth.k, rtol, outputs, None, layers_compared=False)
