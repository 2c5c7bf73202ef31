import keras
import numpy as np
import pytest

import kwiden

# LayerNorm epsilon large enough to notice a wrong ε̃ (docs/widening.md#layernorm-and-rmsnorm).
EPS = 1e-3
# "Exact" growth: float32 rounding.
RTOL = 1e-5


def small_config(**overrides):
    config = dict(
        vocab_size=97,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=32,
        type_vocab_size=2,
        layer_norm_eps=EPS,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    config.update(overrides)
    return config


def randomize(model, seed=0, std=0.5):
    """Random non-zero values in every weight: biases, γ and β included."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0.0, std, weight.shape).astype(weight.dtype))
    return model


def padded_batch(vocab_size=97, lengths=(7, 4, 9), seed=1, segments=True):
    """Token ids padded with 0 to the longest length, and segment ids."""
    rng = np.random.default_rng(seed)
    length = max(lengths)
    ids = np.zeros((len(lengths), length), "int32")
    segment = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1, vocab_size, n)
        segment[row, n // 2 : n] = 1
    return [ids, segment] if segments else ids


def bert(seed=0, **kwargs):
    flags = {key: kwargs.pop(key) for key in ("with_mlm", "with_pool") if key in kwargs}
    model = kwiden.build_transformer_model(small_config(**kwargs), model="bert", **flags)
    return randomize(model, seed)


def gpt(seed=0, **kwargs):
    return randomize(kwiden.build_transformer_model(small_config(**kwargs), model="gpt"), seed)


def outputs(model, inputs):
    return [np.asarray(keras.ops.convert_to_numpy(o)) for o in keras.tree.flatten(model(inputs))]


@pytest.fixture(autouse=True)
def _float32_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


def assert_exact(small, big, inputs):
    report = kwiden.verify(small, big, inputs, rtol=RTOL)
    assert report.ok, str(report)
    assert report.first_departure is None, str(report)
    for output in report.outputs:
        assert output.max_relative_error <= RTOL
        if output.argmax_agreement is not None:
            assert output.argmax_agreement == 1.0
    return report
