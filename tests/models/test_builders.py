"""The builders' errors."""

import keras
import numpy as np
import pytest

import kwiden
from kwiden.models import blocks
from kwiden.testing import numpy_outputs, padded_batch, randomize_weights, tiny_config


def test_builder_errors():
    with pytest.raises(
        ValueError, match=r"`model` must be one of \['bert', 'gpt', 'llama', 'mistral', 'qwen2', 'roformer', 't5'\]"
    ):
        kwiden.build_transformer_model(tiny_config(), model="xlnet")
    with pytest.raises(ValueError, match=r"lacks hidden_size"):
        kwiden.build_transformer_model(dict(vocab_size=10, num_hidden_layers=1, num_attention_heads=1))
    with pytest.raises(ValueError, match=r"hidden_size=10 is not a multiple of num_attention_heads=3"):
        kwiden.build_transformer_model(tiny_config(hidden_size=10, num_attention_heads=3))
    with pytest.raises(ValueError, match=r"`with_mlm` applies to BERT-style models \(bert, roformer\), not 'gpt'"):
        kwiden.build_transformer_model(tiny_config(), model="gpt", with_mlm=True)
    with pytest.raises(ValueError, match=r"`unilm` applies to BERT-style models \(bert, roformer\), not 'llama'"):
        kwiden.build_transformer_model(tiny_config(), model="llama", unilm=True)


def unilm_reference(token_ids, segment_ids):
    """The UniLM rule written out: query i sees key j, a real token, when j's segment-1 count is at most i's."""
    seen = np.cumsum(segment_ids, axis=1)
    rows, length = token_ids.shape
    return np.array([[[seen[r, j] <= seen[r, i] and token_ids[r, j] != 0 for j in range(length)]
                      for i in range(length)] for r in range(rows)])  # fmt: skip


def test_the_unilm_mask_is_the_rule_written_out():
    token_ids, segment_ids = padded_batch()
    mask = blocks.unilm_mask(token_ids, segment_ids, {})
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(mask), unilm_reference(token_ids, segment_ids))


@pytest.mark.parametrize("family", ["bert", "roformer"])
def test_a_unilm_model_lets_the_source_see_itself_and_the_target_only_its_past(family, tmp_path):
    built = randomize_weights(kwiden.build_transformer_model(tiny_config(), model=family, unilm=True))
    built.save(tmp_path / "unilm.keras")
    model = keras.saving.load_model(tmp_path / "unilm.keras", compile=False)  # the mask is saved with the model
    token_ids, segment_ids = padded_batch(lengths=(9,))  # the source at 0-3, the target at 4-8
    base = numpy_outputs(model, [token_ids, segment_ids])[0]
    for changed, unchanged_before in [(6, 6), (1, 0), (3, 0)]:
        edited = token_ids.copy()
        edited[0, changed] = edited[0, changed] % 96 + 1
        out = numpy_outputs(model, [edited, segment_ids])[0]
        np.testing.assert_allclose(out[0, :unchanged_before], base[0, :unchanged_before], rtol=1e-6, atol=1e-6)
        assert np.all(np.abs(out[0, unchanged_before:9] - base[0, unchanged_before:9]).max(axis=-1) > 1e-4)
