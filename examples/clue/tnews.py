"""TNEWS (Toutiao news titles): the topic of a headline. One text; the
labels are labels.json's codes ("100" … "116"), predicted as those codes.

    python examples/clue/tnews.py --data-dir CLUE/tnews_public \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `tnews11_predict.json` (CLUE 1.1's name) under --output-dir.
"""

import snippets


def texts(record):
    return record["sentence"]


TASK = snippets.Task("tnews", "tnews11_predict.json", texts, labels_file=True)


def main(argv=None):
    return snippets.run(TASK, argv)


if __name__ == "__main__":
    snippets.command(main)
