"""`kwiden.layout_map`: Megatron-style sharding under `keras.distribution.ModelParallel`."""

import subprocess
import sys
import textwrap

import keras
import pytest

import kwiden
from kwiden.testing import tiny_config

# On JAX with 8 virtual CPU devices, which must be asked for before JAX is
# imported: hence a fresh interpreter.
SHARDED = textwrap.dedent(
    """
    import os
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import time
    import jax, keras, numpy as np
    import kwiden
    from kwiden import optimizers
    from kwiden.testing import tiny_config

    assert len(jax.devices()) == 8
    rng = np.random.default_rng(0)
    x = rng.integers(0, 96, (32, 8)).astype("int32")
    y = rng.integers(0, 96, (32, 8)).astype("int32")
    LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def spec(variable):
        return tuple(variable.value.sharding.spec)

    def specs(model):
        return {w.path: spec(w) for w in model.weights}

    def build(name, config, distribution, weights=None):
        keras.distribution.set_distribution(distribution)
        keras.utils.set_random_seed(0)
        if name in ("bert", "roformer"):  # trained on its MLM logits
            encoder = kwiden.build_transformer_model(config, model=name, with_mlm=True)
            model = keras.Model(encoder.inputs, encoder.outputs[-1], name=name)
        else:
            model = kwiden.build_transformer_model(config, model=name)
        if weights is not None:
            model.set_weights(weights)
        model.compile(optimizers.AdamW(1e-2, weight_decay=0.01, accum_steps=2), LOSS)
        return model

    def fit(model, distribution):
        keras.distribution.set_distribution(distribution)
        inputs = [x, np.zeros_like(x)] if len(model.inputs) == 2 else x  # BERT's segments
        model.fit(inputs, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        return [w.numpy() for w in model.weights]

    def check_equal(one, many, what):
        difference = max(float(np.max(np.abs(a - b))) for a, b in zip(one, many))
        print(what, "max difference", difference)
        for a, b in zip(one, many):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)

    def run(name, config, shape, **options):
        start = time.time()
        mesh = keras.distribution.DeviceMesh(shape, ["batch", "model"], jax.devices())
        parallel = keras.distribution.ModelParallel(layout_map=kwiden.layout_map(mesh, **options), batch_dim_name="batch")
        one = build(name, config, None)
        initial = one.get_weights()
        many = build(name, config, parallel, initial)
        check_equal(fit(one, None), fit(many, parallel), name)
        got = specs(many)
        m = "model"
        block = "Transformer-0-"
        assert got[block + "MultiHeadSelfAttention/query_kernel"] == (None, m, None), got
        assert got[block + "MultiHeadSelfAttention/key_kernel"] == (None, m, None), got
        assert got[block + "MultiHeadSelfAttention/output_kernel"] == (m, None, None), got
        assert got[block + "FeedForward/output_kernel"] == (m, None), got
        assert all(s in ((), (None,)) for p, s in got.items() if "Norm" in p), got
        # The optimizer's slots are split as their variables.
        slots = {v.path: spec(v) for v in many.optimizer.variables if len(v.shape) == 3}
        assert slots and all(s in ((None, m, None), (m, None, None)) for s in slots.values()), slots
        print(name, "sharded in", round(time.time() - start, 1), "s")
        return one, many, parallel, got

    # GPT on 2 × 4: heads, FFN and hidden split 4 ways; tied token embeddings by hidden.
    gpt = tiny_config(num_attention_heads=4, intermediate_size=32, vocab_size=96)
    one, many, parallel, got = run("gpt", gpt, (2, 4))
    assert got["Transformer-0-FeedForward/inner_kernel"] == (None, "model"), got
    assert got["Transformer-0-FeedForward/inner_bias"] == ("model",), got
    assert got["Transformer-0-MultiHeadSelfAttention/query_bias"] == ("model", None), got
    assert got["Transformer-0-MultiHeadSelfAttention/output_bias"] in ((), (None,)), got
    assert got["Embedding-Token/embeddings"] == (None, "model"), got

    # Grown (hidden 32, 8 heads, FFN 64) with the optimizer's state: trains on, still sharded.
    start = time.time()
    big_one, optimizer = kwiden.grow(one, 2, seed=0, optimizer=one.optimizer)
    big_one.compile(optimizer, LOSS)
    keras.distribution.set_distribution(parallel)
    big_many, optimizer = kwiden.grow(many, 2, seed=0, optimizer=many.optimizer)
    big_many.compile(optimizer, LOSS)
    grown = specs(big_many)
    assert grown["Transformer-1-MultiHeadSelfAttention/value_kernel"] == (None, "model", None), grown
    assert grown["Transformer-1-FeedForward/output_kernel"] == ("model", None), grown
    check_equal([w.numpy() for w in big_one.weights], [w.numpy() for w in big_many.weights], "grown")
    check_equal(fit(big_one, None), fit(big_many, parallel), "grown gpt")
    assert specs(big_many) == grown
    print("grown sharded in", round(time.time() - start, 1), "s")

    # LLaMA with grouped-query attention (4 heads, 2 key/value heads) on 4 × 2,
    # its own logits kernel, token embeddings split by vocabulary.
    llama = tiny_config(num_attention_heads=4, num_key_value_heads=2, intermediate_size=32, vocab_size=96)
    _, _, _, got = run("llama", llama, (4, 2), embeddings="vocabulary")
    assert got["Transformer-0-FeedForward/gate_kernel"] == (None, "model"), got
    assert got["Transformer-0-FeedForward/up_kernel"] == (None, "model"), got
    assert got["Embedding-Token/embeddings"] == ("model", None), got
    assert got["Output-Logits/kernel"] == (None, "model"), got

    # T5's encoder on 2 × 4: its relative position bias (buckets, heads) split with the heads.
    t5 = tiny_config(num_attention_heads=4, intermediate_size=32, vocab_size=96)
    _, _, _, got = run("t5", t5, (2, 4))
    assert got["Embedding-Relative-Position/embeddings"] == (None, "model"), got

    # BERT with its MLM head on 2 × 4; RoFormer on 4 × 2 with the vocabulary split (MLM bias with it).
    _, _, _, got = run("bert", t5, (2, 4))
    assert got["MLM-Dense/kernel"] in ((), (None, None)) and got["Embedding-Position/embeddings"] in ((), (None, None)), got
    _, _, _, got = run("roformer", t5, (4, 2), embeddings="vocabulary")
    assert got["MLM-Bias/bias"] == ("model",) and got["Embedding-Token/embeddings"] == ("model", None), got
    print("ok")
    """
)


