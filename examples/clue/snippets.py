"""What every CLUE classification baseline shares: flags, reading the data,
the model, batches, the dev callback and the prediction file.

A task script only says how one JSON line becomes text (`Task`) and calls
`run(task, argv)`; everything else is here, so the tasks cannot drift apart.
"""

import argparse
import dataclasses
import json
import math
import os
import pathlib
import sys
import unicodedata
from typing import Callable

import keras
import numpy as np
from keras import ops

import kwiden
from kwiden import optimizers
from kwiden.files import replaced_atomically
from kwiden.growth.plan import hidden_size_of
from kwiden.layers.expandable import default_space
from kwiden.models import naming
from kwiden.text.tokenizer import check_json_texts

# Fields that carry a line's id: CLUE 1.1 names it `id`, CLUEWSC2020 `idx`.
ID_FIELDS = ("id", "idx")
# Pad each batch to a multiple of this: a handful of shapes for the compiled
# step instead of one per length, at a few padding tokens' cost.
PAD_MULTIPLE = 8
# The fewest tokens an example of two texts needs: [CLS], a token of each, two [SEP].
LEAST_MAXLEN = 5
# Each whole-number flag's least value, and what its refusal adds (why, or what to do instead).
LEAST = {
    "epochs": (1, ""),
    "batch_size": (1, ""),
    "accum_steps": (1, " (1: an update every batch)"),
    "grow": (1, "; leave --grow out to fine-tune the model as built"),
    "maxlen": (LEAST_MAXLEN, " ([CLS], two [SEP] and a token of each text)"),
}
# NumPy's seeds, which keras.utils.set_random_seed passes on.
LARGEST_SEED = 2**32 - 1
# The default --lr: a power law in the model's width through these two
# (width, rate) measurements (see `default_lr`), kept inside LR_RANGE.
LR_ANCHORS = ((768, 2e-5), (128, 5e-4))
LR_RANGE = (1e-5, 1e-3)
# The default --warmup: this fraction of the run's updates.
WARMUP = 0.1


@dataclasses.dataclass(frozen=True)
class Task:
    """A CLUE classification task.

    Args:
        name: the task's name, in messages.
        predictions: the prediction file's name, as the CLUE submission wants it.
        texts: a JSON line (a dict) to its text, or to a `(first, second)` pair;
            a missing field raises `KeyError`, a wrong one `ValueError`.
        labels_file: the labels are listed in `labels.json` (else: the set of
            train.json's labels).
        skipped_labels: labelled lines to leave out (the NLI sets' "-": the
            annotators did not agree).
    """

    name: str
    predictions: str
    texts: Callable
    labels_file: bool = False
    skipped_labels: tuple = ()


@dataclasses.dataclass
class Example:
    token_ids: list
    segment_ids: list
    label: object  # the label as the data spells it, then its index; None in test.json
    id: object
    line: int


def parse_args(task, argv=None):
    parser = argument_parser(f"Fine-tune a classifier on CLUE's {task.name}.")
    return check_args(parser, argv, predictions=task.predictions)


