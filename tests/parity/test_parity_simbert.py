"""SimBERT on a Google checkpoint with the pooler (parity_checkpoints.py): kwiden's sentence vectors and
its training objective's losses against ZhuiyiTechnology's simbert.py.

References (parity_reference.py): simbert.py's `gen_synonyms` (the encoder's pooled output l2-normalised,
ranked by dot product) on bert4keras' `build_transformer_model(…, with_pool='linear', application='unilm')`;
`data_generator` (each pair both ways, adjacent rows, `tokenizer.encode(text, synonym)`, sequence_padding);
`TotalLoss.compute_loss_of_similarity` and `TotalLoss.compute_loss_of_seq2seq`.
"""

import keras
import numpy as np
import parity_reference as reference
import pytest
from parity_checkpoints import VOCAB, assert_close, checkpoint_fixture

import kwiden
from kwiden.pretraining.objectives.simbert import Sentences, SimBERT
from kwiden.similarity.losses import InBatchSimilarity

# The session's Google checkpoints (parity_checkpoints.checkpoint_fixture).
google_bert_fixture = checkpoint_fixture("bert")

TEXTS = ["the cat sat on the mat", "a dog sat on a rug", "sun", "the big red sea is blue", "who ran", "cat"]
# (text, synonym) pairs of different lengths, as SimBERT's corpus gives them.
PAIRS = [("the cat sat on the mat", "a cat was on the rug"), ("sun and moon", "the sky"),
         ("who is fast", "what is slow or fast"), ("big dog", "a small dog ran under the mat")]  # fmt: skip


def reference_vectors(checkpoint, texts):
    """gen_synonyms' Z: the pooled output of each text alone ([CLS] text [SEP], segment 0), normalised."""
    rows = [reference.encode(VOCAB, text)[0] for text in texts]
    token_ids = reference.sequence_padding(rows)
    pooled = reference.bert(checkpoint.weights, checkpoint.config, token_ids, np.zeros_like(token_ids), unilm=True)[1]
    return pooled / (pooled**2).sum(axis=1, keepdims=True) ** 0.5


@pytest.fixture(scope="module")
def encoder(google_bert):
    return kwiden.SentenceEncoder(google_bert.folder, batch_size=4)  # two batches of texts


def test_the_sentence_encoder_pools_by_the_pooler_and_gives_simberts_vectors(google_bert, encoder):
    assert encoder.pooling == "pooler"  # chosen by default: the checkpoint holds bert/pooler/dense
    vectors = encoder.encode(TEXTS)
    assert_close(vectors, reference_vectors(google_bert, TEXTS))


def test_similarity_ranks_as_gen_synonyms_ranks(google_bert, encoder):
    want = reference_vectors(google_bert, TEXTS)
    cosines = encoder.similarity(TEXTS[0], TEXTS[1:])
    assert_close(cosines, want[0][None] @ want[1:].T)
    assert np.argsort(-cosines[0]).tolist() == np.dot(want[1:], -want[0]).argsort().tolist()
    assert_close(encoder.similarity(TEXTS, TEXTS), want @ want.T)


@pytest.fixture(scope="module")
def simbert(google_bert):
    """kwiden's objective on the pairs: its model (outputs sequence, pooled vector, logits) and its batch."""
    objective = SimBERT(seq_len=20, vocab_size=len(VOCAB), cls=VOCAB.index("[CLS]"), separator=VOCAB.index("[SEP]"))
    texts = [text for pair in PAIRS for text in pair]
    ids = [np.array([VOCAB.index(w) for w in text.split()], np.int32) for text in texts]
    sentences = Sentences(ids, [[2 * i, 2 * i + 1] for i in range(len(PAIRS))], texts)
    (token_ids, segment_ids), targets = objective._batch(sentences, [(2 * i, 2 * i + 1) for i in range(len(PAIRS))])
    model = kwiden.build_transformer_model(checkpoint_path=google_bert.folder, **SimBERT.model_arguments)
    found = [keras.ops.convert_to_numpy(x) for x in model([token_ids, segment_ids])]
    return objective, token_ids, segment_ids, targets, found


def test_a_batch_is_laid_out_as_simberts_data_generator(simbert):
    _, token_ids, segment_ids, _, _ = simbert
    want_ids, want_segments = reference.simbert_batch(VOCAB, PAIRS)
    width = want_ids.shape[1]
    np.testing.assert_array_equal(token_ids[:, :width], want_ids)
    np.testing.assert_array_equal(segment_ids[:, :width], want_segments)
    assert not token_ids[:, width:].any() and not segment_ids[:, width:].any()  # the rest is padding


def test_the_similarity_loss_on_the_pooled_output_is_compute_loss_of_similarity(google_bert, simbert):
    objective, _, _, targets, (_, pooled, _) = simbert
    token_ids, segment_ids = reference.simbert_batch(VOCAB, PAIRS)
    want_pooled = reference.bert(google_bert.weights, google_bert.config, token_ids, segment_ids, unilm=True)[1]
    assert_close(pooled, want_pooled)
    want = reference.compute_loss_of_similarity(want_pooled)
    loss = objective.losses()[1]
    assert isinstance(loss, InBatchSimilarity)
    assert_close(keras.ops.convert_to_numpy(loss.call(targets[1], pooled)), want)  # a loss a row
    assert_close(float(loss(targets[1], pooled)), want.mean())  # as Keras reduces it
    assert want.std() > 0.1  # rows whose losses differ: a wrong partner or scale shows


def test_the_seq2seq_loss_is_compute_loss_of_seq2seq(google_bert, simbert):
    objective, _, _, targets, (_, _, logits) = simbert
    token_ids, segment_ids = reference.simbert_batch(VOCAB, PAIRS)
    probas = reference.bert(google_bert.weights, google_bert.config, token_ids, segment_ids, unilm=True)[3]
    want = reference.compute_loss_of_seq2seq(token_ids, segment_ids, probas)
    loss = objective.losses()[2]
    assert_close(float(loss(targets[2], logits)), want)
