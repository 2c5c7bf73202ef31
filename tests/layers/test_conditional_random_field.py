"""The CRF against brute force over every tag path of short sequences: its
log partition function, path scores, likelihoods and Viterbi decoding, with
padding at the end, at the start and in the middle; its Keras loss; training;
refusals."""

import itertools

import keras
import numpy as np
import pytest
from graph_mode import compiled

from kwiden import GrowthError, Space, layers
from kwiden.growth.expansion import UNCHANGED
from kwiden.testing import RTOL, randomize_weights

TAGS, STEPS = 3, 4
# Every row a different padding: none, at the end, at the start, a hole, one token, none real.
MASK = np.array(
    [[1, 1, 1, 1], [1, 1, 1, 0], [0, 1, 1, 1], [1, 0, 1, 1], [0, 0, 1, 0], [0, 0, 0, 0]],
    bool,
)


def crf_and_emissions(seed=0, num_tags=TAGS, steps=STEPS, rows=6):  # one row per MASK row
    rng = np.random.default_rng(seed)
    crf = layers.ConditionalRandomField(num_tags)
    emissions = rng.normal(size=(rows, steps, num_tags)).astype("float32")
    crf(emissions)
    randomize_weights(crf, seed, std=1.0)
    return crf, emissions, np.asarray(crf.transitions, np.float64)


def score(emissions, transitions, kept, path):
    """One path over the real positions `kept`: its emissions and the transitions between them."""
    total = sum(emissions[t, tag] for t, tag in zip(kept, path))
    return total + sum(transitions[a, b] for a, b in zip(path, path[1:]))


def every_path(emissions, transitions, mask):
    """`(path, score)` of every tag path over the real positions of one row."""
    kept = [t for t in range(len(mask)) if mask[t]]
    for path in itertools.product(range(transitions.shape[0]), repeat=len(kept)):
        yield kept, path, score(emissions.astype(np.float64), transitions, kept, path)


def brute_log_partition(emissions, transitions, mask):
    scores = [s for _, _, s in every_path(emissions, transitions, mask)]
    return float(np.log(np.sum(np.exp(scores)))) if any(mask) else 0.0


def brute_viterbi(emissions, transitions, mask):
    kept, path, _ = max(every_path(emissions, transitions, mask), key=lambda found: found[2])
    tags = np.zeros(len(mask), "int32")
    tags[kept] = path
    return tags


def close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())


@pytest.mark.backends
def test_log_partition_is_the_sum_over_every_path():
    crf, emissions, transitions = crf_and_emissions()
    expected = [brute_log_partition(e, transitions, m) for e, m in zip(emissions, MASK)]
    close(crf.log_partition(emissions, MASK), np.array(expected))


def test_without_a_mask_every_position_is_real():
    crf, emissions, transitions = crf_and_emissions(seed=1, num_tags=2, steps=6, rows=2)
    expected = [brute_log_partition(e, transitions, np.ones(6, bool)) for e in emissions]
    close(crf.log_partition(emissions), np.array(expected))


@pytest.mark.backends
def test_path_scores_and_likelihoods_are_the_brute_forces():
    crf, emissions, transitions = crf_and_emissions(seed=2)
    tags = np.random.default_rng(3).integers(0, TAGS, (len(MASK), STEPS))
    kept = [[t for t in range(STEPS) if m[t]] for m in MASK]
    expected = np.array(
        [score(e.astype(np.float64), transitions, k, list(y[k])) for e, k, y in zip(emissions, kept, tags)]
    )
    close(crf.path_score(emissions, tags, MASK), expected)
    log_z = np.array([brute_log_partition(e, transitions, m) for e, m in zip(emissions, MASK)])
    close(crf.negative_log_likelihood(emissions, tags, MASK), log_z - expected)


def test_the_likelihoods_of_every_path_sum_to_one():
    crf, emissions, _ = crf_and_emissions(seed=4, rows=3)
    paths = np.array(list(itertools.product(range(TAGS), repeat=STEPS)))
    for row in range(3):
        repeated = np.repeat(emissions[row : row + 1], len(paths), axis=0)
        nll = np.asarray(crf.negative_log_likelihood(repeated, paths), np.float64)
        np.testing.assert_allclose(np.exp(-nll).sum(), 1.0, rtol=1e-5)