def argument_parser(description):
    """The flags every CLUE script takes; a script may add its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data-dir", required=True, help="the task's folder: train.json, dev.json, test.json")
    parser.add_argument("--config", help="config.json or bert_config.json (default: the checkpoint's own)")
    parser.add_argument("--checkpoint", help="pretrained weights (a folder or a TF checkpoint); none: random")
    parser.add_argument(
        "--vocab",
        required=True,
        help="the model's vocab.txt, tokenizer.json or their folder, read as its tokenizer_config.json says "
        "(do_lower_case; uncased where it has none)",
    )
    parser.add_argument("--model", choices=["bert", "roformer"], default="bert")
    parser.add_argument("--grow", type=int, help="widen the built model K times (kwiden.grow) before fine-tuning")
    parser.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adamw")
    parser.add_argument("--accum-steps", type=int, default=1, help="micro-batches per update")
    parser.add_argument(
        "--lr",
        type=float,
        help="the peak learning rate (default: by the model's width, 5e-4 at 128 to 2e-5 at 768; see default_lr)",
    )
    parser.add_argument(
        "--schedule",
        choices=["linear", "constant"],
        default="linear",
        help="linear: warm up linearly over --warmup updates, then decay linearly to 0 at the last update; "
        "constant: --lr throughout",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        help="the updates of warmup: below 1, a fraction of the run's updates (rounded down); a whole number "
        f"from 1, a count of updates (default: {WARMUP:g}, that is {WARMUP * 100:g}%% of the updates)",
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--maxlen", type=int, default=128, help="tokens per example, [CLS] and [SEP] included")
    parser.add_argument("--pooling", choices=["first", "avg", "max"], default="first")
    parser.add_argument("--output-dir", default="outputs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mixed-precision", action="store_true", help="compute in float16 (GPUs)")
    return parser


def check_args(parser, argv=None, least=None, predictions=None):
    """The parsed flags, refused here (a usage error naming the flag) where
    they would fail, or quietly do something else, only once training starts
    or ends: numbers below `LEAST` (and a script's own `least`), a --lr that
    is not a positive number, a --warmup that is neither a fraction below 1
    nor a whole number (or is given with --schedule constant), an
    --output-dir that cannot hold `predictions`.

    `args.parser` is the parser, for the usage errors that need the data
    (`schedule_of`: a --warmup as long as the run)."""
    args = parser.parse_args(argv)
    if args.config is None and args.checkpoint is None:
        parser.error("give --config, --checkpoint, or both")
    problem = next(number_problems(args, {**LEAST, **(least or {})}), None)
    problem = problem or output_dir_problem(pathlib.Path(args.output_dir), predictions)
    if problem:
        parser.error(problem)
    args.parser = parser
    return args


def number_problems(args, least):
    for name, (smallest, instead) in least.items():
        value = getattr(args, name)
        if value is not None and value < smallest:
            yield f"--{name.replace('_', '-')} must be at least {smallest}, got {value}{instead}"
    if not 0 <= args.seed <= LARGEST_SEED:
        yield f"--seed must be between 0 and {LARGEST_SEED}, got {args.seed}"
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        yield f"--lr must be a positive number, got {args.lr}"
    yield from warmup_problems(args)


def warmup_problems(args):
    warmup = args.warmup
    if warmup is None:
        return
    if args.schedule == "constant":
        yield "--warmup is for --schedule linear; leave it out with --schedule constant"
    elif not (math.isfinite(warmup) and warmup >= 0):
        yield f"--warmup must be a number at least 0, got {warmup:g}"
    elif warmup >= 1 and not warmup.is_integer():
        yield (
            "--warmup must be a fraction below 1 (0.1: 10% of the updates) or a whole number of updates, "
            f"got {warmup:g}"
        )


def output_dir_problem(folder, predictions=None):
    """Why the predictions could not be written under `folder` (made if
    missing), or None: said before training, not after it."""
    if folder.exists() and not folder.is_dir():
        return f"--output-dir {folder} is a file; give a folder (it is made if missing)"
    if predictions and (folder / predictions).is_dir():
        return (
            f"--output-dir {folder} holds a folder {predictions}, where the predictions go; "
            "move it or give another --output-dir"
        )
    nearest = next(path for path in (folder, *folder.parents) if path.exists())
    if not nearest.is_dir():
        return f"--output-dir {folder} cannot be made: {nearest} is a file; give a folder path"
    if not os.access(nearest, os.W_OK | os.X_OK):
        return (
            f"--output-dir {folder} cannot be made or written: {nearest} is not writable; "
            "give a folder you can write to"
        )
    return None


# Reading CLUE's JSON lines.


def read_json_lines(path):
    """`(line number, dict)` for each non-blank line of a JSON-lines file;
    errors name the file and the line."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (a CLUE task folder holds train.json, dev.json, test.json).")
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path}, line {number}: not UTF-8 text.") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, line {number}: not valid JSON ({error.msg}).") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}, line {number}: a JSON object was expected, got {type(record).__name__}.")
            yield number, check_json_texts(record, f"{path}, line {number}")


def read_json(path):
    """A whole JSON file (CHID's answers, C3's lists, CMRC2018's SQuAD-like
    files); errors name the file (and the line of a syntax error)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file.")
    try:
        return check_json_texts(json.loads(path.read_bytes().decode("utf-8")), str(path))
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text.") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}, line {error.lineno}: not valid JSON ({error.msg}).") from None


def text_of(task, record, where):
    """The `(first, second)` texts of a record (`second` None for one text)."""
    try:
        texts = task.texts(record)
    except KeyError as error:
        raise ValueError(f"{where}: no field {error} (the line has {', '.join(map(repr, record))}).") from None
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None
    first, second = texts if isinstance(texts, tuple) else (texts, None)
    for text in (first, second):
        if text is not None and not isinstance(text, str):
            raise ValueError(f"{where}: a text field holds {type(text).__name__} {text!r}, not a string.")
    return first, second


def command(main):
    """Run a script's `main` from the command line: a refusal (data that is
    not what the task reads, a missing file) prints its one line, naming the
    file and line to fix, and exits with status 1; no traceback before it."""
    try:
        main()
    except (ValueError, OSError) as error:
        print(f"{pathlib.Path(sys.argv[0]).stem}: {error}", file=sys.stderr)
        sys.exit(1)


def label_of(record, where):
    """The line's label as text, as CLUE writes labels: `1` and `"1"` are one
    label, and so are `true` and `"true"`; the predictions write it so."""
    if "label" not in record:
        raise ValueError(f"{where}: no field 'label' (the line has {', '.join(map(repr, record))}).")
    label = record["label"]
    if isinstance(label, bool):
        return json.dumps(label)  # true, false: JSON's spelling
    if isinstance(label, int):
        return str(label)
    if not isinstance(label, str):
        raise ValueError(f"{where}: the label is {type(label).__name__} {label!r}, not a string or a whole number.")
    return label


def line_id(record, where):
    """The line's `id` (or `idx`, as CLUEWSC spells it): the submission file
    answers by id, so a line without one, or with one that is not an id
    (`checked_id`), is an error."""
    for field in ID_FIELDS:
        if field in record:
            return checked_id(record[field], f"{where}: the {field!r}")
    raise ValueError(f"{where}: no field 'id' (nor {', '.join(repr(f) for f in ID_FIELDS[1:])}).")


def checked_id(value, what):
    """`value` if it is a whole number or a string, as CLUE's ids are; a list
    or a dict (which cannot key the predictions), a float, a bool or null
    (which a grader would not match) is refused, `what` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{what} is {type(value).__name__} {value!r}, not a whole number or a string.")
    return value


