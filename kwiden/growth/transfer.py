"""Stage 4 of `grow`: the grown weights into the grown layers.

One weight at a time (`grown_value`), each with a random generator of its
own (`weight_rng`, seeded by the growth's seed and the weight's path): the
draws of a weight do not depend on which weights were grown before it, so
`kwiden.grow_checkpoint`, which grows a checkpoint's tensors one by one in
the file's order, gives the same values bit for bit.
"""

import hashlib

import keras
import numpy as np

from kwiden.growth.expansion import expand


def transfer(placed, spread=0.0, seed=0):
    """Give every placed layer its source's weights, grown (`spread` splits
    inputs unequally, drawn from `seed`; docs/symmetry.md); a copied block's
    branch ends start with their output weights at zero, and a fresh
    layer's weights are drawn from its own initializers."""
    for entry in placed:
        if entry.fresh:
            if entry.layer.weights:
                entry.layer.set_weights(initialized_weights(entry.layer, seed))
        elif entry.plan.weights:
            sources = [keras.ops.convert_to_numpy(w) for w in entry.plan.weights]
            entry.layer.set_weights([grown_value(entry, i, value, spread, seed) for i, value in enumerate(sources)])


def grown_value(entry, index, value, spread=0.0, seed=0):
    """The value of weight `index` of a placed layer (`rebuild.Placed`), grown
    from its source's `value` (in kwiden's layout): expanded along the
    plan's axes with its own generator (`weight_rng`), or zeros where a
    copied block's branch ends (`residual_output_weights`)."""
    variable = entry.layer.weights[index]
    if entry.zeroed and variable.name in entry.layer.residual_output_weights:
        return np.zeros(tuple(variable.shape), np.asarray(value).dtype)
    return expand(value, entry.plan.axes[index], spread, weight_rng(seed, variable.path))


def initialized_weights(layer, seed=0):
    """Values for `layer`'s weights drawn by a new layer of its config, its
    own initializers seeded by the growth's `seed` and the initializer's
    place (`weight_rng`): a newly initialised block, the same for the same
    seed."""
    config = {**layer.get_config(), "name": layer.name + "_fresh"}
    for key, value in config.items():
        if key.endswith("_initializer") and isinstance(value, dict) and "seed" in value.get("config", {}):
            drawn = int(weight_rng(seed, f"{layer.name}/{key}").integers(0, 2**31))
            config[key] = {**value, "config": {**value["config"], "seed": drawn}}
    twin = layer.__class__.from_config(config)
    twin.build_from_config(layer.get_build_config())
    return twin.get_weights()


def weight_rng(seed, path):
    """The random generator of one weight: seeded by the growth's `seed` (an
    integer) and the weight's path in the grown model (`Transformer-0-FeedForward/inner_kernel`).

    >>> float(weight_rng(0, "a/kernel").uniform()) == float(weight_rng(0, "a/kernel").uniform())
    True
    """
    words = np.frombuffer(hashlib.sha256(path.encode("utf-8")).digest()[:16], dtype="<u4")
    return np.random.default_rng([int(seed), *map(int, words)])
