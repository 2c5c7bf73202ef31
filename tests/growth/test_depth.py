"""Depth growth: blocks found by their residual merges, copied, renumbered."""

import keras
import numpy as np
import pytest

import kwiden
from kwiden import GrowthError
from kwiden.layers import (
    ExpandableDense,
    ExpandableEmbedding,
    ExpandableLayerNormalization,
    ExpandableMultiHeadAttention,
    FeedForward,
)
from kwiden.testing import assert_exact, padded_batch, randomize_weights


@pytest.mark.backends
@pytest.mark.parametrize("k, depth, num_layers", [(1, 2, None), (2, 2, None), (2, None, 3), (1, None, 5)])
def test_pre_ln_depth_growth_is_exact(gpt, k, depth, num_layers):
    small = gpt()
    big = kwiden.grow(small, k, depth=depth, num_layers=num_layers, spread=0.5, seed=1)
    blocks = num_layers or 2 * depth
    names = [layer.name for layer in big.layers]
    assert [f"Transformer-{i}-FeedForward" in names for i in range(blocks + 1)] == [True] * blocks + [False]
    assert_exact(small, big, padded_batch(segments=False))


def test_new_blocks_are_copies_with_zero_output_projections(gpt):
    small = gpt()
    big = kwiden.grow(small, 1, depth=2)
    copy, source = big.get_layer("Transformer-1-FeedForward"), small.get_layer("Transformer-0-FeedForward")
    np.testing.assert_array_equal(copy.inner_kernel.numpy(), source.inner_kernel.numpy())
    assert not np.any(copy.output_kernel.numpy()) and not np.any(copy.output_bias.numpy())
    np.testing.assert_array_equal(
        big.get_layer("Transformer-2-FeedForward").output_kernel.numpy(),
        small.get_layer("Transformer-1-FeedForward").output_kernel.numpy(),
    )


def test_new_blocks_copy_stacks_whole_blocks_and_says_it_is_approximate(gpt):
    small = gpt()
    with pytest.raises(
        ValueError, match=r"new_blocks='copy' adds blocks that change the function.*allow_approximate=True"
    ):
        kwiden.grow(small, depth=2, new_blocks="copy")
    with pytest.raises(
        ValueError,
        match=r"`new_blocks` must be one of identity, copy, fresh \(new blocks: .*\), got new_blocks='random'",
    ):
        kwiden.grow(small, depth=2, new_blocks="random")
    with pytest.warns(UserWarning, match="the grown model is approximate"):
        big = kwiden.grow(small, depth=2, new_blocks="copy", allow_approximate=True)
    assert not big.growth_report.ok
    for layer in ("FeedForward", "MultiHeadSelfAttention"):
        copy, source = big.get_layer(f"Transformer-1-{layer}"), small.get_layer(f"Transformer-0-{layer}")
        for grown, original in zip(copy.get_weights(), source.get_weights()):
            np.testing.assert_array_equal(grown, original)
    assert np.any(big.get_layer("Transformer-1-FeedForward").output_kernel.numpy())


def test_new_blocks_fresh_are_newly_initialised_and_approximate(gpt):
    small = gpt()
    with pytest.raises(ValueError, match=r"new_blocks='fresh' adds blocks that change.*allow_approximate=True"):
        kwiden.grow(small, depth=2, new_blocks="fresh")
    with pytest.warns(UserWarning, match="the grown model is approximate"):
        big = kwiden.grow(small, depth=2, new_blocks="fresh", allow_approximate=True, seed=3)
    assert not big.growth_report.ok
    fresh = big.get_layer("Transformer-1-FeedForward")
    source = small.get_layer("Transformer-0-FeedForward")
    # its own initializer's draw: not the source's values, not zeros, at the initializer's scale
    kernel = fresh.inner_kernel.numpy()
    assert kernel.shape == source.inner_kernel.shape and np.std(kernel) > 0
    assert not np.allclose(kernel, source.inner_kernel.numpy())
    assert np.any(fresh.output_kernel.numpy())
    norm = big.get_layer("Transformer-1-FeedForward-Norm")
    np.testing.assert_array_equal(norm.gamma.numpy(), np.ones(norm.gamma.shape))
    # the old blocks keep their weights
    for layer in ("FeedForward", "MultiHeadSelfAttention"):
        kept, original = big.get_layer(f"Transformer-0-{layer}"), small.get_layer(f"Transformer-0-{layer}")
        for grown, weight in zip(kept.get_weights(), original.get_weights()):
            np.testing.assert_array_equal(grown, weight)
    keras.utils.set_random_seed(1)  # the global generator does not matter: the seed does
    with pytest.warns(UserWarning, match="the grown model is approximate"):
        again = kwiden.grow(small, depth=2, new_blocks="fresh", allow_approximate=True, seed=3)
        other = kwiden.grow(small, depth=2, new_blocks="fresh", allow_approximate=True, seed=4)
    np.testing.assert_array_equal(again.get_layer("Transformer-1-FeedForward").inner_kernel.numpy(), kernel)
    assert not np.allclose(other.get_layer("Transformer-1-FeedForward").inner_kernel.numpy(), kernel)
    assert 0.01 < np.std(kernel) < 0.03  # the builder's TruncatedNormal(0.02)


