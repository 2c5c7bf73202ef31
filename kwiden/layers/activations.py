"""Activations by name: Keras' own, and those Keras has only as an option of
another (GPT-2's `gelu_new` is GeLU's tanh approximation, kwiden's
`"gelu_tanh"`; Keras' `"gelu"` is exact).

>>> import numpy as np
>>> float(get("gelu_tanh")(np.float32(1.0))), name(get("gelu_tanh"))
(0.8411920070648193, 'gelu_tanh')
"""

import keras


@keras.saving.register_keras_serializable(package="kwiden")
def gelu_tanh(x):
    """GeLU's tanh approximation, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`."""
    return keras.activations.gelu(x, approximate=True)


NAMED = {"gelu_tanh": gelu_tanh}


def get(identifier):
    """The activation function `identifier` names (a name, a function, or a
    serialized Keras activation); an unknown name is refused, naming it."""
    if isinstance(identifier, str) and identifier in NAMED:
        return NAMED[identifier]
    try:
        return keras.activations.get(identifier)
    except ValueError:
        raise ValueError(
            f"Unknown activation {identifier!r}: give a Keras activation (gelu, relu, silu, tanh, …) or one of "
            f"kwiden's {sorted(NAMED)}."
        ) from None


def name(activation):
    """The name `get` takes back: kwiden's for its own, else Keras' serialization."""
    for key, function in NAMED.items():
        if activation is function:
            return key
    return keras.activations.serialize(activation)