@pytest.mark.backends
@pytest.mark.parametrize("seed", [0, 5, 6])
def test_viterbi_is_the_exhaustive_search(seed):
    crf, emissions, transitions = crf_and_emissions(seed)
    expected = np.stack([brute_viterbi(e, transitions, m) for e, m in zip(emissions, MASK)])
    decoded = np.asarray(keras.ops.convert_to_numpy(crf.decode(emissions, MASK)))
    assert decoded.dtype == np.int32
    np.testing.assert_array_equal(decoded, expected)


def test_the_call_marks_padding_for_the_loss_and_decoding():
    crf, emissions, _ = crf_and_emissions(seed=7)
    marked = crf(emissions, mask=MASK)
    real = np.asarray(marked)[MASK]
    np.testing.assert_array_equal(real, emissions[MASK])
    assert (np.asarray(marked)[~MASK] < -1e11).all()
    tags = np.random.default_rng(8).integers(0, TAGS, (len(MASK), STEPS, 1))
    nll = np.asarray(crf.negative_log_likelihood(emissions, tags[..., 0], MASK), np.float64)
    close(crf.loss.call(tags, marked), nll)
    close(crf.loss(tags, marked), nll.mean())  # Keras' mean over the batch
    np.testing.assert_array_equal(np.asarray(crf.decode(marked)), np.asarray(crf.decode(emissions, MASK)))


def test_lr_multiplier_stores_the_transitions_divided():
    crf = layers.ConditionalRandomField(3, lr_multiplier=100, transitions_initializer="ones")
    crf(np.zeros((1, 2, 3), "float32"))
    np.testing.assert_allclose(crf.get_weights()[0], 0.01)
    np.testing.assert_allclose(np.asarray(crf.transitions), 1.0)
    assert layers.ConditionalRandomField.from_config(crf.get_config()).lr_multiplier == 100.0


@pytest.mark.backends
def test_a_dense_and_crf_head_trains_with_its_loss():
    keras.utils.set_random_seed(0)  # the Dense's initial weights: the same run each time
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 5, 4)).astype("float32")
    tags = (x[..., 0] > 0).astype("int32") + (x[..., 1] > 1).astype("int32")
    inputs = keras.Input((None, 4))
    crf = layers.ConditionalRandomField(3, lr_multiplier=10)
    model = keras.Model(inputs, crf(keras.layers.Dense(3)(inputs)))
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=crf.loss)
    history = model.fit(x, tags, epochs=20, batch_size=8, verbose=0).history["loss"]
    assert np.isfinite(history).all() and history[-1] < history[0] / 2
    accuracy = (np.asarray(crf.decode(model.predict(x, verbose=0))) == tags).mean()
    assert accuracy > 0.8


@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_a_saved_tagger_loads_and_its_loss_asks_to_be_compiled_again(tmp_path):
    inputs = keras.Input((None, 4))
    crf = layers.ConditionalRandomField(3, name="tagger-crf")
    model = keras.Model(inputs, crf(keras.layers.Dense(3)(inputs)))
    model.compile("adam", loss=crf.loss)
    model.save(tmp_path / "tagger.keras")
    loaded = keras.saving.load_model(tmp_path / "tagger.keras")
    x, tags = np.ones((2, 5, 4), "float32"), np.zeros((2, 5), "int32")
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))
    with pytest.raises(
        ValueError, match=r"without its ConditionalRandomField 'tagger-crf': compile the loaded model again"
    ):
        loaded.loss(tags, loaded(x))
    loaded.compile("adam", loss=loaded.get_layer("tagger-crf").loss)
    assert np.isfinite(loaded.train_on_batch(x, tags))


def test_its_input_is_never_grown():
    crf = layers.ConditionalRandomField(3, name="crf")
    assert crf.get_expanded_output_space(2, UNCHANGED) == UNCHANGED
    with pytest.raises(GrowthError, match=r"ConditionalRandomField 'crf' reads tag scores.*Dense\(num_tags\)"):
        crf.get_expanded_weight_axes(2, Space.stream(2))


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"num_tags": 0}, r"ConditionalRandomField: `num_tags` must be a positive integer, got num_tags=0"),
        ({"num_tags": 3, "lr_multiplier": 0}, r"`lr_multiplier` must be a positive number, got lr_multiplier=0"),
        ({"num_tags": 3, "lr_multiplier": "10"}, r"`lr_multiplier` must be a positive number, got lr_multiplier='10'"),
    ],
)
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        layers.ConditionalRandomField(**arguments)