def test_post_ln_depth_growth_is_approximate_and_says_so(bert):
    small = bert(with_mlm=True)
    with pytest.raises(GrowthError, match=r"Transformer blocks \[0, 1\] are not Pre-LN.*allow_approximate=True"):
        kwiden.grow(small, 2, depth=2)
    with pytest.warns(UserWarning, match="the grown model is approximate"):
        big = kwiden.grow(small, 2, depth=2, allow_approximate=True, check=padded_batch())
    report = big.growth_report
    assert not report.ok  # LayerNorm on the stream: no exact identity block
    deviation = max(o.max_relative_error for o in report.outputs)
    assert 1e-4 < deviation < 2.0, str(report)


def test_depth_argument_errors(gpt):
    with pytest.raises(ValueError, match=r"`depth` \(a factor\) or `num_layers` \(a total\), not both"):
        kwiden.grow(gpt(), 2, depth=2, num_layers=4)
    with pytest.raises(ValueError, match=r"`num_layers` must be an integer >= the model's 2 blocks"):
        kwiden.grow(gpt(), 2, num_layers=1)
    with pytest.raises(
        ValueError,
        match=r"`depth` must be a whole number of at least 1, or None \(multiply the number of Transformer blocks\), got depth=",
    ):
        kwiden.grow(gpt(), 2, depth=0)
    x_in = keras.Input((None, 8))
    with pytest.raises(GrowthError, match=r"Depth growth needs residual blocks"):
        kwiden.grow(keras.Model(x_in, ExpandableDense(8)(x_in)), 2, depth=2)


def custom_model(blocks=2, parallel=False, adapter=False, residual_head=False, branch_act=None, names=True):
    """A Pre-LN model built by hand: kwiden-named blocks or not, parallel
    attention and feed-forward (GPT-J), an adapter before the blocks, a
    residual head after them, an activation ending the FFN branch."""
    from kwiden.layers import (
        ExpandableEmbedding,
        ExpandableLayerNormalization,
        FeedForward,
    )

    def name(i, part):
        return f"Transformer-{i}-{part}" if names else f"b{i}_{part.lower()}"

    ids = keras.Input((None,), dtype="int32")
    x = ExpandableEmbedding(97, 16, name="Embedding-Token")(ids)
    if adapter:
        x = keras.layers.Add(name="Adapter-Add")([x, FeedForward(24, name="Adapter")(x)])
    for i in range(blocks):
        if parallel:
            h = ExpandableLayerNormalization(epsilon=1e-3, name=name(i, "Norm"))(x)
            attention = ExpandableMultiHeadAttention(2, 8, name=name(i, "MultiHeadSelfAttention"))(h)
            ffn = FeedForward(24, name=name(i, "FeedForward"))(h)
            x = keras.layers.Add(name=name(i, "Add1"))([x, attention])
            x = keras.layers.Add(name=name(i, "Add2"))([ffn, x])  # the stream second
            continue
        h = ExpandableLayerNormalization(epsilon=1e-3, name=name(i, "Attention-Norm"))(x)
        x = keras.layers.Add(name=name(i, "Attention-Add"))(
            [x, ExpandableMultiHeadAttention(2, 8, name=name(i, "Attention"))(h)]
        )
        y = FeedForward(24, name=name(i, "FeedForward"))(
            ExpandableLayerNormalization(epsilon=1e-3, name=name(i, "FFN-Norm"))(x)
        )
        if branch_act:
            y = keras.layers.Activation(branch_act, name=name(i, "FFN-Act"))(y)
        x = keras.layers.Add(name=name(i, "FFN-Add"))([x, y])
    if residual_head:
        x = keras.layers.Add(name="Head-Add")([x, ExpandableDense(16, name="Head-Dense")(x)])
    x = ExpandableLayerNormalization(epsilon=1e-3, name="Output-Norm")(x)
    return randomize_weights(keras.Model(ids, keras.layers.Dense(97, name="Logits")(x)))


