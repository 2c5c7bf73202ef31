"""Sentence vectors from a BERT-style checkpoint: `SentenceEncoder`."""

import pathlib

import keras
import numpy as np

from kwiden import checkpoints, keras_internals
from kwiden.arguments import is_count
from kwiden.checkpoints.generation_config import trained_max_length
from kwiden.generation.cache import compiled
from kwiden.messages import warn
from kwiden.models import naming
from kwiden.models.builder import build_transformer_model
from kwiden.models.config import read_config_file
from kwiden.models.family import family_of_config
from kwiden.text.folder import read_settings
from kwiden.text.pairs import Tokenizer
from kwiden.text.tokenizer import check_texts
from kwiden.text.vocabulary import load_tokenizer

POOLINGS = ("cls", "pooler", "mean")
POOLINGS_TEXT = "cls, pooler or mean"
# The families whose models read token and segment ids both ways: the encoders a sentence vector comes from.
ENCODERS = ("bert", "roformer")
# `encode` shows a progress bar by default for more batches than this.
PROGRESS_BATCHES = 8
# On JAX a batch's length is padded up to a multiple of this: fewer programs to compile.
LENGTH_BUCKET = 16
# A rotary encoder has no position table to say how far it reads; BERT's own length then.
ROTARY_MAXLEN = 512