def test_scores_of_another_width_are_refused():
    with pytest.raises(ValueError, match=r"'crf' has num_tags=3 but its input has 5 scores per token"):
        layers.ConditionalRandomField(3, name="crf")(np.zeros((1, 2, 5), "float32"))


def test_a_tensorflow_graph_of_unknown_length_decodes_and_scores():
    """Keras' TensorFlow scan fails on several inputs of unknown length (as
    `fit` traces after retracing); the CRF scans over one tensor."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("a TensorFlow graph")
    import tensorflow as tf

    crf, emissions, _ = crf_and_emissions(seed=9)
    specs = [tf.TensorSpec((None, None, TAGS)), tf.TensorSpec((None, None), tf.bool)]
    decode = tf.function(crf.decode, input_signature=specs)
    log_partition = tf.function(crf.log_partition, input_signature=specs)
    np.testing.assert_array_equal(decode(emissions, MASK).numpy(), np.asarray(crf.decode(emissions, MASK)))
    np.testing.assert_array_equal(
        log_partition(emissions, MASK).numpy(), np.asarray(crf.log_partition(emissions, MASK))
    )


@pytest.mark.backends
@pytest.mark.parametrize("bad", [3, -1, 1.5])
def test_a_tag_id_out_of_range_is_refused(bad):
    """One-hot of a tag past num_tags (or below 0) is all zeros: the likelihood came out finite and wrong."""
    crf, emissions, _ = crf_and_emissions(seed=10)
    tags = np.zeros((len(MASK), STEPS), "float32")
    tags[1, 2] = bad  # a real position of row 1
    message = rf"ConditionalRandomField '{crf.name}': tag {bad:g} at \[1, 2\] is not a tag id, 0 to 2 \(num_tags=3\)"
    with pytest.raises(ValueError, match=message):
        crf.negative_log_likelihood(emissions, tags, MASK)
    with pytest.raises(ValueError, match=message):
        crf.loss(tags, crf(emissions, mask=MASK))  # the Keras loss, as a run_eagerly step calls it


@pytest.mark.backends
def test_a_tag_out_of_range_gives_its_row_a_nan_likelihood_in_a_graph():
    crf, emissions, _ = crf_and_emissions(seed=11)
    tags = np.random.default_rng(12).integers(0, TAGS, (len(MASK), STEPS)).astype("int32")
    expected = np.asarray(crf.negative_log_likelihood(emissions, tags, MASK))
    bad = tags.copy()
    bad[1, 2], bad[3, 0] = TAGS, -1  # real positions of rows 1 and 3
    nll = np.asarray(keras.ops.convert_to_numpy(compiled(crf.negative_log_likelihood)(emissions, bad, MASK)))
    assert np.isnan(nll[[1, 3]]).all()
    np.testing.assert_allclose(nll[[0, 2, 4, 5]], expected[[0, 2, 4, 5]], rtol=RTOL)


@pytest.mark.backends
def test_fit_on_a_tag_out_of_range_shows_a_nan_loss():
    inputs = keras.Input((None, 4))
    crf = layers.ConditionalRandomField(3)
    model = keras.Model(inputs, crf(keras.layers.Dense(3)(inputs)))
    model.compile("adam", loss=crf.loss)
    tags = np.zeros((4, 5), "int32")
    tags[2, 1] = 3
    history = model.fit(np.ones((4, 5, 4), "float32"), tags, epochs=1, batch_size=4, verbose=0).history
    assert np.isnan(history["loss"]).all()


def test_a_tag_at_a_padded_position_is_not_read():
    """Padding's tags (often -1, or 0) are left out of the path: any value there is accepted."""
    crf, emissions, _ = crf_and_emissions(seed=13)
    tags = np.zeros((len(MASK), STEPS), "int32")
    padded = np.where(MASK, tags, -1)
    np.testing.assert_array_equal(
        np.asarray(crf.negative_log_likelihood(emissions, padded, MASK)),
        np.asarray(crf.negative_log_likelihood(emissions, tags, MASK)),
    )
