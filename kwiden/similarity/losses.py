"""SimBERT's contrastive loss on sentence vectors: each row's partner found among the batch's other
rows by cosine, and RoFormer-Sim's distillation of a teacher's cosines."""

import keras
from keras import ops

from kwiden.similarity import DISTILL_WEIGHT, SCALE  # noqa: F401 (DISTILL_WEIGHT: read here before)


@keras.saving.register_keras_serializable(package="kwiden")
class InBatchSimilarity(keras.losses.Loss):
    """Cross-entropy of each row's partner (rows 2i and 2i + 1 are partners)
    among the batch's other rows, by the cosines of their sentence vectors
    (`y_pred`, a row a row) times `scale`; the partners are the row order.

    `y_true` is `(batch, 2·batch)`: the teacher's cosines (zeros without a
    teacher), then 1 where a column holds the row's own sentence again, of
    another record (a corpus of adjacent lines repeats sentences across
    records): such a column is no negative, and is left out of the row's
    softmax. A `(batch,)` `y_true` says neither. With `distill_weight`, plus
    that times each row's mean squared difference of its cosines to the
    other rows from the teacher's."""

    def __init__(self, scale=SCALE, distill_weight=0.0, name="in_batch_similarity", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale, self.distill_weight = scale, distill_weight

    def call(self, y_true, y_pred):
        cosines = self.cosines(y_pred)
        teacher, repeats = self.targets(y_true, cosines)
        loss = self.softmax_loss(cosines, repeats)
        if self.distill_weight:
            loss = loss + self.distill_weight * self.distill_loss(teacher, cosines)
        return loss

    @staticmethod
    def targets(y_true, cosines):
        """`(the teacher's cosines, the repeated sentences' mask)` of a `(batch, 2·batch)` `y_true`; `(None, None)`
        of a `(batch,)` one."""
        if len(y_true.shape) < 2:
            return None, None
        rows = ops.shape(cosines)[0]
        y_true = ops.cast(y_true, cosines.dtype)
        return y_true[:, :rows], y_true[:, rows:]

    @staticmethod
    def cosines(vectors):
        """The cosines of the rows' sentence vectors, a row a row."""
        vectors = vectors / ops.sqrt(ops.sum(ops.square(vectors), axis=-1, keepdims=True) + 1e-12)
        return ops.matmul(vectors, ops.transpose(vectors))

    def softmax_loss(self, cosines, repeats=None):
        rows = ops.shape(cosines)[0]
        masked = ops.eye(rows, dtype=cosines.dtype)  # a row is not its own partner, nor its own sentence's
        masked = masked if repeats is None else masked + repeats
        scores = cosines * self.scale - masked * 1e12
        index = ops.arange(rows, dtype="int32")
        partners = index + 1 - 2 * (index % 2)  # 0 ↔ 1, 2 ↔ 3, …
        return keras.losses.sparse_categorical_crossentropy(partners, scores, from_logits=True)

    @staticmethod
    def distill_loss(teacher, cosines):
        """Each row's mean of `(teacher's cosine − cosine)²` over the other rows."""
        rows = ops.shape(cosines)[0]
        others = 1 - ops.eye(rows, dtype=cosines.dtype)
        squared = ops.square(ops.cast(teacher, cosines.dtype) - cosines) * others
        return ops.sum(squared, axis=-1) / ops.cast(rows - 1, cosines.dtype)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale, "distill_weight": self.distill_weight}
