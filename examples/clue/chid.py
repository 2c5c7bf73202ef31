"""CHID (idiom cloze): which of a line's candidate idioms fills each blank?
Each line of train/dev/test.json holds `candidates` (the idioms) and
`content` (paragraphs with blanks marked `#idiom000001#`); the answers, a
candidate's index per blank, are in train_answer.json and dev_answer.json.

Each blank is a multiple-choice question: for each candidate, the text
around the blank with the candidate put in (other blanks shown as "_"),
scored by the encoder's first token through a Dense(1); a softmax over the
candidates. Their number comes from the data.

    python examples/clue/chid.py --data-dir CLUE/chid_public \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `chid11_predict.json` under --output-dir: one JSON object mapping
every blank of test.json to its chosen candidate's index,
`{"#idiom000001#": 3, ...}`, as bert4keras' CLUE baseline writes it (the
format assumed for CLUE 1.1's submission; not checked against the site).
"""

import pathlib
import re

import snippets

PREDICTIONS = "chid11_predict.json"

BLANK = re.compile(r"#idiom\d+#")
OTHER_BLANK = "_"


def windows(paragraph, candidates, maxlen):
    """`(blank, [text with each candidate in the blank])` for each blank of a
    paragraph; the text keeps as much on each side as `maxlen` allows."""
    for match in BLANK.finditer(paragraph):
        left = BLANK.sub(OTHER_BLANK, paragraph[: match.start()])
        right = BLANK.sub(OTHER_BLANK, paragraph[match.end() :])
        room = max(maxlen - 2 - max(map(len, candidates)), 2)
        keep_left = max(room // 2, room - len(right))
        left = left[-keep_left:] if keep_left else ""
        right = right[: room - len(left)]
        yield match.group(), [left + candidate + right for candidate in candidates]


def read_file(path, answers, tokenizer, maxlen, seen):
    """The blanks of one file, as `snippets.Choices`; `answers` None for test.json."""
    examples = []
    for number, record in snippets.read_json_lines(path):
        where = f"{path}, line {number}"
        for field in ("candidates", "content"):
            if field not in record:
                raise ValueError(f"{where}: no field {field!r} (the line has {', '.join(map(repr, record))}).")
        candidates, content = record["candidates"], record["content"]
        if not candidates or not all(isinstance(c, str) for c in candidates):
            raise ValueError(f"{where}: 'candidates' should be a non-empty list of strings.")
        if not isinstance(content, list) or not all(isinstance(p, str) for p in content):
            raise ValueError(f"{where}: 'content' should be a list of strings.")
        for paragraph in content:
            for blank, texts in windows(paragraph, candidates, maxlen):
                if blank in seen:
                    raise ValueError(f"{where}: blank {blank} already appeared ({seen[blank]}).")
                seen[blank] = where
                label = None if answers is None else answer_of(blank, answers, len(candidates), where)
                rows = [tokenizer.encode(text, maxlen=maxlen) for text in texts]
                examples.append(snippets.Choices(rows, label, blank, where))
    if not examples:
        raise ValueError(f"{path}: no blanks in the file.")
    return examples


def answer_of(blank, answers, count, where):
    path, answers = answers
    if blank not in answers:
        raise ValueError(f"{where}: blank {blank} has no answer in {path}.")
    answer = answers[blank]
    if not isinstance(answer, int) or not 0 <= answer < count:
        raise ValueError(f"{path}: the answer to {blank} is {answer!r}, not a candidate's index (0 to {count - 1}).")
    return answer


def read_answers(path):
    answers = snippets.read_json(path)
    if not isinstance(answers, dict):
        raise ValueError(f"{path}: a JSON object mapping blanks to indices was expected.")
    return path, answers


def read(args, tokenizer):
    data_dir = pathlib.Path(args.data_dir)
    train_answers = read_answers(data_dir / "train_answer.json")
    dev_answers = read_answers(data_dir / "dev_answer.json")
    train = read_file(data_dir / "train.json", train_answers, tokenizer, args.maxlen, {})
    dev = read_file(data_dir / "dev.json", dev_answers, tokenizer, args.maxlen, {})
    test = read_file(data_dir / "test.json", None, tokenizer, args.maxlen, {})
    return train, dev, test


def main(argv=None):
    result = snippets.run_multiple_choice("chid", read, argv, PREDICTIONS)
    chosen = {example.id: int(index) for example, index in zip(result["test"], result["chosen"])}
    path = snippets.write_json(pathlib.Path(result["args"].output_dir) / PREDICTIONS, chosen)
    print(f"chid: predictions in {path}")
    return {"dev_accuracy": result["dev_accuracy"], "predictions": path}


if __name__ == "__main__":
    snippets.command(main)
