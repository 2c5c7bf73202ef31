"""CMRC2018 (span-extraction reading comprehension): where in the context
is the answer? SQuAD-like JSON files: `{"data": [{"paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}`;
test.json's questions need no answers.

The context is tokenized one character at a time (Chinese BERTs' own
tokenization), every character a token, a space too (`[unused1]`, else
`[UNK]`: `snippets.CharacterTokens`), a character outside the vocabulary
[UNK]; token i is character i, so an answer's indices map one to one. `[CLS] question
[SEP] window [SEP]`, one window every --stride characters over long
contexts; start and end logits from a Dense(2) on the sequence output. A
window without the answer points at [CLS]. A question's answer is the best
span (start logit + end logit, at most --max-answer characters) over its
windows.

    python examples/clue/cmrc2018.py --data-dir CLUE/cmrc2018_public --maxlen 512 \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `cmrc2018_predict.json` under --output-dir: one JSON object,
`{question id: answer text}`. The dev score printed is exact match.
"""

import dataclasses
import pathlib

import keras
import numpy as np
import snippets
from keras import ops

TOP_K = 20  # starts and ends tried per window
PREDICTIONS = "cmrc2018_predict.json"
# Below 1 these would be taken as 1 (--stride, --max-question) or find no answer (--max-answer).
LEAST = {"stride": (1, ""), "max_question": (1, ""), "max_answer": (1, "")}


@dataclasses.dataclass
class Window:
    token_ids: list
    segment_ids: list
    label: object  # (start, end) token positions; None to predict
    id: str  # the question's
    offset: int  # the first context token's position
    characters: list  # each context token's character index in the context


def parse_args(argv=None):
    parser = snippets.argument_parser("Fine-tune a span extractor on CLUE's CMRC2018.")
    parser.add_argument("--stride", type=int, default=128, help="characters between windows' starts")
    parser.add_argument("--max-question", type=int, default=64, help="question tokens kept")
    parser.add_argument("--max-answer", type=int, default=64, help="the longest answer, in characters")
    return snippets.check_args(parser, argv, least=LEAST, predictions=PREDICTIONS)


def field(record, name, where):
    if not isinstance(record, dict) or name not in record:
        raise ValueError(f"{where}: no field {name!r}.")
    return record[name]


def questions(path):
    """`(where, context, qa)` for each question of a SQuAD-like file."""
    document = snippets.read_json(path)
    for a, article in enumerate(field(document, "data", str(path))):
        for p, paragraph in enumerate(field(article, "paragraphs", f"{path}, data[{a}]")):
            where = f"{path}, data[{a}].paragraphs[{p}]"
            context = field(paragraph, "context", where)
            if not isinstance(context, str):
                raise ValueError(f"{where}: the context is not a string.")
            for q, qa in enumerate(field(paragraph, "qas", where)):
                yield f"{where}.qas[{q}]", context, qa


def answer_span(context, answers, where):
    """The first answer's `(first, last)` character indices, or None where it
    is not in the context (at `answer_start`, or anywhere)."""
    if not answers:
        raise ValueError(f"{where}: no answers.")
    text = field(answers[0], "text", where)
    start = answers[0].get("answer_start", -1)
    if not (isinstance(start, int) and context[start : start + len(text)] == text):
        start = context.find(text)
    return None if start < 0 or not text else (start, start + len(text) - 1)


def windows(context_ids, characters, question_ids, args):
    """`(window's token ids, their character indices)` every --stride characters."""
    room = max(args.maxlen - len(question_ids) - 3, 1)
    step = max(min(args.stride, room), 1)
    start = 0
    while True:
        yield context_ids[start : start + room], characters[start : start + room]
        if start + room >= len(context_ids):
            return
        start += step