def first_use(id_, number, lines_of_id, where):
    """Remember that line `number` has `id_` (`lines_of_id`: an id's text to
    its first line and spelling); an id an earlier line had is refused, as the
    submission has one prediction an id. `1` and `"1"` are one id: a grader
    reading ids as text would merge them."""
    earlier = lines_of_id.setdefault(str(id_), (number, id_))
    if earlier[0] != number:
        spelled = "" if earlier[1] == id_ else f" (as {earlier[1]!r})"
        raise ValueError(f"{where}: id {id_!r} was already used on line {earlier[0]}{spelled}.")


def read_examples(path, task, tokenizer, maxlen, labelled):
    """The tokenized examples of one file; labels stay as the data spells them."""
    examples, lines_of_id = [], {}
    for number, record in read_json_lines(path):
        where = f"{path}, line {number}"
        first, second = text_of(task, record, where)
        label = label_of(record, where) if labelled else None
        if labelled and label in task.skipped_labels:
            continue
        id_ = line_id(record, where) if not labelled else record.get("id", number - 1)
        if not labelled:
            first_use(id_, number, lines_of_id, where)
        token_ids, segment_ids = tokenizer.encode(first, second, maxlen=maxlen)
        examples.append(Example(token_ids, segment_ids, label, id_, number))
    if not examples:
        raise ValueError(f"{path}: no examples in the file.")
    return examples


def read_labels(data_dir, task, train_examples):
    """The task's labels, in order: labels.json's, or train.json's sorted set.
    Never a fixed list, so that any CLUE-format task can be run."""
    if not task.labels_file:
        return sorted({example.label for example in train_examples}, key=str)
    path = pathlib.Path(data_dir) / "labels.json"
    labels = [label_of(record, f"{path}, line {number}") for number, record in read_json_lines(path)]
    if not labels:
        raise ValueError(f"{path}: no labels in the file.")
    return labels


def index_labels(examples, labels, path):
    """Replace each example's label by its index in `labels`."""
    index = {label: i for i, label in enumerate(labels)}
    for example in examples:
        if example.label not in index:
            raise ValueError(
                f"{path}, line {example.line}: unknown label {example.label!r} "
                f"(the task's labels: {', '.join(map(repr, labels))})."
            )
        example.label = index[example.label]


def load_data(args, task, tokenizer):
    """Train, dev and test examples and the labels; every file is read and
    checked before any training starts, so bad data fails in seconds."""
    data_dir = pathlib.Path(args.data_dir)
    read = {
        name: read_examples(data_dir / f"{name}.json", task, tokenizer, args.maxlen, labelled=name != "test")
        for name in ("train", "dev", "test")
    }
    labels = read_labels(data_dir, task, read["train"])
    for name in ("train", "dev"):
        index_labels(read[name], labels, data_dir / f"{name}.json")
    return read["train"], read["dev"], read["test"], labels


def tokenizer_of(args):
    """The tokenizer --vocab names (a vocab.txt, a tokenizer.json or a folder), loaded as every kwiden entry
    point loads one: cased as its folder's tokenizer_config.json says, uncased where it has none."""
    return kwiden.Tokenizer(args.vocab)


# Chinese text one token a character (CMRC2018, CLUENER).


