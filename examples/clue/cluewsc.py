"""CLUEWSC2020 (Winograd schema): does the pronoun (span 2) refer to the
noun (span 1)? One text with both spans marked in it: the noun in [ ], the
pronoun in < >. Labels from train.json ("true", "false"). Lines carry their
id as `idx` (or `id`).

    python examples/clue/cluewsc.py --data-dir CLUE/cluewsc2020_public \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `cluewsc11_predict.json` (CLUE 1.1's name for CLUEWSC2020) under --output-dir.
"""

import snippets

MARKS = {"span1": ("[", "]"), "span2": ("<", ">")}


def texts(record):
    """The text with each span wrapped in its marks, the later span first so
    that the earlier one's index still holds."""
    text, target = record["text"], record["target"]
    spans = sorted(((target[f"{span}_index"], target[f"{span}_text"], MARKS[span]) for span in MARKS), reverse=True)
    for index, span_text, (left, right) in spans:
        if not isinstance(index, int) or not 0 <= index <= len(text) - len(span_text):
            raise ValueError(f"span index {index!r} does not fall inside the text ({len(text)} characters).")
        end = index + len(span_text)
        text = text[:index] + left + text[index:end] + right + text[end:]
    return text


TASK = snippets.Task("cluewsc", "cluewsc11_predict.json", texts)


def main(argv=None):
    return snippets.run(TASK, argv)


if __name__ == "__main__":
    snippets.command(main)
