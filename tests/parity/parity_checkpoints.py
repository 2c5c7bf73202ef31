"""The parity suite's checkpoints and their fixtures: Google TensorFlow checkpoints in the layout of Google's
BERT releases and of SimBERT's (the pooler and the MLM head kept), written here with TensorFlow's raw `SaveV2` op (not kwiden's
writer, so that a fault in kwiden's reader shows), with a `bert_config.json` and a `vocab.txt` of whole
words. One BERT and one RoFormer a session; every tensor random and non-zero.

bert_config.json has no `layer_norm_eps`, as Google's do not: kwiden then takes BERT's 1e-12, which is what
bert4keras builds every BERT norm with whatever the config says. (kwiden honours a config's ε where one is
given; bert4keras and Google's code do not. The RoFormer's block norms are 1e-7 in bert4keras: see
`parity_reference.bert`.)"""

import json

import numpy as np
import pytest
from checkpoint_folders import google_bert_shapes

# Whole words (each one WordPiece token), after BERT's special tokens at bert4keras' places.
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + (
    "the a cat dog sat ran on under mat rug red blue big small fast slow and or is was who what where sun moon sky sea"
).split()
CONFIG = dict(
    attention_probs_dropout_prob=0.1,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    hidden_size=24,
    initializer_range=0.02,
    intermediate_size=40,
    max_position_embeddings=48,
    num_attention_heads=3,
    num_hidden_layers=2,
    type_vocab_size=2,
    vocab_size=len(VOCAB),
)
# The seeds of the checkpoints: random weights whose texts get distinct vectors and whose greedy continuations
# differ by prompt (a random BERT often repeats one token whatever it reads), the BERT's holding [SEP] in some
# rows and not in others.
SEEDS = {"bert": 17, "roformer": 12}
# [PAD]'s output bias is lowered by this: kwiden never generates id 0 (a model that masks id 0 as padding
# cannot read one it wrote), bert4keras' decoders do not ban it; with it improbable the two choose alike.
PAD_LOWERED = 30.0


def random_tensor(rng, name, shape):
    """Random, of a trained BERT's kind: γ near 1, biases and β small, kernels about 1/√hidden, tables
    larger. (Large weights everywhere make a random BERT give every text nearly the same vector: large
    biases and β add one vector to every row at each layer until it is all there is.)"""
    role = name.rsplit("/", 1)[-1]
    if role == "gamma":
        return (1.0 + rng.normal(0.0, 0.2, shape)).astype("float32")
    if role in ("bias", "beta", "output_bias"):
        return rng.normal(0.0, 0.1, shape).astype("float32")
    return rng.normal(0.0, 0.5 if name.startswith("bert/embeddings/") else 0.2, shape).astype("float32")


def google_tensors(config, seed, positions=True):
    """`{Google name: float32 array}`, random (`random_tensor`), under bert4keras' `BERT.variable_mapping`
    names."""
    shapes = google_bert_shapes(config, positions)  # a RoFormer's positions turn q and k: no table
    rng = np.random.default_rng(seed)
    tensors = {name: random_tensor(rng, name, shape) for name, shape in shapes.items()}
    for name, value in tensors.items():  # non-zero: a weight read as zeros, or not read, shows
        assert np.all(value != 0), name
    tensors["cls/predictions/output_bias"][VOCAB.index("[PAD]")] -= PAD_LOWERED
    return tensors


def write_google_folder(folder, tensors, config):
    """`bert_model.ckpt.{index,data-00000-of-00001}` by `tf.raw_ops.SaveV2`, `bert_config.json`, `vocab.txt`."""
    import tensorflow as tf

    folder.mkdir(parents=True, exist_ok=True)
    tf.raw_ops.SaveV2(
        prefix=str(folder / "bert_model.ckpt"),
        tensor_names=list(tensors),
        shape_and_slices=[""] * len(tensors),
        tensors=[tf.constant(value) for value in tensors.values()],
    )
    (folder / "bert_config.json").write_text(json.dumps(config, indent=2))
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return folder


class Checkpoint:
    """A written folder, its tensors in float64 (what the reference computes with) and its config."""

    def __init__(self, folder, tensors, config, rotary=False):
        self.folder, self.config, self.rotary = folder, config, rotary
        self.weights = {name: value.astype(np.float64) for name, value in tensors.items()}


def assert_close(actual, expected, rtol=1e-5):
    """float32 against the float64 reference: rtol, with an absolute floor of rtol × the largest |expected|
    (entries near 0 carry the rounding of the larger ones they were computed from)."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * np.abs(expected).max())


# The folders written this session: one a kind, whichever module asks first.
_WRITTEN = {}


def checkpoint_fixture(kind):
    """The session fixture `google_{kind}` ("bert": SimBERT's layout, with the pooler and the MLM head;
    "roformer": as RoFormer's Google releases ship, BERT's names without a position table), a `Checkpoint`.
    A test module takes it as `google_bert_fixture = checkpoint_fixture("bert")`: no conftest.py here, which
    would replace tests/pretraining's `conftest` module (its tests import from it) whenever both folders are
    named on one command line."""

    @pytest.fixture(scope="session", name=f"google_{kind}")
    def fixture(tmp_path_factory):
        if kind not in _WRITTEN:
            rotary = kind == "roformer"
            tensors = google_tensors(CONFIG, seed=SEEDS[kind], positions=not rotary)
            folder = write_google_folder(tmp_path_factory.mktemp(f"google_{kind}"), tensors, CONFIG)
            _WRITTEN[kind] = Checkpoint(folder, tensors, CONFIG, rotary)
        return _WRITTEN[kind]

    return fixture