class CharacterTokens:
    """One token per character, every character of the text, in order: token
    i is character i, so character indices (entities, answers) map one to one.

    A space (any whitespace: tab, newline, the ideographic space) is a token
    too, `[unused1]` where the vocabulary has it (as bert4keras's character
    tokenizers do: an id pretraining never used, so it stands for the space
    alone), else `[UNK]`. Dropping spaces, as BERT's tokenizer does, would run
    `foo bar` together as `foobar`, and leave an entity starting on a space
    in no window. Letters are lower-cased (and accents stripped) only where
    the tokenizer lower-cases (`kwiden.Tokenizer.lowercase`)."""

    def __init__(self, tokenizer):
        """`tokenizer`: a `kwiden.Tokenizer`, or what it loads (a vocab.txt, a tokenizer.json, a folder)."""
        tokenizer = tokenizer if isinstance(tokenizer, kwiden.Tokenizer) else kwiden.Tokenizer(tokenizer)
        self.ids = tokenizer.get_vocab()  # the folder's tokens, cased as it says
        self.lowercase = tokenizer.lowercase
        self.unknown, self.cls, self.sep = (self.ids[t] for t in ("[UNK]", "[CLS]", "[SEP]"))
        self.space = self.ids.get("[unused1]", self.unknown)

    def id_of(self, character):
        if character.isspace():
            return self.space
        if not self.lowercase:  # a cased model reads a character as it is
            return self.ids.get(character, self.unknown)
        character = character.lower()
        if character not in self.ids:  # an accented letter: its base, as uncased BERTs read it
            character = "".join(c for c in unicodedata.normalize("NFD", character) if not unicodedata.combining(c))
        return self.ids.get(character, self.unknown)

    def encode(self, text):
        """The token ids, one a character."""
        return [self.id_of(character) for character in text]


# Batches.


class Batches(keras.utils.PyDataset):
    """Examples in batches of similar lengths, each padded (with id 0) to
    its longest, so that short texts do not pay for long ones. With
    `shuffle`, batches are drawn afresh each epoch."""

    def __init__(self, examples, batch_size, shuffle=False, seed=0, maxlen=None):
        super().__init__()
        self.examples = examples
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.maxlen = maxlen
        self.rng = np.random.default_rng(seed)
        self.batches = self.bucketed()

    def bucketed(self):
        """Index batches: sorted by length within windows of 100 batches (still
        a fresh mix each epoch), then the batches in random order."""
        order = self.rng.permutation(len(self.examples)) if self.shuffle else np.arange(len(self.examples))
        window = 100 * self.batch_size
        batches = []
        for start in range(0, len(order), window):
            chunk = sorted(order[start : start + window], key=lambda i: self.size(self.examples[i]))
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        if self.shuffle:
            self.rng.shuffle(batches)
        return self.varied_first(batches)

    def varied_first(self, batches):
        """Keras' TensorFlow adapter fixes every dimension its first two batches
        agree on (`NUM_BATCHES_FOR_TENSOR_SPEC`), and a later batch of another
        length then fails; so a batch of another length, if any, goes second."""
        lengths = [self.length(batch) for batch in batches]
        other = next((i for i, length in enumerate(lengths) if length != lengths[0]), None)
        if other is not None:
            batches[1], batches[other] = batches[other], batches[1]
        return batches

    def size(self, example):
        """An example's tokens."""
        return len(example.token_ids)

    def length(self, batch):
        """The padded length of a batch of example indices."""
        return padded_length(max(self.size(self.examples[i]) for i in batch), self.maxlen)

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        chosen = [self.examples[i] for i in self.batches[index]]
        length = self.length(self.batches[index])
        token_ids = np.zeros((len(chosen), length), "int32")
        segment_ids = np.zeros_like(token_ids)
        for row, example in enumerate(chosen):
            token_ids[row, : len(example.token_ids)] = example.token_ids
            segment_ids[row, : len(example.segment_ids)] = example.segment_ids
        if chosen[0].label is None:
            return ((token_ids, segment_ids),)
        return (token_ids, segment_ids), self.targets(chosen, length)

    def targets(self, chosen, length):
        """The targets of the `chosen` examples, padded to `length` tokens: their labels."""
        return np.array([e.label for e in chosen], "int32")

    def on_epoch_end(self):
        if self.shuffle:
            self.batches = self.bucketed()

    def order(self):
        """The example indices in the order the batches give them."""
        return [i for batch in self.batches for i in batch]


def padded_length(longest, maxlen=None):
    rounded = -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE
    return rounded if maxlen is None else max(longest, min(rounded, maxlen))


# The model.


