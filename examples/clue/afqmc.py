"""AFQMC (Ant Financial Question Matching): do two questions ask the same?
Sentence pairs; labels "0" and "1", taken from train.json.

    python examples/clue/afqmc.py --data-dir CLUE/afqmc_public \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `afqmc_predict.json` under --output-dir.
"""

import snippets


def texts(record):
    return record["sentence1"], record["sentence2"]


TASK = snippets.Task("afqmc", "afqmc_predict.json", texts)


def main(argv=None):
    return snippets.run(TASK, argv)


if __name__ == "__main__":
    snippets.command(main)
