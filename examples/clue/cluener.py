"""CLUENER2020 (fine-grained named entities): which spans of a text are
entities, and of which of CLUENER's types? JSON lines `{"text": …, "label":
{type: {entity: [[start, end], …]}}}` (character indices, the end included);
test.json's lines have an `id` and no label.

The text is tokenized one character at a time (Chinese BERTs' own
tokenization), every character a token, in order, a space too (`[unused1]`
where the vocabulary has it, else `[UNK]`: `snippets.CharacterTokens`), so
that token i of a window is character `start + i` of the text and words
stay apart.
A text longer than --maxlen is cut into windows every --stride characters
(half a window by default, at most a window: --maxlen − 2 characters) and
the spans found in each are put back together, not silently truncated.
Every entity of at most `window − stride + 1` characters lies whole in a
window; on train.json a window is also centred on each entity those miss,
so every entity a window can hold is trained on (dev and test windows do
not look at the gold). An entity longer than a window can be neither
trained on nor predicted: the log counts those in train.json and dev.json,
and dev.json's entities across every window's edge; dev F1 counts them all
as missed.
Three heads on the sequence output (--head):

- `globalpointer` (the default, as bert4keras's CLUENER baseline): for each
  type, start and end vectors per token with rotary positions inside the
  head; a span's score is their inner product; trained with the multi-label
  categorical cross-entropy over all spans; a span scored above 0 is an
  entity. Nested and overlapping entities (and one span of two types) are
  kept, in training and in prediction: each is its own cell of the matrix.
- `efficient`: EfficientGlobalPointer, the start and end projections shared
  by the types, a small per-type bias; nested entities kept as well.
- `crf`: BIO tags from a Dense and a conditional random field, trained by its
  log-likelihood, decoded by Viterbi (the classic BERT+CRF). One tag a
  character holds one entity a character: a train.json or dev.json whose
  entities overlap is refused before training, naming the line and the two
  spans (give `globalpointer` or `efficient`).

    python examples/clue/cluener.py --data-dir CLUE/cluener_public \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Prints the entity-level precision, recall and F1 on dev after every epoch
and keeps the best; writes `cluener_predict.json` under --output-dir, one
`{"id": …, "label": {type: {entity: [[start, end]]}}}` a line (CLUE's
submission format).
"""

import collections
import dataclasses
import pathlib
import time

import keras
import numpy as np
import snippets

import kwiden

HEADS = ("globalpointer", "efficient", "crf")
HEAD_SIZE = 64  # a GlobalPointer's start and end vectors (bert4keras's CLUENER baseline)
# The CRF's transitions learn this much faster than the encoder (bert4keras's crf_lr_multiplier, 1000 at
# BERT-base's 2e-5; the scripts' rates for small models are some 25 times larger).
CRF_LR_MULTIPLIER = 100
PREDICTIONS = "cluener_predict.json"
LEAST = {"stride": (1, "")}


@dataclasses.dataclass
class Window:
    token_ids: list
    segment_ids: list
    label: object  # the spans inside the window, `(type, first token, last token)`; None to predict
    text: int  # the text's index in its file (not its id: ids are only test.json's, and checked there)
    start: int  # the text's character at the window's token 1 (token 0 is [CLS]): a token a character

    @property
    def end(self):
        """The text's character after the window's last ([CLS] and [SEP] are none)."""
        return self.start + len(self.token_ids) - 2


@dataclasses.dataclass
class Text:
    id: object  # test.json's, which the submission answers by; None in train.json and dev.json
    text: str
    spans: set  # `(type, start, end)` characters, the end included; empty in test.json
    line: int