@keras.saving.register_keras_serializable(package="kwiden_clue")
class MaskedPooling(kwiden.layers.Expandable, keras.layers.Layer):
    """The mean or the max of a sequence over its non-padding tokens
    (`token_ids != 0`). No weights: it grows by passing its input's space on."""

    def __init__(self, mode="avg", **kwargs):
        super().__init__(**kwargs)
        if mode not in ("avg", "max"):
            raise ValueError(f"MaskedPooling's mode is 'avg' or 'max', not {mode!r}.")
        self.mode = mode

    def call(self, inputs):
        sequence, token_ids = inputs
        mask = ops.expand_dims(ops.not_equal(token_ids, 0), -1)
        if self.mode == "max":
            return ops.max(ops.where(mask, sequence, ops.cast(float("-inf"), sequence.dtype)), axis=1)
        weights = ops.cast(mask, sequence.dtype)
        return ops.sum(sequence * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1)

    def compute_output_shape(self, input_shape):
        sequence_shape = input_shape[0]
        return (sequence_shape[0], sequence_shape[2])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}

    def get_expanded_output_space(self, k, input_space=None, **call_kwargs):
        return default_space(k, input_space)

    def get_expanded_weight_axes(self, k, input_space):
        return {}


def pool(sequence, token_ids, pooling):
    """One vector per text: the first token's ([CLS]; bert4keras' CLUE
    baselines take it from the sequence, not through BERT's pooler, which
    RoFormer lacks), or the mean or max over the real tokens."""
    if pooling == "first":
        return kwiden.layers.SelectToken(0, name="Pool-First")(sequence)
    return MaskedPooling(pooling, name=f"Pool-{pooling.capitalize()}")([sequence, token_ids])


def build_model(args, head, name):
    """The encoder with `head(token_ids, sequence)` on top, built functionally
    so that `kwiden.grow` can widen it (the head keeps its output width), its
    layers in float16 under `--mixed-precision` (only these: the caller's
    policy is put back)."""
    policy = keras.mixed_precision.dtype_policy()
    if args.mixed_precision:
        keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        encoder = kwiden.build_transformer_model(
            config_path=args.config, checkpoint_path=args.checkpoint, model=args.model
        )
        model = keras.Model(encoder.inputs, head(encoder.inputs[0], encoder.outputs[0]), name=name)
        if args.grow:
            model = kwiden.grow(model, args.grow, seed=args.seed)
    finally:
        keras.mixed_precision.set_dtype_policy(policy)
    return model


def build_classifier(args, num_labels):
    """Encoder, pooling, dropout and a softmax Dense over the labels."""

    def head(token_ids, sequence):
        pooled = pool(sequence, token_ids, args.pooling)
        pooled = keras.layers.Dropout(0.1, name="Classifier-Dropout")(pooled)
        # float32 probabilities even under mixed precision: the loss wants them.
        return keras.layers.Dense(num_labels, activation="softmax", dtype="float32", name="Classifier")(pooled)

    return build_model(args, head, "classifier")


def check_model(model, tokenizer, args):
    """What the flags ask of the built model, before it trains."""
    check_vocabulary(model, tokenizer, args.vocab)
    check_positions(model, args.maxlen)


def check_positions(model, maxlen):
    """A --maxlen past a learned position table would fail in a kernel at the
    first batch that long, maybe only in predict after every epoch; rotary
    models (RoFormer) have no table, and no such limit."""
    if naming.EMBEDDING_POSITION not in {layer.name for layer in model.layers}:
        return
    positions = model.get_layer(naming.EMBEDDING_POSITION).input_dim
    if maxlen > positions:
        raise ValueError(
            f"--maxlen {maxlen} is more than the model's {positions} positions (its config's "
            f"max_position_embeddings); give --maxlen {positions} or less."
        )


def check_vocabulary(model, tokenizer, vocab_path):
    """Ids past the token table would fail deep in a kernel; say so here."""
    rows = model.get_layer(naming.EMBEDDING_TOKEN).input_dim
    if tokenizer.vocab_size > rows:
        raise ValueError(
            f"The vocabulary {vocab_path} has {tokenizer.vocab_size} tokens, the model's token table only {rows}: "
            "give the vocab.txt that comes with the checkpoint (or the config)."
        )


# The learning rate and its schedule.


def default_lr(width):
    """The default fine-tuning rate of a model `width` wide (its hidden size):
    the power law through two measurements, clipped to `LR_RANGE` and rounded
    to two significant digits.

    - 2e-5 at width 768: the rate BERT-base is fine-tuned at (the low end of
      the BERT paper's 2e-5 to 5e-5; these scripts' old default for every model).
    - 5e-4 at width 128: a 128-wide, 2-block BERT pretrained for 800 updates
      reached 0.78 test accuracy on a Chinese sentiment task fine-tuned at
      5e-4 (3 epochs), against 0.64 at 2e-5 (2 epochs).

    A narrow model wants a much larger rate than BERT-base's: the rate goes as
    width^-1.80 (25 times the rate for a model 6 times narrower).

    >>> [default_lr(width) for width in (128, 256, 512, 768, 1024)]
    [0.0005, 0.00014, 4.1e-05, 2e-05, 1.2e-05]
    >>> default_lr(16), default_lr(4096)  # clipped
    (0.001, 1e-05)
    """
    (wide, wide_rate), (narrow, narrow_rate) = LR_ANCHORS
    exponent = math.log(narrow_rate / wide_rate) / math.log(wide / narrow)
    rate = min(max(wide_rate * (wide / width) ** exponent, LR_RANGE[0]), LR_RANGE[1])
    return float(f"{rate:.2g}")