class SentenceEncoder:
    """L2-normalised sentence vectors from a BERT or RoFormer checkpoint
    folder, encoded in batches, by one of three poolings:

    - `"cls"`: the `[CLS]` row of the last layer;
    - `"pooler"`: BERT's pooler Dense on that row, without its tanh: the
      vector SimBERT and RoFormer-Sim train and rank by (bert4keras'
      `with_pool="linear"`, their checkpoints' `bert/pooler/dense`);
    - `"mean"`: the mean of the last layer's rows over the real tokens
      (sentence-transformers' usual pooling).

    Args:
        checkpoint: a Hugging Face, Google or kwiden-saved folder of a BERT
            or RoFormer.
        pooling: by default what a sentence-transformers folder's
            `modules.json` and `1_Pooling/config.json` say; else `"pooler"`
            where the checkpoint holds the pooler's weights (a SimBERT, a
            RoFormer-Sim, a Google BERT), else `"cls"`.
        batch_size: texts a forward pass.
        maxlen: tokens a text at most, `[CLS]` and `[SEP]` included; by
            default a sentence-transformers folder's `max_seq_length`, else
            the positions the model was trained on (the `max_length` that
            `kwiden pretrain` records in `generation_config.json`), else its
            position table (`ROTARY_MAXLEN` for a rotary model). More than
            either is refused; longer texts are cut to their first `maxlen`
            tokens, with a warning counting them.
        lowercase: by default the tokenizer's folder's (else the
            checkpoint's) `tokenizer_config.json`'s `do_lower_case`, else
            True (BERT's uncased convention); a `tokenizer.json` says for
            itself.
        model: the folder's model, already built (a UniLM with its MLM head
            too: its first output is the sequence, and a text alone is one
            segment, which it reads both ways; for `"pooler"`, built with
            `with_pool="linear"`); by default built from the folder.
        tokenizer: the `vocab.txt` or `tokenizer.json` (or a folder holding
            one) to tokenize with; by default the checkpoint folder's, loaded
            as every kwiden entry point loads it (`load_tokenizer`).

    Example (any BERT folder; a tiny random one here):

    >>> import os, tempfile, kwiden
    >>> folder = tempfile.mkdtemp()
    >>> bert = kwiden.build_transformer_model(dict(vocab_size=8, hidden_size=8, num_hidden_layers=1,
    ...     num_attention_heads=2, intermediate_size=16))
    >>> _ = kwiden.save_checkpoint(bert, folder)
    >>> _ = open(os.path.join(folder, "vocab.txt"), "w").write(
    ...     "\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]))
    >>> encoder = kwiden.SentenceEncoder(folder)
    >>> encoder.encode(["a b", "c"]).shape, round(float(encoder.similarity("a b", "a b")), 5)
    ((2, 8), 1.0)
    """

    def __init__(self, checkpoint, pooling=None, batch_size=32, maxlen=None, lowercase=None, model=None,
                 tokenizer=None):  # fmt: skip
        folder = pathlib.Path(checkpoint)
        if not folder.is_dir():
            raise ValueError(f"SentenceEncoder reads a checkpoint folder; {folder} is not one.")
        if pooling is not None and pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}: SentenceEncoder pools by {POOLINGS_TEXT}.")
        if not is_count(batch_size, 1):
            raise ValueError(f"batch_size must be a whole number ≥ 1, got {batch_size!r}.")
        self.batch_size = batch_size
        family = _encoder_family(folder)  # a GPT's folder refused, a model given or not
        self.pooling = _pooling_of(folder, family) if pooling is None else pooling
        if model is None:
            if self.pooling == "pooler" and not checkpoints.holds_layer(folder, naming.POOLER_DENSE, family):
                raise ValueError(f"pooling='pooler' reads the pooler Dense on [CLS]; {folder} holds none (Google's "
                                 "bert/pooler/dense, Hugging Face's pooler.dense): pool by 'cls' or 'mean'.")  # fmt: skip
            with_pool = "linear" if self.pooling == "pooler" else False
            model = build_transformer_model(checkpoint_path=folder, with_pool=with_pool)
        self.model = _check_encoder(model)
        self._pooler = _linear_pooler(self.model) if self.pooling == "pooler" else None
        self._forward = None  # compiled at the first encode of several batches
        loaded = _loaded_tokenizer(folder, tokenizer, lowercase)
        self.maxlen = _maxlen(self.model, folder, maxlen, read_settings(folder).maxlen)
        self.tokenizer = Tokenizer(loaded, maxlen=self.maxlen)
        _check_vocabulary_fits(self.tokenizer, self.model)

    def encode(self, texts, verbose=None):
        """A float32 array with one unit-length row a text (a text alone: one row); a warning counts the texts cut
        to `maxlen`. `verbose`: a progress bar (on stderr) counting the texts; by default shown for more than
        `PROGRESS_BATCHES` batches, True or False to show it or not whatever the length. It never changes the
        vectors."""
        vectors, cut = self.vectors_and_cut(texts, verbose)
        if cut:
            warn(f"SentenceEncoder: {cut} of {len(vectors)} texts are longer than maxlen={self.maxlen} tokens and were "
                 f"cut to their first {self.maxlen}.")  # fmt: skip
        return vectors

    def vectors_and_cut(self, texts, verbose=None):
        """`encode`'s vectors, and how many of the texts were cut to `maxlen` (no warning)."""
        from tqdm.auto import tqdm

        if verbose is not None and verbose not in (True, False):
            raise ValueError(f"verbose={verbose!r}: True (a progress bar), False (none) or None (one for more than "
                             f"{PROGRESS_BATCHES} batches).")  # fmt: skip
        texts = check_texts(_listed(texts), "SentenceEncoder.encode's text")
        shown = len(texts) > PROGRESS_BATCHES * self.batch_size if verbose is None else bool(verbose)
        width = self.model.get_layer(naming.EMBEDDING_TOKEN).output_dim
        # Longest first, as sentence-transformers batches: a batch pads less, and its shapes repeat more.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        vectors, cut = np.zeros((len(texts), width), "float32"), 0
        with tqdm(total=len(texts), unit="text", desc="SentenceEncoder", disable=not shown) as bar:
            for start in range(0, len(texts), self.batch_size):
                rows = order[start : start + self.batch_size]
                vectors[rows], cut_here = self._encoded([texts[i] for i in rows], len(texts) > self.batch_size)
                cut += cut_here
                bar.update(len(rows))
        return vectors, cut

    def similarity(self, a, b):
        """The cosine of `a`'s and `b`'s vectors: a number for two texts, else a matrix (rows `a`, columns `b`)."""
        cosines = self.encode(a) @ self.encode(b).T
        return float(cosines[0, 0]) if isinstance(a, str) and isinstance(b, str) else cosines

    def _encoded(self, texts, compiling):
        """The unit-length vectors of `texts`, and how many of them were cut to `maxlen`."""
        token_ids, segment_ids, cut = self.tokenizer.encode_batch(texts)
        if keras.backend.backend() == "jax":  # jit compiles each length: padded to a few
            token_ids, segment_ids = (_padded_to(ids, LENGTH_BUCKET, self.maxlen) for ids in (token_ids, segment_ids))
        if compiling and self._forward is None:  # a trace pays for itself over several batches, not one
            self._forward = _compiled_forward(self.model)
        # A call's path is its own size's (one batch: eager), whatever was encoded before.
        forward = self._forward if compiling else (lambda ids, segments: self.model([ids, segments], training=False))
        outputs = forward(token_ids.astype("int32"), segment_ids.astype("int32"))
        sequence = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        if self.pooling == "pooler":
            vectors = self._pooler(sequence[:, 0])
        elif self.pooling == "cls":
            vectors = sequence[:, 0]
        else:  # padding (id 0) left out of the mean
            real = (token_ids != 0)[..., None]
            vectors = (keras.ops.convert_to_numpy(sequence) * real).sum(1) / real.sum(1)
        vectors = keras.ops.convert_to_numpy(vectors).astype("float64")
        lengths = np.linalg.norm(vectors, axis=1, keepdims=True)
        bad = np.flatnonzero(~np.isfinite(lengths[:, 0]) | (lengths[:, 0] == 0))
        if bad.size:
            raise ValueError(f"The {self.pooling} vector of {texts[bad[0]]!r} is {'zero' if lengths[bad[0], 0] == 0 else 'not finite'}: "
                             "it has no direction, and no cosine. The model's weights are not a trained encoder's "
                             "(check them), or pool another way (pooling=).")  # fmt: skip
        return (vectors / lengths).astype("float32"), cut


