"""A Google checkpoint in the authors' layout (parity_checkpoints.py, written with TensorFlow's raw SaveV2)
read by `kwiden.build_transformer_model` computes bert4keras' BERT and RoFormer: the last layer, the pooler
with `with_pool="linear"` (SimBERT's sentence vector: the Dense on [CLS], no tanh) and the MLM head's
logits, as an encoder and with UniLM's mask (`application="unilm"`).

References (parity_reference.py): models.BERT (apply_embeddings, apply_main_layers, apply_final_layers,
variable_mapping), models.NEZHA.apply_embeddings and models.RoFormer.apply_main_layers,
models.UniLM_Mask, layers.MultiHeadAttention, layers.LayerNormalization, backend.gelu_erf,
backend.sinusoidal_embeddings and backend.apply_rotary_position_embeddings.
"""

import keras
import numpy as np
import parity_reference as reference
import pytest
from parity_checkpoints import VOCAB, assert_close, checkpoint_fixture

import kwiden

# The session's Google checkpoints (parity_checkpoints.checkpoint_fixture).
google_bert_fixture = checkpoint_fixture("bert")
google_roformer_fixture = checkpoint_fixture("roformer")

# Pairs as a UniLM reads them ([CLS] a [SEP] b [SEP], the second text segment 1), of different lengths: the
# shorter rows are padded with id 0.
PAIRS = [("the cat sat on the mat", "a dog ran"), ("sun", "moon and sky"), ("who is big", "the red sea")]


def batch(pairs):
    rows = [reference.encode(VOCAB, a, b) for a, b in pairs]
    return reference.sequence_padding([t for t, _ in rows]), reference.sequence_padding([s for _, s in rows])


def outputs(model, token_ids, segment_ids):
    found = model([token_ids.astype("int32"), segment_ids.astype("int32")])
    return [keras.ops.convert_to_numpy(x) for x in found]


@pytest.fixture(scope="module", params=["bert", "roformer"])
def checkpoint(request):
    return request.getfixturevalue(f"google_{request.param}")


@pytest.mark.parametrize("unilm", [False, True])
def test_the_checkpoint_computes_the_authors_model(checkpoint, unilm):
    model = kwiden.build_transformer_model(
        checkpoint_path=checkpoint.folder,
        model="roformer" if checkpoint.rotary else None,  # bert4keras' model='roformer': a config of BERT's keys
        with_pool="linear",
        with_mlm=True,
        unilm=unilm,
    )
    token_ids, segment_ids = batch(PAIRS)
    sequence, pooled, logits = outputs(model, token_ids, segment_ids)
    want = reference.bert(checkpoint.weights, checkpoint.config, token_ids, segment_ids, unilm, checkpoint.rotary)
    real = token_ids != 0  # padded positions' outputs are nobody's: neither library defines them
    assert_close(sequence[real], want[0][real])
    assert_close(pooled, want[1])
    assert_close(logits[real], want[2][real])


def test_unilm_differs_from_the_encoder_where_the_second_segment_is(google_bert):
    """The UniLM mask is not the padding mask: the source's [CLS] ignores the target, the target's past does
    not see its future, so outputs differ there (else the test above could not tell them apart)."""
    token_ids, segment_ids = batch(PAIRS)
    encoder = reference.bert(google_bert.weights, google_bert.config, token_ids, segment_ids, unilm=False)
    unilm = reference.bert(google_bert.weights, google_bert.config, token_ids, segment_ids, unilm=True)
    assert np.abs(encoder[1] - unilm[1]).max(axis=1).min() > 1e-2  # the pooled [CLS] of every row


def test_the_pooler_is_the_dense_without_the_tanh_and_true_keeps_berts_tanh(google_bert):
    token_ids, segment_ids = batch(PAIRS)
    want = reference.bert(google_bert.weights, google_bert.config, token_ids, segment_ids)[1]
    tanh = kwiden.build_transformer_model(checkpoint_path=google_bert.folder, with_pool=True)
    assert_close(outputs(tanh, token_ids, segment_ids)[1], np.tanh(want))  # Google BERT's pooler
    assert np.abs(want).max() > 1.5  # where tanh would show


def test_a_google_roformer_folder_is_read_as_one_without_being_told(google_roformer):
    """RoFormer's and RoFormer-Sim's Google releases write BERT's names and a config without model_type: a folder
    without a position table is a RoFormer (kwiden.SentenceEncoder, kwiden.similar and kwiden generate take no
    model=; each read it as a BERT and failed for want of 'bert/embeddings/position_embeddings')."""
    folder = google_roformer.folder
    with pytest.warns(UserWarning, match=r"without a position table, .* read as a RoFormer .* Pass model='roformer'"):
        found = kwiden.build_transformer_model(checkpoint_path=folder, with_pool="linear")
    told = kwiden.build_transformer_model(checkpoint_path=folder, model="roformer", with_pool="linear")
    token_ids, segment_ids = batch(PAIRS)
    assert found.family == "roformer"
    for a, b in zip(outputs(found, token_ids, segment_ids), outputs(told, token_ids, segment_ids)):
        np.testing.assert_array_equal(a, b)
    with pytest.warns(UserWarning, match="read as a RoFormer"):
        encoder = kwiden.SentenceEncoder(folder)
    assert encoder.pooling == "pooler" and encoder.model.family == "roformer"
    token_ids, segment_ids = (np.array([row]) for row in reference.encode(VOCAB, "the cat sat"))
    want = reference.bert(google_roformer.weights, google_roformer.config, token_ids, segment_ids, False, True)[1]
    assert_close(encoder.encode(["the cat sat"]), want / np.linalg.norm(want, axis=1, keepdims=True))
