"""A short learned depth operator after depth growth, as LiGO learns one
(Wang et al. 2023, "Learning to Grow Pretrained Models", arXiv 2303.00980).

Each weight of the grown model's block `l` becomes its grown value plus a
learned mix of the same weight in every block `j` of the small model:

    W_l = G_l + Σ_j c[l, j] · S_j

one coefficient matrix `c` (blocks of the grown model × blocks of the small)
for each kind of block weight (the query kernel, the FFN's output bias, …).
`c` starts at zero, so the operator starts as the growth it refines (exact,
with identity blocks), and only `c` trains, for a few updates, on the loss
of the grown model. The grown model's weights are then set to the result,
and training goes on from there. The mix changes the function the growth
preserved, which is why it is learned on the training loss.

LiGO also learns width operators; kwiden learns the depth mix only
(docs/growth-that-pays.md#a-learned-operator).
"""

import keras
import numpy as np

from kwiden import naming
from kwiden.optimizers import Adam

# The operator's rate: its coefficients are mixing weights of order one.
LEARNING_RATE = 1e-2


def _block_key(path):
    """`(block index, the path with its block index taken out)`, or None outside the blocks."""
    index = naming.block_index(path)
    return None if index is None else (index, naming.renumbered(path, 0))


def _grown_blocks(small, big):
    """The number of blocks of `big`, once `small` and `big` are checked to be a model and a deeper one."""
    for name, model in (("small", small), ("big", big)):
        if not isinstance(model, keras.Model):
            hint = (
                ": pass its .model (grow(..., optimizer=) returns the model and its optimizer)"
                if hasattr(model, "optimizer")
                else ""
            )
            raise ValueError(
                f"The learned depth operator's `{name}` must be a Keras model, got {type(model).__name__}{hint}."
            )
    small_blocks = naming.count_blocks(layer.name for layer in small.layers)
    big_blocks = naming.count_blocks(layer.name for layer in big.layers)
    if not 0 < small_blocks < big_blocks:
        raise ValueError(
            f"The learned depth operator mixes the blocks of `small` ({small_blocks}) into those of `big` "
            f"({big_blocks}), which must be deeper: pass the small model first and the model kwiden.grow(small, "
            "depth=...) made from it second."
        )
    record = getattr(big, "growth_record", None)
    if record is None or record.source is not small:
        raise ValueError(
            f"The learned depth operator starts from `big` as kwiden.grow made it from `small`; model '{big.name}' "
            f"{'was grown from another model' if record is not None else 'was not grown by kwiden.grow'}: pass "
            "kwiden.grow(small, depth=...) of this `small`."
        )
    return big_blocks


class DepthOperator(keras.Model):
    """The grown model with its block weights as `G + c·S` (see the module).

    Only the coefficients are weights of this model: the grown model is
    called statelessly with the weights they make, so gradients reach them
    on every backend.
    """

    def __init__(self, small, big, **kwargs):
        # float32 mixing: under a mixed policy the sum is taken on the weights as stored, not on rounded copies
        # (the grown model's own layers still compute in its policy).
        super().__init__(dtype="float32", **kwargs)
        big_blocks = _grown_blocks(small, big)
        small_blocks = {}
        for variable in small.trainable_variables:
            key = _block_key(variable.path)
            if key is not None:
                small_blocks.setdefault(key[1], {})[key[0]] = keras.ops.convert_to_numpy(variable)
        # Functions are not tracked: the big model's weights stay out of this model's, and are read, not copied
        # (they do not change while the operator learns).
        self._call_big = big.stateless_call
        self._big_values = lambda: [v.value for v in big.trainable_variables]
        self._big_non_trainable = lambda: [v.value for v in big.non_trainable_variables]
        self._mixed = []
        self._coefficients = {}
        for variable in big.trainable_variables:
            key = _block_key(variable.path)
            if key is None:
                self._mixed.append(None)
                continue
            index, kind = key
            sources = small_blocks.get(kind)
            if sources is None or any(s.shape != tuple(variable.shape) for s in sources.values()):
                raise ValueError(
                    f"The learned depth operator mixes the small model's blocks into the grown one's, so it needs a "
                    f"depth-only growth: '{variable.path}' {tuple(variable.shape)} has no small-model weight of its shape "
                    f"({kind}). Grow width and depth at different points."
                )
            if kind not in self._coefficients:
                name = kind.replace("/", "_").replace("Transformer-0-", "")
                self._coefficients[kind] = self.add_weight(
                    shape=(big_blocks, len(sources)), initializer="zeros", name=f"mix_{name}"
                )
            stacked = np.stack([sources[j] for j in sorted(sources)])
            self._mixed.append((self._coefficients[kind], index, keras.ops.convert_to_tensor(stacked)))

    def grown_weights(self):
        """The grown model's trainable weights the coefficients make."""
        weights = []
        for grown, mixed in zip(self._big_values(), self._mixed):
            if mixed is None:
                weights.append(grown)
                continue
            coefficients, index, stacked = mixed
            weights.append(grown + keras.ops.tensordot(coefficients[index], stacked, axes=1))
        return weights

    def call(self, inputs):
        outputs, _ = self._call_big(self.grown_weights(), self._big_non_trainable(), inputs)
        return outputs


def learn_depth_operator(small, big, batches, loss, learning_rate=LEARNING_RATE, accum_steps=1):
    """Learn the depth mix of `big` (grown in depth from `small`) on `batches`
    (`(x, y)` pairs, one a micro-step) and set `big`'s weights to it.

    `learning_rate`: the operator's Adam rate.
    Returns the training losses, one a batch. `small` is not modified; the
    grown model is called without dropout while the operator learns.

    Example:

    >>> import kwiden, numpy as np
    >>> small = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2), model="gpt")
    >>> big = kwiden.grow(small, depth=2)
    >>> ids = np.random.default_rng(0).integers(0, 50, (4, 9))
    >>> losses = learn_depth_operator(small, big, [(ids[:, :-1], ids[:, 1:])] * 3,
    ...     keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> len(losses)
    3
    """
    batches = list(batches)
    if len(batches) % accum_steps:
        raise ValueError(
            f"learn_depth_operator: {len(batches)} batches do not make whole updates of accum_steps={accum_steps} "
            "(the last update's gradients would be accumulated and never applied): give a multiple of accum_steps."
        )
    operator = DepthOperator(small, big)
    operator.compile(Adam(learning_rate, accum_steps=accum_steps), loss)
    losses = [float(operator.train_on_batch(x, y, return_dict=True)["loss"]) for x, y in batches]
    for variable, value in zip(big.trainable_variables, operator.grown_weights()):  # all computed before any is set
        variable.assign(value)
    return losses