def _compiled_forward(model):
    """`model` on `(token_ids, segment_ids)` compiled: on TensorFlow one graph for every batch size and length
    (traced once, and a text's vector does not depend on the shapes encoded before it; eager runs op by op, at
    about half the speed); on JAX `jax.jit`, a program a shape; elsewhere the model itself."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf  # the backend's own tracer, as Keras' predict step

        spec = tf.TensorSpec((None, None), tf.int32)
        return tf.function(lambda ids, segments: model([ids, segments], training=False), input_signature=[spec, spec])
    if backend == "jax":
        return compiled(lambda ids, segments: model([ids, segments], training=False), model)
    return lambda ids, segments: model([ids, segments], training=False)


def _padded_to(ids, multiple, most):
    """`ids` `(batch, length)` padded (id 0) to the next multiple of `multiple`, or to `most` if that is less."""
    return np.pad(ids, ((0, 0), (0, min(-ids.shape[1] % multiple, most - ids.shape[1]))))


def _encoder_family(folder):
    """The family of the folder's config, refused unless it is an encoder's."""
    config_path = checkpoints.config_beside(checkpoints.open_checkpoint(folder))
    family = family_of_config(read_config_file(config_path))
    if family.name not in ENCODERS:
        raise ValueError(f"SentenceEncoder encodes with a BERT or RoFormer (token and segment ids read both ways); "
                         f"{folder} holds a {family.title}.")  # fmt: skip
    return family


def _check_encoder(model):
    """`model`, refused unless it is a Keras model reading token and segment ids (a kwiden BERT or RoFormer)."""
    if not isinstance(model, keras.Model):
        raise ValueError(f"model= takes the folder's model, built (kwiden.build_transformer_model), not a "
                         f"{type(model).__name__}.")  # fmt: skip
    inputs = {keras_internals.producer(x).name for x in model.inputs}
    if not {naming.INPUT_TOKEN, naming.INPUT_SEGMENT} <= inputs:
        raise ValueError(f"SentenceEncoder encodes with a BERT or RoFormer (inputs {naming.INPUT_TOKEN!r} and "
                         f"{naming.INPUT_SEGMENT!r}); the model {model.name!r} takes {sorted(inputs)}.")  # fmt: skip
    return model


def _check_vocabulary_fits(tokenizer, model):
    """A vocabulary of more tokens than the model has rows would look up rows it has not (an error on TensorFlow's
    CPU, NaN on JAX, zeros on a GPU)."""
    rows = model.get_layer(naming.EMBEDDING_TOKEN).input_dim
    if tokenizer.vocab_size > rows:
        raise ValueError(f"The vocabulary {tokenizer.source} has {tokenizer.vocab_size:,} tokens, the model "
                         f"{rows:,} token embeddings: give the tokenizer the model was trained with (tokenizer=).")  # fmt: skip


def _listed(texts):
    """`texts` as a list: a text alone is one; bytes and what is no collection of texts refused."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, (bytes, bytearray)) or not hasattr(texts, "__iter__"):
        raise ValueError(f"SentenceEncoder.encode takes a text or a list of texts (str), not {type(texts).__name__}.")
    return list(texts)


