"""`kwiden.layers.ConditionalRandomField` against bert4keras' CRF: the negative log-likelihood against
`dense_loss`'s formula and the best paths against `ViterbiDecoder` (tests/layers/ holds them to brute force
over every path; here the authors' forward recursion and dynamic programming).

References (parity_reference.py): layers.ConditionalRandomField.call (−inf at padding), .trans
(lr_multiplier × the stored weight), .target_score, .log_norm_step and .dense_loss (sparse_loss is it on
one-hot tags); snippets.ViterbiDecoder.decode.

Padding is at the end of a row, as BERT batches pad (bert4keras' target score leaves out the transitions
into and out of a padded position, its log Z chains over the real ones: the two agree only there). kwiden
marks padding −1e12 where bert4keras writes −inf; its loss reads either. ViterbiDecoder's `starts` and
`ends` (the labels a path may start or end with; bert4keras' NER example allows label 0 only) have no
kwiden counterpart: `decode` is ViterbiDecoder without them, which is what is held here.
"""

import keras
import numpy as np
import parity_reference as reference
import pytest
from parity_checkpoints import assert_close

from kwiden import layers

TAGS = 5
LENGTHS = [7, 4, 1, 6]  # padded at the end to 7; a row of one position has no transition


def padded(rng):
    emissions = rng.normal(0, 2.0, (len(LENGTHS), max(LENGTHS), TAGS))
    mask = np.arange(max(LENGTHS))[None, :] < np.array(LENGTHS)[:, None]
    tags = rng.integers(0, TAGS, mask.shape)  # at padding too: neither library reads them
    return emissions, mask, tags


def crf_with(transitions, lr_multiplier):
    """A kwiden CRF whose effective transitions are `transitions` (stored ÷ lr_multiplier, as bert4keras)."""
    crf = layers.ConditionalRandomField(TAGS, lr_multiplier=lr_multiplier)
    crf.build((None, None, TAGS))
    crf.set_weights([(transitions / lr_multiplier).astype("float32")])
    return crf


@pytest.mark.parametrize("lr_multiplier", [1.0, 100.0])
def test_the_negative_log_likelihood_is_dense_loss(rng, lr_multiplier):
    emissions, mask, tags = padded(rng)
    trans = rng.normal(0, 1.0, (TAGS, TAGS))
    crf = crf_with(trans, lr_multiplier)
    stored = np.asarray(crf.get_weights()[0], np.float64)
    want = reference.crf_dense_loss(np.eye(TAGS)[tags], reference.crf_call(emissions, mask), lr_multiplier * stored)
    x = emissions.astype("float32")
    assert_close(keras.ops.convert_to_numpy(crf.negative_log_likelihood(x, tags, mask)), want)
    # The Keras loss on the layer's output reads the padding from its marks, as sparse_loss does from −inf.
    assert_close(float(crf.loss(tags, crf(x, mask=mask))), want.mean())


def test_the_best_paths_are_viterbi_decoders(rng):
    emissions, mask, _ = padded(rng)
    trans = rng.normal(0, 3.0, (TAGS, TAGS))  # large enough to overrule the emissions
    crf = crf_with(trans, 1.0)
    paths = np.asarray(keras.ops.convert_to_numpy(crf.decode(emissions.astype("float32"), mask)))
    stored = np.asarray(crf.get_weights()[0], np.float64)
    for row, length in enumerate(LENGTHS):  # ViterbiDecoder decodes one unpadded sequence
        want = reference.viterbi_decode(emissions[row, :length], stored)
        np.testing.assert_array_equal(paths[row, :length], want)
        assert not paths[row, length:].any()  # kwiden's 0 at padding
    # What could not pass by chance: paths the emissions alone, or the transitions transposed, would not give.
    assert (paths != emissions.argmax(-1))[mask].any()
    transposed = [reference.viterbi_decode(emissions[row, :n], stored.T) for row, n in enumerate(LENGTHS)]
    assert any((paths[row, :n] != t).any() for row, (n, t) in enumerate(zip(LENGTHS, transposed)))