def counted(number, thing, things=None):
    """`1 update`, `2 updates`."""
    return f"{number} {thing if number == 1 else things or thing + 's'}"


def rate_text(rate):
    """A rate as people write it: 5e-4, 1.4e-4, 2e-5."""
    mantissa, exponent = f"{rate:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The run's updates and the learning rate over them.

    updates: the parameter updates the run makes.
    warmup: updates of linear warmup (then linear decay to 0 at `updates`);
        None under --schedule constant.
    run: how `updates` comes about, in words ("3 epochs of 100 batches").
    warmup_from: where `warmup` comes from, in words ("10% of 300, the default").
    """

    updates: int
    warmup: object
    run: str
    warmup_from: str = ""

    def rate(self, peak):
        """The rate to give the optimizer: `peak` throughout, or a
        `kwiden.optimizers.WarmupDecay` (called with updates, so the same
        whatever the --accum-steps)."""
        if self.warmup is None:
            return peak
        return optimizers.WarmupDecay(peak, warmup_steps=self.warmup, total_steps=self.updates)

    def describe(self, peak, peak_from):
        """The log line: the rate, the schedule, and why."""
        rate = f"lr {rate_text(peak)} ({peak_from})"
        if self.warmup is None:
            return f"{rate}, constant over {counted(self.updates, 'update')} ({self.run}; --schedule constant)"
        return (
            f"{rate}, warmup {counted(self.warmup, 'update')} ({self.warmup_from}) then linear decay to 0 "
            f"over {self.updates} ({self.run})"
        )


def updates_of(args, batches):
    """The parameter updates of the run: --epochs times the batches, one per
    --accum-steps of them (a cycle left unfinished at the end is not
    applied), and how, in words. An --accum-steps that no update would
    complete is refused."""
    micro_batches = args.epochs * len(batches)
    if args.accum_steps > micro_batches:
        raise ValueError(
            f"--accum-steps {args.accum_steps} is more than the {micro_batches} batches of the run "
            f"({args.epochs} epochs of {len(batches)}): no update would be made; lower it or train longer."
        )
    run = f"{counted(args.epochs, 'epoch')} of {counted(len(batches), 'batch', 'batches')}"
    if args.accum_steps > 1:
        run += f", {args.accum_steps} per update"
    return micro_batches // args.accum_steps, run


def schedule_of(args, batches):
    """The run's `Schedule`, from --schedule and --warmup: a --warmup below 1
    is a fraction of the updates (rounded down), else a count of updates.
    A warmup that is not shorter than the run is a usage error (the rate
    would never decay), said before the model is built."""
    updates, run = updates_of(args, batches)
    if args.schedule == "constant":
        return Schedule(updates, None, run)
    warmup = WARMUP if args.warmup is None else args.warmup
    if warmup < 1:
        count = math.floor(warmup * updates + 1e-9)  # 0.29 of 100 is 29, not 28.999…
        share = f"{warmup * 100:g}% of {updates}"
        warmup_from = share + (", the default" if args.warmup is None else f", --warmup {warmup:g}")
    else:
        count = int(warmup)
        warmup_from = f"--warmup {count}"
    if count >= updates:
        args.parser.error(
            f"--warmup {warmup:g} is not fewer than the run's {counted(updates, 'update')} ({run}); "
            "give fewer updates, or a fraction below 1 (0.1: 10% of them)"
        )
    return Schedule(updates, count, run, warmup_from)


def optimizer(args, model, schedule):
    """The --optimizer, its rate --lr (else `default_lr` of the model's
    width, as grown by --grow) on `schedule`; the rate, the schedule and why
    are printed."""
    width = hidden_size_of(model)
    if args.lr is not None:
        peak, peak_from = args.lr, "--lr"
    else:
        peak, peak_from = default_lr(width), f"default for width {width}"
        if peak in LR_RANGE:
            peak_from += f", the width rule clipped to {rate_text(LR_RANGE[0])}..{rate_text(LR_RANGE[1])}"
    print(schedule.describe(peak, peak_from))
    return OPTIMIZERS[args.optimizer](args, schedule.rate(peak))


def adamw(args, learning_rate):
    return optimizers.AdamW(learning_rate, weight_decay=0.01, accum_steps=args.accum_steps)


def adam(args, learning_rate):
    return optimizers.Adam(learning_rate, accum_steps=args.accum_steps)


def sgdm(args, learning_rate):
    return optimizers.SGDM(learning_rate, momentum=0.9, accum_steps=args.accum_steps)


def radam(args, learning_rate):
    return optimizers.RAdam(learning_rate, accum_steps=args.accum_steps)


OPTIMIZERS = {"adamw": adamw, "adam": adam, "sgdm": sgdm, "radam": radam}


def compile_classifier(model, args, schedule):
    model.compile(optimizer(args, model, schedule), "sparse_categorical_crossentropy", metrics=["accuracy"])


# Evaluation and predictions.


def predict_probabilities(model, examples, batch_size, maxlen=None):
    """Probabilities in the examples' order (batches are sorted by length)."""
    batches = Batches(examples, batch_size, maxlen=maxlen)
    probabilities = np.empty((len(examples), model.output_shape[-1]), "float32")
    probabilities[batches.order()] = model.predict(batches, verbose=0)
    return probabilities


