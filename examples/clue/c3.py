"""C3 (multiple-choice reading comprehension): which choice answers the
question about a dialogue or text? Each file is a JSON list of
`[[context sentences], [{"question", "choice", "answer", "id"}, ...], id]`;
test.json has no `answer`. The number of choices comes from the data.

Each (question, choice) is the first segment, the context (truncated) the
second; the encoder's first token is scored by a Dense(1), a softmax over
the question's choices.

    python examples/clue/c3.py --data-dir CLUE/c3_public --maxlen 512 \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `c311_predict.json` under --output-dir: one `{"id": question id,
"label": the chosen index}` line per test question, in the file's order.
"""

import pathlib

import snippets

PREDICTIONS = "c311_predict.json"


def questions(path, labelled, tokenizer, maxlen, seen):
    """The questions of one file, as `snippets.Choices`."""
    items = snippets.read_json(path)
    if not isinstance(items, list):
        raise ValueError(f"{path}: a JSON list of [context, questions, id] items was expected.")
    examples = []
    for number, item in enumerate(items, 1):
        where = f"{path}, item {number}"
        if not (isinstance(item, list) and len(item) >= 2 and isinstance(item[0], list) and isinstance(item[1], list)):
            raise ValueError(f"{where}: [[context sentences], [questions], id] was expected.")
        context = "\n".join(map(str, item[0]))
        for question in item[1]:
            examples.append(choices_of(question, context, labelled, tokenizer, maxlen, where, seen))
    if not examples:
        raise ValueError(f"{path}: no questions in the file.")
    return examples


def choices_of(question, context, labelled, tokenizer, maxlen, where, seen):
    fields = ("question", "choice", "id") + (("answer",) if labelled else ())
    for field in fields:
        if not isinstance(question, dict) or field not in question:
            raise ValueError(f"{where}: a question without the field {field!r}.")
    id_, choice = snippets.checked_id(question["id"], f"{where}: the 'id'"), question["choice"]
    if not choice or not all(isinstance(c, str) for c in choice):
        raise ValueError(f"{where}, question {id_!r}: 'choice' should be a non-empty list of strings.")
    if id_ in seen:
        raise ValueError(f"{where}: question id {id_!r} already appeared ({seen[id_]}).")
    seen[id_] = where
    label = None
    if labelled:
        if question["answer"] not in choice:
            raise ValueError(f"{where}, question {id_!r}: the answer {question['answer']!r} is not among the choices.")
        label = choice.index(question["answer"])
    rows = [tokenizer.encode(question["question"] + " " + c, context, maxlen=maxlen) for c in choice]
    return snippets.Choices(rows, label, id_, where)


def read(args, tokenizer):
    data_dir = pathlib.Path(args.data_dir)
    return tuple(
        questions(data_dir / f"{name}.json", name != "test", tokenizer, args.maxlen, {})
        for name in ("train", "dev", "test")
    )


def main(argv=None):
    result = snippets.run_multiple_choice("c3", read, argv, PREDICTIONS)
    records = [{"id": example.id, "label": int(index)} for example, index in zip(result["test"], result["chosen"])]
    path = snippets.write_json(pathlib.Path(result["args"].output_dir) / PREDICTIONS, records, lines=True)
    print(f"c3: predictions in {path}")
    return {"dev_accuracy": result["dev_accuracy"], "predictions": path}


if __name__ == "__main__":
    snippets.command(main)