def new_layers(small, big):
    return [layer.name for layer in big.layers if layer.name not in {s.name for s in small.layers}]


@pytest.mark.parametrize(
    "options, expected",
    [
        (dict(parallel=True), ["Norm", "MultiHeadSelfAttention", "Add1", "FeedForward", "Add2"]),
        (dict(adapter=True), ["Attention-Norm", "Attention", "Attention-Add", "FFN-Norm", "FeedForward", "FFN-Add"]),
        (
            dict(residual_head=True),
            ["Attention-Norm", "Attention", "Attention-Add", "FFN-Norm", "FeedForward", "FFN-Add"],
        ),
        (
            dict(branch_act="relu"),
            ["Attention-Norm", "Attention", "Attention-Add", "FFN-Norm", "FeedForward", "FFN-Act", "FFN-Add"],
        ),
        (
            dict(blocks=1, adapter=True),
            ["Attention-Norm", "Attention", "Attention-Add", "FFN-Norm", "FeedForward", "FFN-Add"],
        ),
    ],
    ids=["parallel", "adapter-before", "residual-head", "relu-branch", "one-block-adapter"],
)
def test_blocks_are_found_by_structure(options, expected):
    small = custom_model(**options)
    blocks = options.get("blocks", 2)
    big = kwiden.grow(small, 2, num_layers=blocks + 1)
    assert big.growth_report.ok, str(big.growth_report)  # depth growth is always measured
    assert sorted(new_layers(small, big)) == sorted(f"Transformer-{blocks}-{part}" for part in expected)
    assert_exact(small, big, padded_batch(segments=False))


def test_blocks_without_kwiden_names_keep_their_names_and_copies_are_suffixed():
    small = custom_model(names=False)
    big = kwiden.grow(small, 2, depth=2)
    names = [layer.name for layer in big.layers]
    assert {layer.name for layer in small.layers} <= set(names)
    assert "b0_attention-1" in names and "b1_feedforward-3" in names and len(set(names)) == len(names)
    assert_exact(small, big, padded_batch(segments=False))


def test_two_residual_streams_are_refused():

    towers = []
    inputs = [keras.Input((None,), dtype="int32") for _ in range(2)]
    for t, ids in enumerate(inputs):
        x = ExpandableEmbedding(97, 16, name=f"Embedding-{t}")(ids)
        for i in range(2):
            x = keras.layers.Add(name=f"Tower-{t}-Add-{i}")([x, FeedForward(24, name=f"Tower-{t}-FFN-{i}")(x)])
        towers.append(x)
    model = keras.Model(inputs, keras.layers.Add()(towers))
    with pytest.raises(GrowthError, match=r"needs its blocks on one residual stream.*Grow each tower"):
        kwiden.grow(model, 2, depth=2)


def test_post_ln_model_of_one_merge_copies_its_norm_and_says_it_is_approximate():

    ids = keras.Input((None,), dtype="int32")
    x = ExpandableEmbedding(97, 16, name="Embedding-Token")(ids)
    x = ExpandableLayerNormalization(epsilon=1e-3, name="ln0")(
        keras.layers.Add(name="add0")([x, FeedForward(24, name="ff0")(x)])
    )
    small = randomize_weights(keras.Model(ids, keras.layers.Dense(97, name="Logits")(x)))
    with pytest.raises(GrowthError, match=r"blocks \[0\] are not Pre-LN"):
        kwiden.grow(small, 2, depth=2)
    with pytest.warns(UserWarning, match="approximate"):
        big = kwiden.grow(small, 2, depth=2, allow_approximate=True)
    assert new_layers(small, big) == ["ff0-1", "add0-1", "ln0-1"]