def test_model_parallel_training_equals_one_device():
    pytest.importorskip("jax")
    result = subprocess.run([sys.executable, "-c", SHARDED], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.strip().endswith("ok"), result.stdout


def test_layout_map_keys_are_exclusive_and_cover_the_blocks():
    mesh = keras.distribution.DeviceMesh((1,), ["model"], keras.distribution.list_devices()[:1])
    layouts = kwiden.layout_map(mesh)
    cases = {
        "Transformer-3-MultiHeadSelfAttention/query_kernel": (None, "model", None),
        "Transformer-3-MultiHeadSelfAttention/value_bias": ("model", None),
        "Transformer-3-MultiHeadSelfAttention/output_kernel": ("model", None, None),
        "Transformer-3-FeedForward/gate_kernel": (None, "model"),
        "Transformer-3-FeedForward/output_kernel": ("model", None),
        "Embedding-Token/embeddings": (None, "model"),
    }
    for path, axes in cases.items():
        assert tuple(layouts[path].axes) == axes, path
    for path in [
        "Transformer-3-MultiHeadSelfAttention/output_bias",
        "Transformer-3-FeedForward/output_bias",
        "Transformer-3-MultiHeadSelfAttention-Norm/gamma",
        "Embedding-Position/embeddings",
        "Output-Norm/gamma",
    ]:
        assert layouts[path] is None, path
    vocabulary = kwiden.layout_map(mesh, embeddings="vocabulary")
    assert tuple(vocabulary["Embedding-Token/embeddings"].axes) == ("model", None)
    assert tuple(vocabulary["MLM-Bias/bias"].axes) == ("model",)


def test_layout_map_refuses_a_mesh_without_the_axis():
    mesh = keras.distribution.DeviceMesh((1,), ["batch"], keras.distribution.list_devices()[:1])
    with pytest.raises(ValueError, match="no axis 'model'"):
        kwiden.layout_map(mesh)
    with pytest.raises(ValueError, match="embeddings"):
        kwiden.layout_map(mesh, model_dim_name="batch", embeddings="rows")


# TensorFlow's data parallelism: two logical CPU devices, asked for before TensorFlow starts.
MIRRORED = textwrap.dedent(
    """
    import os
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import numpy as np, tensorflow as tf, keras
    import kwiden
    from kwiden import optimizers
    from kwiden.testing import randomize_weights, tiny_config
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 50, (32, 8)).astype("int32")
    targets = rng.integers(1, 50, (32, 8)).astype("int32")
    def train(strategy, make_optimizer):
        with strategy.scope():
            keras.utils.set_random_seed(0)
            bert = kwiden.build_transformer_model(tiny_config(vocab_size=50), model="bert", with_mlm=True)
            model = keras.Model(bert.inputs, bert.outputs[1])
            randomize_weights(model, 0)
            model.compile(make_optimizer(), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit([ids, np.zeros_like(ids)], targets, batch_size=8, epochs=2, shuffle=False, verbose=0)
        return [w.numpy() for w in model.weights], int(model.optimizer.iterations.numpy())
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert mirrored.num_replicas_in_sync == 2
    # SGDM is linear in the gradients: the replicas' summation order is all that differs.
    # Adam divides by √v: where v is tiny, that rounding becomes a visible part of a step
    # (measured: 2.7e-6 on one element of 16 after 4 updates at lr 1e-3), hence its atol.
    for name, make_optimizer, atol in (
        ("SGDM", lambda: optimizers.SGDM(0.05, accum_steps=2), 1e-6),
        ("AdamW", lambda: optimizers.AdamW(1e-3, accum_steps=2), 1e-5),
    ):
        one, steps_one = train(tf.distribute.OneDeviceStrategy("/cpu:0"), make_optimizer)
        two, steps_two = train(mirrored, make_optimizer)
        assert steps_one == steps_two == 8, (steps_one, steps_two)
        print(name, "max difference", max(float(np.max(np.abs(a - b))) for a, b in zip(one, two)))
        for a, b in zip(one, two):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=atol)
    """
)


def test_mirrored_strategy_trains_a_kwiden_bert_like_one_device():
    """A kwiden BERT with its MLM head, AdamW accumulating 2 micro-batches, `fit`
    under `MirroredStrategy` on 2 logical CPUs: the same weights as on one."""
    result = subprocess.run([sys.executable, "-c", MIRRORED], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    print(result.stdout)
    assert "max difference" in result.stdout


def test_a_weight_that_would_not_split_evenly_is_named_before_anything_is_placed():
    mesh = keras.distribution.DeviceMesh((2, 4), ["batch", "model"], [f"cpu:{i}" for i in range(8)])  # names only
    gpt = kwiden.build_transformer_model(tiny_config(num_attention_heads=4, intermediate_size=32), model="gpt")
    assert kwiden.layout_map(mesh, model=gpt)["Transformer-0-FeedForward/inner_kernel"].axes == (None, "model")
    llama = kwiden.build_transformer_model(tiny_config(num_attention_heads=4, num_key_value_heads=2), model="llama")
    with pytest.raises(
        ValueError,
        match=r"'Transformer-0-MultiHeadSelfAttention/key_kernel' \(shape \(16, 2, 4\)\) would be split over the mesh "
        r"axis 'model' of 4 devices, but its axis 1 \(size 2\) is not a multiple of 4",
    ):
        kwiden.layout_map(mesh, model=llama)
    wide_vocabulary = kwiden.build_transformer_model(tiny_config(hidden_size=18, num_attention_heads=4,
        attention_head_size=4, intermediate_size=32, vocab_size=96), model="gpt")  # fmt: skip
    with pytest.raises(ValueError, match=r"'Embedding-Token/embeddings' \(shape \(96, 18\)\)"):
        kwiden.layout_map(mesh, model=wide_vocabulary)
    assert kwiden.layout_map(mesh, embeddings="vocabulary", model=wide_vocabulary) is not None