def read_file(path, labelled, tokens, args):
    """The windows of a file, and each question's context and answers."""
    examples, contexts, answers, seen, unanswerable, split = [], {}, {}, {}, 0, 0
    for where, context, qa in questions(path):
        id_ = snippets.checked_id(field(qa, "id", where), f"{where}: the 'id'")
        question = field(qa, "question", where)
        if id_ in seen:
            raise ValueError(f"{where}: question id {id_!r} already appeared ({seen[id_]}).")
        seen[id_] = where
        span = None
        if labelled:
            gold = field(qa, "answers", where)
            answers[id_] = [field(answer, "text", where) for answer in gold]
            span = answer_span(context, gold, where)
            if span is None:
                unanswerable += 1
                continue
        contexts[id_] = context
        # Cut to fit: [CLS] question [SEP] at least one context character [SEP].
        question_ids = tokens.encode(str(question))[: max(1, min(args.max_question, args.maxlen - 4))]
        context_ids, characters = tokens.encode(context), list(range(len(context)))  # a token a character
        for window_ids, window_characters in windows(context_ids, characters, question_ids, args):
            token_ids = [tokens.cls, *question_ids, tokens.sep, *window_ids, tokens.sep]
            segment_ids = [0] * (len(question_ids) + 2) + [1] * (len(window_ids) + 1)
            offset = len(question_ids) + 2
            label = None
            if labelled:
                label = (0, 0)
                if window_characters and window_characters[0] <= span[0] and span[1] <= window_characters[-1]:
                    first = next(i for i, c in enumerate(window_characters) if c >= span[0])
                    last = max(i for i, c in enumerate(window_characters) if c <= span[1])
                    label = (offset + first, offset + last)
            examples.append(Window(token_ids, segment_ids, label, id_, offset, window_characters))
        if labelled and all(window.label == (0, 0) for window in examples if window.id == id_):
            split += 1  # the answer crosses every window's edge (a --stride as long as the window)
    if split:
        print(f"{path}: {split} answers lie in no single window (lower --stride), trained as no answer")
    if unanswerable:
        print(f"{path}: {unanswerable} answers not found in their context, left out")
    if not examples:
        raise ValueError(f"{path}: no usable questions in the file.")
    return examples, contexts, answers


def span_loss(targets, logits):
    """The mean of the start's and the end's cross-entropy over positions."""
    targets = ops.cast(targets, "int32")
    logits = ops.cast(logits, "float32")
    start = keras.losses.sparse_categorical_crossentropy(targets[:, 0], logits[:, :, 0], from_logits=True)
    end = keras.losses.sparse_categorical_crossentropy(targets[:, 1], logits[:, :, 1], from_logits=True)
    return (start + end) / 2


def build_span_model(args):
    def head(token_ids, sequence):
        return keras.layers.Dense(2, dtype="float32", name="Span")(sequence)

    return snippets.build_model(args, head, "span_extractor")


def best_spans(model, windows, contexts, args):
    """Each question's best answer text over its windows."""
    batches = snippets.Batches(windows, args.batch_size, maxlen=args.maxlen)
    best = {}  # question id -> (score, text)
    for index in range(len(batches)):
        (inputs,) = batches[index]
        logits = np.asarray(model.predict_on_batch(inputs), "float32")
        for row, i in enumerate(batches.batches[index]):
            window = windows[i]
            n = len(window.characters)
            starts = logits[row, window.offset : window.offset + n, 0]
            ends = logits[row, window.offset : window.offset + n, 1]
            for s in np.argsort(-starts)[:TOP_K]:
                for e in np.argsort(-ends)[:TOP_K]:
                    first, last = window.characters[s], window.characters[e]
                    if s <= e and last - first < args.max_answer:
                        score = starts[s] + ends[e]
                        if window.id not in best or score > best[window.id][0]:
                            best[window.id] = (score, contexts[window.id][first : last + 1])
    return {id_: best.get(id_, (0, ""))[1] for id_ in contexts}


def exact_match(predicted, answers):
    """Over every question with answers: one whose answer was not found in its
    context (so not predicted) counts as a miss."""
    return float(
        np.mean([predicted.get(id_, "").strip() in [a.strip() for a in gold] for id_, gold in answers.items()])
    )


def main(argv=None):
    """Fine-tune on train.json, keep the best dev epoch (exact match), predict test.json."""
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    kwiden_tokenizer = snippets.tokenizer_of(args)  # checks the vocabulary, names it in errors
    tokens = snippets.CharacterTokens(kwiden_tokenizer)
    data_dir = pathlib.Path(args.data_dir)
    train, _, _ = read_file(data_dir / "train.json", True, tokens, args)
    dev, dev_contexts, dev_answers = read_file(data_dir / "dev.json", True, tokens, args)
    test, test_contexts, _ = read_file(data_dir / "test.json", False, tokens, args)
    dev_inputs = [dataclasses.replace(window, label=None) for window in dev]
    batches = snippets.Batches(train, args.batch_size, shuffle=True, seed=args.seed, maxlen=args.maxlen)
    schedule = snippets.schedule_of(args, batches)
    model = build_span_model(args)
    snippets.check_model(model, kwiden_tokenizer, args)
    model.compile(snippets.optimizer(args, model, schedule), span_loss)
    keep_best = snippets.KeepBest(
        evaluate=lambda model: exact_match(best_spans(model, dev_inputs, dev_contexts, args), dev_answers)
    )
    snippets.fit(model, batches, args, [keep_best])
    predicted = best_spans(model, test, test_contexts, args)
    path = snippets.write_json(pathlib.Path(args.output_dir) / PREDICTIONS, predicted)
    print(f"cmrc2018: best dev exact match {keep_best.best_accuracy:.4f}; predictions in {path}")
    return {"dev_accuracy": keep_best.best_accuracy, "predictions": path}


if __name__ == "__main__":
    snippets.command(main)