def parse_args(argv=None):
    parser = snippets.argument_parser("Fine-tune a named-entity recognizer on CLUE's CLUENER2020.")
    parser.add_argument("--head", choices=HEADS, default="globalpointer", help="globalpointer (default), "
                        "efficient (EfficientGlobalPointer) or crf (BIO tags, a conditional random field)")  # fmt: skip
    parser.add_argument("--stride", type=int, default=None, help="characters between windows' starts over a "
                        "text longer than --maxlen, at most a window, --maxlen - 2 (default: half that)")  # fmt: skip
    args = snippets.check_args(parser, argv, least=LEAST, predictions=PREDICTIONS)
    room = room_of(args)
    if args.stride is not None and args.stride > room:
        parser.error(f"--stride {args.stride} is more than a window's {room} characters (--maxlen {args.maxlen} "
                     "less [CLS] and [SEP]): the characters between two windows would lie in none; give "
                     f"--stride {room} or less, or a larger --maxlen")  # fmt: skip
    return args


def read_texts(path, labelled):
    """Each line's text and spans; a line the format does not allow is refused, naming the file and line, and
    so is a test line without an id, with one that is not a whole number or a string, or with an earlier
    line's."""
    texts, lines_of_id = [], {}
    for number, record in snippets.read_json_lines(path):
        where = f"{path}, line {number}"
        text = record.get("text")
        if not isinstance(text, str) or not text:
            raise ValueError(f"{where}: no text.")
        label = record.get("label")
        if labelled and not isinstance(label, dict):
            raise ValueError(f"{where}: no label (a {{type: {{entity: [[start, end]]}}}} object).")
        spans = set(spans_of(label, text, where)) if labelled else set()
        id_ = None
        if not labelled:
            id_ = snippets.line_id(record, where)
            snippets.first_use(id_, number, lines_of_id, where)
        texts.append(Text(id_, text, spans, number))
    if not texts:
        raise ValueError(f"{path}: no texts in the file.")
    return texts


def spans_of(label, text, where):
    for kind, entities in label.items():
        if not isinstance(entities, dict):
            raise ValueError(f"{where}: label[{kind!r}] is not an {{entity: [[start, end]]}} object.")
        for entity, places in entities.items():
            for place in places if isinstance(places, list) else [places]:
                if not (isinstance(place, list) and len(place) == 2 and all(isinstance(i, int) for i in place)):
                    raise ValueError(f"{where}: {kind} {entity!r}: {place!r} is not a [start, end] pair.")
                start, end = place
                if not 0 <= start <= end < len(text):
                    raise ValueError(f"{where}: {kind} {entity!r} at [{start}, {end}] lies outside the text "
                                     f"({len(text)} characters).")  # fmt: skip
                if text[start : end + 1] != entity:
                    raise ValueError(f"{where}: {kind} {entity!r} at [{start}, {end}] is "
                                     f"{text[start : end + 1]!r} in the text.")  # fmt: skip
                yield kind, start, end


def check_types(train, dev, paths):
    """The entity types, sorted; a type in dev.json that train.json never shows is refused."""
    types = sorted({kind for text in train for kind, _, _ in text.spans})
    if not types:
        raise ValueError(f"{paths[0]}: no entities in the training data.")
    for text in dev:
        unseen = {kind for kind, _, _ in text.spans} - set(types)
        if unseen:
            raise ValueError(f"{paths[1]}, line {text.line}: type {sorted(unseen)[0]!r} never appears in "
                             f"{paths[0]} ({', '.join(types)}); a model cannot learn it.")  # fmt: skip
    return types


def check_no_overlaps(texts, path):
    """--head crf's BIO tags hold one entity a character: a training or dev file with two gold spans sharing a
    character (nested, overlapping, or one span of two types) is refused, naming the line, the two spans and
    the heads that keep both; the CRF would have learnt one and scored the other as missed."""
    for text in texts:
        pair = first_overlap(text.spans)
        if pair:
            first, second = (f"{kind} {text.text[start : end + 1]!r} at [{start}, {end}]" for kind, start, end in pair)
            raise ValueError(f"{path}, line {text.line}: {first} and {second} overlap: --head crf tags each "
                             "character once (BIO), so one of them would be lost; give --head globalpointer or "
                             "--head efficient, which keep nested and overlapping entities.")  # fmt: skip