def accuracy(model, examples, batch_size, maxlen=None):
    predicted = predict_probabilities(model, examples, batch_size, maxlen).argmax(-1)
    return float(np.mean(predicted == np.array([e.label for e in examples])))


class KeepBest(keras.callbacks.Callback):
    """Dev accuracy after every epoch; the best epoch's weights are kept and
    put back when training ends, so the predictions come from them.

    `evaluate(model)`, if given, is the dev score instead of the classifier's
    accuracy on `dev` (a multiple-choice or span task's own), printed as
    `measure`."""

    def __init__(self, dev=None, batch_size=None, maxlen=None, evaluate=None, measure="accuracy"):
        super().__init__()
        self.evaluate = evaluate or (lambda model: accuracy(model, dev, batch_size, maxlen))
        self.measure = measure
        self.best_accuracy, self.best_weights = -1.0, None

    def on_epoch_end(self, epoch, logs=None):
        dev_accuracy = self.evaluate(self.model)
        if dev_accuracy > self.best_accuracy:
            self.best_accuracy, self.best_weights = dev_accuracy, self.model.get_weights()
        if logs is not None:
            logs["dev_accuracy"] = dev_accuracy
        print(f"epoch {epoch + 1}: dev {self.measure} {dev_accuracy:.4f}, best {self.best_accuracy:.4f}")

    def on_train_end(self, logs=None):
        if self.best_weights is not None:
            self.model.set_weights(self.best_weights)


def write_predictions(path, examples, labels, probabilities):
    """One `{"id", "label"}` line per test example, the label as the data
    spells it."""
    records = [{"id": e.id, "label": labels[i]} for e, i in zip(examples, probabilities.argmax(-1))]
    return write_json(path, records, lines=True)


