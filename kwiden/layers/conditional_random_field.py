import keras
from keras import ops

from kwiden.growth.expansion import UNCHANGED, GrowthError
from kwiden.layers.expandable import Expandable
from kwiden.layers.spans import MASKED, check_positive_int
from kwiden.ner.losses import ConditionalRandomFieldLoss
from kwiden.ner.targets import nan_unless, refuse_where_concrete

# A position whose every tag scores at or below this is padding (bert4keras's test on `y_pred`).
PADDED_BELOW = -1e6


def time_major(values, mask):
    """`values` `(batch, seq, n)` and the mask as one `(seq, batch, n + 1)` tensor
    to scan over: TensorFlow's scan fails on several inputs of unknown length."""
    return ops.transpose(ops.concatenate([values, ops.cast(mask, values.dtype)[..., None]], axis=-1), (1, 0, 2))


def split(x):
    """One step of `time_major`: the values `(batch, n)` and the mask `(batch,)`."""
    return x[:, :-1], ops.greater(x[:, -1], 0.5)


@keras.saving.register_keras_serializable(package="kwiden")
class ConditionalRandomField(Expandable, keras.layers.Layer):
    """A linear-chain CRF over per-token tag scores (BERT+CRF, as bert4keras).

    The layer holds the transition scores `T[i, j]` (tag i followed by tag j)
    and passes its input, the emissions `(batch, seq, num_tags)` of a
    `Dense(num_tags)`, through. A tag path `y` scores
    `Σ_t e[t, y_t] + Σ_t T[y_{t-1}, y_t]`; training maximises its
    log-likelihood against all paths (`negative_log_likelihood`, or the Keras
    loss `loss` for `compile`), prediction takes the best path (`decode`, Viterbi). All in
    `keras.ops`: TensorFlow, JAX and PyTorch alike.

    Padding: positions where a mask (the input's Keras mask, or `mask`
    `(batch, seq)`, True at real tokens, passed to the call) is False leave
    the path: the chain runs over the real positions in order. The call writes
    -1e12 at padded positions, so that `loss(y_true, y_pred)` finds the
    padding from the model's output alone, as bert4keras's `sparse_loss` does;
    the methods take `mask` explicitly and otherwise read the same marks.

    `lr_multiplier` (bert4keras's `crf_lr_multiplier`, often 100 to 1000 for
    BERT+CRF): the transitions are stored divided by it, so gradient steps move
    them that much faster than the encoder's weights.

    Growth: the CRF reads tag scores, which do not grow; it refuses a grown
    input (put a `Dense(num_tags)` before it, which growth treats as a head).

    Example:

    >>> import numpy as np
    >>> crf = ConditionalRandomField(num_tags=3)
    >>> emissions = np.random.default_rng(0).normal(size=(2, 4, 3)).astype("float32")
    >>> mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    >>> scores = crf(emissions, mask=mask)
    >>> tags = crf.decode(scores)
    >>> tuple(tags.shape), [int(t) for t in tags[1, 2:]]
    ((2, 4), [0, 0])
    >>> tuple(crf.negative_log_likelihood(emissions, tags, mask).shape)
    (2,)
    """

    def __init__(self, num_tags, lr_multiplier=1.0, transitions_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_tags = check_positive_int(num_tags, "num_tags", "ConditionalRandomField")
        if isinstance(lr_multiplier, bool) or not isinstance(lr_multiplier, (int, float)) or not lr_multiplier > 0:
            raise ValueError(
                f"ConditionalRandomField: `lr_multiplier` must be a positive number, got lr_multiplier={lr_multiplier!r}."
            )
        self.lr_multiplier = float(lr_multiplier)
        self.transitions_initializer = keras.initializers.get(transitions_initializer)
        self.crf_loss = ConditionalRandomFieldLoss(self)

    def build(self, input_shape):
        if input_shape[-1] != self.num_tags:
            raise ValueError(
                f"ConditionalRandomField '{self.name}' has num_tags={self.num_tags} but its input has "
                f"{input_shape[-1]} scores per token (shape {tuple(input_shape)}): give it a Dense(num_tags)'s output."
            )
        initializer = self.transitions_initializer

        def scaled(shape, dtype=None):
            return initializer(shape, dtype) / self.lr_multiplier

        self.stored_transitions = self.add_weight(shape=(self.num_tags,) * 2, initializer=scaled, name="transitions")

    @property
    def transitions(self):
        """`T[i, j]`, the score of tag i followed by tag j (float32)."""
        return ops.cast(self.stored_transitions, "float32") * self.lr_multiplier

    def call(self, inputs, mask=None):
        if mask is None:
            return inputs
        return ops.where(ops.cast(mask, "bool")[..., None], inputs, ops.cast(MASKED, inputs.dtype))

    def compute_mask(self, inputs, mask=None):
        return None  # the padding is in the scores

    def compute_output_shape(self, input_shape):
        return input_shape

    def _prepare(self, emissions, mask):
        """Emissions in float32, zero at padding, and the mask (read from the marks if not given)."""
        emissions = ops.cast(emissions, "float32")
        mask = ops.all(ops.greater(emissions, PADDED_BELOW), axis=-1) if mask is None else ops.cast(mask, "bool")
        return ops.where(mask[..., None], emissions, 0.0), mask

    def log_partition(self, emissions, mask=None):
        """`log Σ_y exp(score(y))` over all tag paths of each row, `(batch,)`;
        0 for a row without a real position (the forward algorithm)."""
        emissions, mask = self._prepare(emissions, mask)
        transitions = self.transitions

        def step(carry, x):
            alpha, started = carry
            scores, real = split(x)
            moved = ops.logsumexp(alpha[:, :, None] + transitions[None], axis=1) + scores
            alpha = ops.where(real[:, None], ops.where(started[:, None], moved, scores), alpha)
            return (alpha, ops.logical_or(started, real)), None

        init = (ops.zeros_like(emissions[:, 0]), ops.zeros_like(mask[:, 0]))
        (alpha, started), _ = ops.scan(step, init, time_major(emissions, mask))
        return ops.where(started, ops.logsumexp(alpha, axis=-1), 0.0)

    def path_score(self, emissions, tags, mask=None):
        """The score of the tag path `tags` `(batch, seq)` in each row, `(batch,)`:
        its emissions and the transitions between consecutive real positions.
        A tag at a real position that is not a tag id (a whole number from 0 to
        num_tags − 1) is refused (`_tag_ids`); padding's tags are not read."""
        emissions, mask = self._prepare(emissions, mask)
        tags, read = self._tag_ids(tags, mask)
        chosen = ops.one_hot(tags, self.num_tags, dtype="float32")
        emitted = ops.sum(ops.where(mask[..., None], emissions * chosen, 0.0), axis=(1, 2))
        transitions = self.transitions

        def step(carry, x):
            previous, started, total = carry
            current, real = split(x)
            moved = ops.sum(ops.matmul(previous, transitions) * current, axis=-1)
            total = total + ops.where(ops.logical_and(real, started), moved, 0.0)
            previous = ops.where(real[:, None], current, previous)
            return (previous, ops.logical_or(started, real), total), None

        init = (ops.zeros_like(chosen[:, 0]), ops.zeros_like(mask[:, 0]), ops.zeros_like(emitted))
        (_, _, moved), _ = ops.scan(step, init, time_major(chosen, mask))
        return nan_unless(read, emitted + moved)

    def _tag_ids(self, tags, mask):
        """`tags` as int32 ids (0 where one is not a tag id: one-hot would make it
        all zeros, a path without that emission, and a finite, wrong score), and
        the rows whose real positions hold tag ids only: their scores are kept,
        the others' are NaN. Where the tags are concrete, the first bad one is a
        `ValueError` naming the layer, the value, its index and the range."""
        values = ops.cast(tags, "float32")
        whole = ops.equal(values, ops.floor(values))
        is_id = ops.logical_and(whole, ops.logical_and(ops.greater_equal(values, 0), ops.less(values, self.num_tags)))
        read = ops.logical_or(is_id, ops.logical_not(mask))
        refuse_where_concrete(values, read, lambda value, index: (
            f"ConditionalRandomField '{self.name}': tag {value:g} at {index} is not a tag id, "
            f"0 to {self.num_tags - 1} (num_tags={self.num_tags})."
        ))  # fmt: skip
        return ops.cast(ops.where(is_id, values, 0.0), "int32"), ops.all(read, axis=-1)

    def negative_log_likelihood(self, emissions, tags, mask=None):
        """`log Z − score(tags)` of each row, `(batch,)`: what training minimises."""
        return self.log_partition(emissions, mask) - self.path_score(emissions, tags, mask)

    @property
    def loss(self):
        """The negative log-likelihood as a Keras loss, for `model.compile(loss=crf.loss)`
        on a model whose output is this layer's (`kwiden.ner.losses.ConditionalRandomFieldLoss`):
        `y_true` holds tag ids `(batch, seq)`; padding is read from `y_pred`'s marks."""
        return self.crf_loss

    def decode(self, emissions, mask=None):
        """The best tag path of each row (Viterbi), int32 `(batch, seq)`; 0 at padded positions."""
        emissions, mask = self._prepare(emissions, mask)
        transitions = self.transitions
        stay = ops.broadcast_to(ops.arange(self.num_tags, dtype="int32")[None], ops.shape(emissions[:, 0]))

        def forward(carry, x):
            best, started, _ = carry
            scores, real = split(x)
            candidates = best[:, :, None] + transitions[None]
            moved = ops.max(candidates, axis=1) + scores
            pointers = ops.cast(ops.argmax(candidates, axis=1), "int32")
            pointers = ops.where(ops.logical_and(real, started)[:, None], pointers, stay)
            best = ops.where(real[:, None], ops.where(started[:, None], moved, scores), best)
            carry = (best, ops.logical_or(started, real), pointers)
            return carry, carry  # TensorFlow's scan emits what it carries: the pointers ride along

        init = (ops.zeros_like(emissions[:, 0]), ops.zeros_like(mask[:, 0]), stay)
        (best, _, _), (_, _, pointers) = ops.scan(forward, init, time_major(emissions, mask))

        def backward(tag, pointer):
            return ops.take_along_axis(pointer, tag[:, None], axis=1)[:, 0], tag

        _, tags = ops.scan(backward, ops.cast(ops.argmax(best, axis=-1), "int32"), pointers, reverse=True)
        return ops.where(mask, ops.transpose(tags), 0)

    def get_config(self):
        return {
            **super().get_config(),
            "num_tags": self.num_tags,
            "lr_multiplier": self.lr_multiplier,
            "transitions_initializer": keras.initializers.serialize(self.transitions_initializer),
        }

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        if input_space is not None and input_space.expanded:
            raise GrowthError(
                f"ConditionalRandomField '{self.name}' reads tag scores, which do not grow, but its input is grown "
                f"({input_space}): put a Dense(num_tags) between the hidden states and the CRF."
            )
        return UNCHANGED

    def get_expanded_weight_axes(self, k, input_space):
        self.get_expanded_output_space(k, input_space)
        return {"transitions": [None, None]}
