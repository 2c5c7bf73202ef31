"""IFLYTEK: the category of an app from its description. One (long) text;
the labels are labels.json's ("0" … "118").

    python examples/clue/iflytek.py --data-dir CLUE/iflytek_public \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `iflytek_predict.json` under --output-dir.
"""

import snippets


def texts(record):
    return record["sentence"]


TASK = snippets.Task("iflytek", "iflytek_predict.json", texts, labels_file=True)


def main(argv=None):
    return snippets.run(TASK, argv)


if __name__ == "__main__":
    snippets.command(main)