def write_json(path, value, lines=False):
    """`value` as one JSON document, or (`lines`) a list as one JSON a line.
    Written to a temporary file and renamed: a failed run leaves no
    half-written submission."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced_atomically(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as out:
            if lines:
                out.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in value)
            else:
                json.dump(value, out, ensure_ascii=False, indent=1)
                out.write("\n")
    return path


# The whole run.


def fit(model, batches, args, callbacks):
    """`model.fit` over --epochs, refusing an --accum-steps that no update
    would complete (`updates_of`)."""
    updates_of(args, batches)
    return model.fit(batches, epochs=args.epochs, callbacks=callbacks)


def run(task, argv=None):
    """Fine-tune on train.json, keep the best dev epoch, predict test.json.

    Returns `{"dev_accuracy": best dev accuracy, "predictions": the file's path}`.
    """
    args = parse_args(task, argv)
    keras.utils.set_random_seed(args.seed)
    tokenizer = tokenizer_of(args)
    train, dev, test, labels = load_data(args, task, tokenizer)
    train_batches = Batches(train, args.batch_size, shuffle=True, seed=args.seed, maxlen=args.maxlen)
    schedule = schedule_of(args, train_batches)
    model = build_classifier(args, len(labels))
    check_model(model, tokenizer, args)
    compile_classifier(model, args, schedule)
    keep_best = KeepBest(dev, args.batch_size, args.maxlen)
    fit(model, train_batches, args, [keep_best])
    probabilities = predict_probabilities(model, test, args.batch_size, args.maxlen)
    path = write_predictions(pathlib.Path(args.output_dir) / task.predictions, test, labels, probabilities)
    print(f"{task.name}: best dev accuracy {keep_best.best_accuracy:.4f}; predictions in {path}")
    return {"dev_accuracy": keep_best.best_accuracy, "predictions": path}


# Multiple choice (CHID, C3): one score per (example, choice), a softmax over
# each example's choices.


@dataclasses.dataclass
class Choices:
    """One question and its choices, each already encoded.

    rows: a `(token_ids, segment_ids)` pair per choice.
    label: the right choice's index; None in test.json.
    """

    rows: list
    label: object
    id: object
    where: str


class ChoiceBatches(Batches):
    """`batch_size` questions a batch, their choices flattened into rows, each
    question padded to `choices` rows (an empty text: its score is masked).
    Targets, one per row: 1 for the right choice, 0 for the others, -1 for
    padding rows."""

    def __init__(self, examples, batch_size, choices, shuffle=False, seed=0, maxlen=None):
        self.choices = choices
        super().__init__(examples, batch_size, shuffle=shuffle, seed=seed, maxlen=maxlen)

    def size(self, example):
        return max(len(token_ids) for token_ids, _ in example.rows)

    def __getitem__(self, index):
        chosen = [self.examples[i] for i in self.batches[index]]
        length = self.length(self.batches[index])
        token_ids = np.zeros((len(chosen) * self.choices, length), "int32")
        segment_ids = np.zeros_like(token_ids)
        targets = np.full(len(token_ids), -1, "int32")
        for number, example in enumerate(chosen):
            for choice in range(self.choices):
                row = number * self.choices + choice
                # A padding row repeats the first choice: real tokens, never an all-padding row.
                ids, segments = example.rows[choice] if choice < len(example.rows) else example.rows[0]
                token_ids[row, : len(ids)], segment_ids[row, : len(ids)] = ids, segments
                if choice < len(example.rows):
                    targets[row] = int(choice == example.label)
        if chosen[0].label is None:
            return ((token_ids, segment_ids),)
        return (token_ids, segment_ids), targets


def most_choices(*example_lists):
    return max(len(example.rows) for examples in example_lists for example in examples)


def choice_loss(choices):
    """Cross-entropy of the softmax over each question's `choices` rows; padding rows (target -1) left out."""

    def loss(targets, scores):
        targets = ops.reshape(ops.cast(targets, "float32"), (-1, choices))
        scores = ops.reshape(ops.cast(scores, "float32"), (-1, choices))
        scores = ops.where(targets < 0, -1e9, scores)
        return ops.categorical_crossentropy(ops.maximum(targets, 0.0), scores, from_logits=True)

    return loss


def build_scorer(args):
    """Encoder, the first token, dropout and a Dense(1): one score per row."""

    def head(token_ids, sequence):
        pooled = pool(sequence, token_ids, args.pooling)
        pooled = keras.layers.Dropout(0.1, name="Scorer-Dropout")(pooled)
        return keras.layers.Dense(1, dtype="float32", name="Scorer")(pooled)

    return build_model(args, head, "scorer")


def predict_choices(model, examples, batch_size, choices, maxlen=None):
    """Each question's chosen index, in the examples' order."""
    batches = ChoiceBatches(examples, batch_size, choices, maxlen=maxlen)
    scores = np.empty((len(examples), choices), "float32")
    scores[batches.order()] = model.predict(batches, verbose=0).reshape(-1, choices)
    for row, example in enumerate(examples):
        scores[row, len(example.rows) :] = -np.inf
    return scores.argmax(-1)


def run_multiple_choice(name, read, argv=None, predictions=None):
    """Fine-tune a scorer on the train examples, keep the best dev epoch,
    choose for the test examples.

    `read(args, tokenizer)` gives `(train, dev, test)` lists of `Choices`,
    every file read and checked before training; `predictions`, the file's
    name, is checked to be writable under --output-dir first. Returns
    `{"dev_accuracy", "test": test examples, "chosen": their chosen indices}`.
    """
    parser = argument_parser(f"Fine-tune a multiple-choice model on CLUE's {name}.")
    args = check_args(parser, argv, predictions=predictions)
    keras.utils.set_random_seed(args.seed)
    tokenizer = tokenizer_of(args)
    train, dev, test = read(args, tokenizer)
    choices = most_choices(train, dev, test)
    batches = ChoiceBatches(train, args.batch_size, choices, shuffle=True, seed=args.seed, maxlen=args.maxlen)
    schedule = schedule_of(args, batches)
    model = build_scorer(args)
    check_model(model, tokenizer, args)
    model.compile(optimizer(args, model, schedule), choice_loss(choices))

    def dev_accuracy(model):
        chosen = predict_choices(model, dev, args.batch_size, choices, args.maxlen)
        return float(np.mean(chosen == np.array([example.label for example in dev])))

    keep_best = KeepBest(evaluate=dev_accuracy)
    fit(model, batches, args, [keep_best])
    chosen = predict_choices(model, test, args.batch_size, choices, args.maxlen)
    print(f"{name}: best dev accuracy {keep_best.best_accuracy:.4f}")
    return {"dev_accuracy": keep_best.best_accuracy, "test": test, "chosen": chosen, "args": args}