def first_overlap(spans):
    """The first two of `spans` `(type, first, last)` that share a position, in order of position (the longer
    first), or None."""
    reaching = None  # of the spans so far, the one ending last
    for span in sorted(spans, key=lambda span: (span[1], -span[2], span[0])):
        if reaching is not None and span[1] <= reaching[2]:
            return reaching, span
        if reaching is None or span[2] > reaching[2]:
            reaching = span
    return None


def windows_of(texts, tokens, types, args, at_entities=False):
    """Each text's windows, `[CLS] characters [SEP]`, --maxlen tokens at most (`window_starts`)."""
    room = room_of(args)
    found = []
    for index, text in enumerate(texts):
        ids = tokens.encode(text.text)
        for start in window_starts(len(ids), room, stride_of(args), text.spans if at_entities else ()):
            window_ids = ids[start : start + room]
            label = _window_spans(text.spans, start, len(window_ids), types)
            found.append(Window([tokens.cls, *window_ids, tokens.sep], [0] * (len(window_ids) + 2), label,
                                index, start))  # fmt: skip
    return found


def room_of(args):
    """A window's characters: --maxlen less [CLS] and [SEP]."""
    return args.maxlen - 2


def stride_of(args):
    """--stride, or half a window."""
    return args.stride or max(room_of(args) // 2, 1)


def holds(start, end, first, last):
    """Whether the window of characters `start` to `end` (excluded) holds the span `first` to `last` whole."""
    return start <= first and last < end


def window_starts(length, room, stride, spans=()):
    """Where a text's windows of `room` characters start: every `stride` characters until one reaches the
    text's end, so that every entity of at most `room - stride + 1` characters lies whole in one; and one
    centred on each of `spans` (train.json's gold) that those miss but a window can hold, so that every such
    entity is trained on. Dev and test windows do not look at the gold: they are predicted alike."""
    starts = list(range(0, max(length - room, 0) + stride, stride))
    for _, first, last in sorted(spans, key=lambda span: span[1:]):
        if last - first < room and not any(holds(start, start + room, first, last) for start in starts):
            slack = room - (last - first + 1)
            starts.append(min(max(first - slack // 2, 0), length - room))
    return sorted(starts)


def say_unheld(texts, windows, path, args, scored=False):
    """Print how many of `texts`' gold entities lie whole in no window, and why: longer than a window (never
    predictable), or (dev: the windows ignore the gold) across every window's edge. Nothing if none."""
    room = room_of(args)
    reach = collections.defaultdict(list)
    for window in windows:
        reach[window.text].append((window.start, window.end))
    missed = [last - first + 1 for index, text in enumerate(texts) for _, first, last in text.spans
              if not any(holds(start, end, first, last) for start, end in reach[index])]  # fmt: skip
    if not missed:
        return
    longer = sum(length > room for length in missed)
    reasons = [f"{longer} longer than a window's {room} characters: give a larger --maxlen"] if longer else []
    if len(missed) > longer:
        stride = stride_of(args)
        held = snippets.counted(room - stride + 1, "character")
        reasons.append(f"{len(missed) - longer} across every window's edge: a --stride of {stride} holds whole "
                       f"only entities of up to {held}, give a lower one")  # fmt: skip
    total = sum(len(text.spans) for text in texts)
    effect = "cannot be predicted" if scored else "are not trained on"
    print(f"{path}: {len(missed)} of {total} gold entities lie whole in no window, so {effect} "
          f"({'; '.join(reasons)}){'; dev F1 counts them as missed' if scored else ''}.")  # fmt: skip


def _window_spans(spans, start, length, types):
    """The spans lying wholly inside the window of `length` characters from `start`, as `(type index, first
    token, last token)` (token 0 is [CLS])."""
    return [(types.index(kind), first - start + 1, last - start + 1) for kind, first, last in sorted(spans)
            if holds(start, start + length, first, last)]  # fmt: skip


class SpanBatches(snippets.Batches):
    """Batches whose targets are, for the pointers, a `(types, length, length)` 0/1 matrix a row; for the
    CRF, a BIO tag a token (0 outside, 1 + 2t the first token of type t, 2 + 2t the others)."""

    def __init__(self, windows, batch_size, types, head, shuffle=False, seed=0, maxlen=None):
        super().__init__(windows, batch_size, shuffle, seed, maxlen)
        self.types, self.head = types, head

    def targets(self, chosen, length):
        if self.head == "crf":
            return np.stack([bio_tags(window.label, length) for window in chosen])
        targets = np.zeros((len(chosen), len(self.types), length, length), "float32")
        for row, window in enumerate(chosen):
            for kind, first, last in window.label:
                targets[row, kind, first, last] = 1
        return targets


def bio_tags(spans, length):
    """`length` BIO tags, one a token: 0 outside, 1 + 2t at the first token of a span of type t, 2 + 2t at its
    others. Spans that overlap are refused (`check_no_overlaps` says so of the data, before training): one
    tag a token would keep only one of them."""
    pair = first_overlap(spans)
    if pair:
        raise ValueError(f"spans {pair[0]} and {pair[1]} overlap: BIO tags hold one tag a token.")
    tags = np.zeros(length, "int32")
    for kind, first, last in spans:
        tags[first], tags[first + 1 : last + 1] = 1 + 2 * kind, 2 + 2 * kind
    return tags


def bio_spans(tags):
    """The spans `(type, first, last)` of BIO tags (`bio_tags`' inverse over non-overlapping spans): a
    first-token tag and the same type's other-token tags after it; an other-token tag after no first-token
    tag of its type starts no span."""
    spans = []
    for position, tag in enumerate(tags):
        if tag % 2 == 1:
            last = position
            while last + 1 < len(tags) and tags[last + 1] == tag + 1:
                last += 1
            spans.append(((tag - 1) // 2, position, last))
    return spans


def build_ner_model(args, types):
    """The encoder with the --head on its sequence output, and the loss it trains with."""
    if args.head == "crf":

        def head(token_ids, sequence):
            emissions = keras.layers.Dense(1 + 2 * len(types), dtype="float32", name="Tags")(sequence)
            crf = kwiden.layers.ConditionalRandomField(
                1 + 2 * len(types), lr_multiplier=CRF_LR_MULTIPLIER, dtype="float32", name="CRF"
            )
            return crf(emissions, mask=keras.ops.not_equal(token_ids, 0))

        model = snippets.build_model(args, head, "ner_crf")
        return model, model.get_layer("CRF").loss  # the grown model's CRF, after --grow
    pointer = kwiden.layers.GlobalPointer if args.head == "globalpointer" else kwiden.layers.EfficientGlobalPointer

    def head(token_ids, sequence):
        scorer = pointer(len(types), HEAD_SIZE, dtype="float32", name="Pointer")
        return scorer(sequence, mask=keras.ops.not_equal(token_ids, 0))

    return snippets.build_model(args, head, f"ner_{args.head}"), kwiden.ner.losses.global_pointer_crossentropy


def predicted_spans(model, windows, texts, types, args):
    """Each text's spans, `{(type, start, end)}` a text in `texts`' order, the windows' put together."""
    batches = SpanBatches(windows, args.batch_size, types, args.head, maxlen=args.maxlen)
    found = [set() for _ in texts]
    for index in range(len(batches)):
        ((token_ids, segment_ids),) = batches[index]
        outputs = model.predict_on_batch([token_ids, segment_ids])
        if args.head == "crf":
            outputs = model.get_layer("CRF").decode(outputs)
        outputs = keras.ops.convert_to_numpy(outputs)
        for row, i in enumerate(batches.batches[index]):
            window = windows[i]
            for kind, first, last in _decoded(outputs[row], window.end - window.start, args.head):
                found[window.text].add((types[kind], window.start + first - 1, window.start + last - 1))
    return found


def _decoded(output, count, head):
    """`(type index, first token, last token)` from one row's output: the pointers' spans scored above 0,
    or the CRF's tag runs; over the `count` character tokens only (not [CLS], [SEP] or padding)."""
    if head != "crf":
        kinds, firsts, lasts = np.nonzero(output[:, 1 : count + 1, 1 : count + 1] > 0)
        return [(int(kind), int(first) + 1, int(last) + 1) for kind, first, last in zip(kinds, firsts, lasts)
                if first <= last]  # fmt: skip
    tags = [int(tag) for tag in output[1 : count + 1]]
    return [(kind, first + 1, last + 1) for kind, first, last in bio_spans(tags)]


def entity_scores(predicted, texts):
    """Entity-level `(precision, recall, F1)` over every text (`predicted`: a set of spans a text, in their
    order): a span counts where its text, type, start and end match."""
    guessed = {(index, *span) for index, spans in enumerate(predicted) for span in spans}
    gold = {(index, *span) for index, text in enumerate(texts) for span in text.spans}
    right = len(guessed & gold)
    precision, recall = right / max(len(guessed), 1), right / max(len(gold), 1)
    return precision, recall, 2 * precision * recall / max(precision + recall, 1e-12)


def submission(predicted, texts):
    """CLUE's records: `{"id", "label": {type: {entity: [[start, end]]}}}` a text."""
    records = []
    for text, spans in zip(texts, predicted):
        label = {}
        for kind, start, end in sorted(spans):
            label.setdefault(kind, {}).setdefault(text.text[start : end + 1], []).append([start, end])
        records.append({"id": text.id, "label": label})
    return records


class DevScores(snippets.KeepBest):
    """Dev precision, recall and F1 each epoch, with the epoch's seconds; the best F1's weights kept."""

    def __init__(self, windows, texts, types, args):
        super().__init__(evaluate=lambda model: self.scored(model), measure="entity F1")
        self.windows, self.texts, self.types, self.args, self.seconds = windows, texts, types, args, []

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def scored(self, model):
        self.seconds.append(time.perf_counter() - self.started)
        predicted = predicted_spans(model, self.windows, self.texts, self.types, self.args)
        precision, recall, f1 = entity_scores(predicted, self.texts)
        print(f"dev: precision {precision:.4f}, recall {recall:.4f}, F1 {f1:.4f} ({self.seconds[-1]:.1f} s training)")
        return f1


def main(argv=None):
    """Fine-tune on train.json, keep the best dev epoch (entity F1), predict test.json."""
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    kwiden_tokenizer = snippets.tokenizer_of(args)  # checks the vocabulary, names it in errors
    tokens = snippets.CharacterTokens(kwiden_tokenizer)
    data_dir = pathlib.Path(args.data_dir)
    paths = [data_dir / f"{name}.json" for name in ("train", "dev", "test")]
    train, dev, test = read_texts(paths[0], True), read_texts(paths[1], True), read_texts(paths[2], False)
    types = check_types(train, dev, paths)
    if args.head == "crf":
        for texts, path in zip((train, dev), paths):
            check_no_overlaps(texts, path)
    train_windows = windows_of(train, tokens, types, args, at_entities=True)
    dev_windows = [dataclasses.replace(w, label=None) for w in windows_of(dev, tokens, types, args)]
    say_unheld(train, train_windows, paths[0], args)
    say_unheld(dev, dev_windows, paths[1], args, scored=True)
    batches = SpanBatches(train_windows, args.batch_size, types, args.head, shuffle=True, seed=args.seed,
                          maxlen=args.maxlen)  # fmt: skip
    schedule = snippets.schedule_of(args, batches)
    model, loss = build_ner_model(args, types)
    snippets.check_model(model, kwiden_tokenizer, args)
    model.compile(snippets.optimizer(args, model, schedule), loss)
    scores = DevScores(dev_windows, dev, types, args)
    snippets.fit(model, batches, args, [scores])
    test_windows = [dataclasses.replace(w, label=None) for w in windows_of(test, tokens, types, args)]
    predicted = predicted_spans(model, test_windows, test, types, args)
    path = snippets.write_json(pathlib.Path(args.output_dir) / PREDICTIONS, submission(predicted, test), lines=True)
    print(f"cluener ({args.head}): best dev F1 {scores.best_accuracy:.4f}; predictions in {path}")
    return {"dev_f1": scores.best_accuracy, "seconds_per_epoch": scores.seconds, "predictions": path}


if __name__ == "__main__":
    snippets.command(main)