def _linear_pooler(model):
    """The model's pooler Dense, which must apply no activation (SimBERT's vector is the Dense's output)."""
    layers = {layer.name: layer for layer in model.layers}
    dense = layers.get(naming.POOLER_DENSE)
    if dense is None:
        raise ValueError(f"pooling='pooler' reads the pooler Dense on [CLS]; the model {model.name!r} has none: "
                         "build it with with_pool='linear' (from a checkpoint that holds the pooler), or pool by "
                         "'cls' or 'mean'.")  # fmt: skip
    if dense.activation not in (None, keras.activations.linear):
        raise ValueError(f"pooling='pooler' is the pooler Dense without an activation (SimBERT's vector); the model "
                         f"{model.name!r}'s applies {dense.activation.__name__}: build it with with_pool='linear'.")  # fmt: skip
    return dense


def _pooling_of(folder, family):
    """What a sentence-transformers folder says it pools by; else "pooler" where the checkpoint holds BERT's pooler
    (the vector SimBERT and RoFormer-Sim rank by), else "cls"."""
    _refuse_modules_not_computed(folder)
    config, path = checkpoints.pooling_config(folder)
    if config is None:
        return "pooler" if checkpoints.holds_layer(folder, naming.POOLER_DENSE, family) else "cls"
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not the object of pooling modes sentence-transformers writes; pass pooling=.")
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    if config.get("pooling_mode_cls_token"):
        return "cls"
    modes = [key for key, value in config.items() if key.startswith("pooling_mode") and value]
    raise ValueError(f"{path} pools by {modes}; SentenceEncoder pools by {POOLINGS_TEXT}: pass pooling=.")


def _refuse_modules_not_computed(folder):
    """A sentence-transformers module SentenceEncoder does not compute (a Dense after the pooling) is refused: its
    vectors would not be the folder's."""
    other = [module.type for module in checkpoints.sentence_modules(folder) if module.weighted]
    if other:
        raise ValueError(f"{folder / 'modules.json'} adds {', '.join(other)} to the encoder and its pooling: "
                         f"SentenceEncoder computes {', '.join(checkpoints.WEIGHTLESS_MODULES)} alone, and its vectors "
                         "would not be the folder's. Pass pooling= to encode with the encoder's pooling alone.")  # fmt: skip


def _maxlen(model, folder, maxlen, given):
    """`maxlen`, or the checkpoint folder's (`given`: its sentence-transformers `max_seq_length`, else its
    tokenizer_config.json's `model_max_length`), or the positions its model was trained on (`generation_config.json`'s `max_length`,
    as `kwiden pretrain` records it), or its position table, whichever is least; more than the table or the
    trained length refused."""
    table = next((layer.input_dim for layer in model.layers if layer.name == naming.EMBEDDING_POSITION), None)
    trained, record = trained_max_length(folder)
    if maxlen is None:
        maxlen = min(length for length in (given, trained, table, ROTARY_MAXLEN) if length is not None)
    if not is_count(maxlen, 3):
        raise ValueError(f"maxlen must be a whole number ≥ 3 ([CLS], a token, [SEP]), got {maxlen!r}.")
    if table is not None and maxlen > table:
        raise ValueError(f"maxlen={maxlen}: the model reads {table} positions at most; give maxlen ≤ {table}.")
    if trained is not None and maxlen > trained:
        raise ValueError(f"maxlen={maxlen}: the model was trained on {trained} positions ({record}'s max_length), "
                         f"and those after are untrained; give maxlen ≤ {trained}.")  # fmt: skip
    return maxlen


def _loaded_tokenizer(folder, tokenizer, lowercase):
    """The tokenizer `tokenizer` names (a file, or a folder holding one), else the checkpoint's, loaded by
    `load_tokenizer`; a vocabulary given from elsewhere is cased as its own folder says, else as the checkpoint's."""
    remedy = "; or pass tokenizer= (the vocab.txt or tokenizer.json the model was trained with, or its folder)"
    if tokenizer is None:
        return load_tokenizer(folder, "SentenceEncoder's checkpoint", lowercase, remedy=remedy)
    return load_tokenizer(tokenizer, "SentenceEncoder's tokenizer=", lowercase, fallback=folder, remedy=remedy)
