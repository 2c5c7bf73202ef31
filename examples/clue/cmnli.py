"""CMNLI (MNLI and XNLI in Chinese): does the first sentence entail,
contradict or say nothing of the second? Pairs; labels from train.json.
Lines labelled "-" (annotators disagreed) are left out of train and dev.

    python examples/clue/cmnli.py --data-dir CLUE/cmnli_public \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `cmnli_predict.json` under --output-dir.
"""

import snippets


def texts(record):
    return record["sentence1"], record["sentence2"]


TASK = snippets.Task("cmnli", "cmnli_predict.json", texts, skipped_labels=("-",))


def main(argv=None):
    return snippets.run(TASK, argv)


if __name__ == "__main__":
    snippets.command(main)
