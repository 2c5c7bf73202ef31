"""OCNLI (Original Chinese NLI): entailment, contradiction or neutral, on
pairs written in Chinese. Labels from train.json; lines labelled "-" (no
majority among annotators) are left out of train and dev.

    python examples/clue/ocnli.py --data-dir CLUE/ocnli_public \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `ocnli_50k_predict.json` under --output-dir.
"""

import snippets


def texts(record):
    return record["sentence1"], record["sentence2"]


TASK = snippets.Task("ocnli", "ocnli_50k_predict.json", texts, skipped_labels=("-",))


def main(argv=None):
    return snippets.run(TASK, argv)


if __name__ == "__main__":
    snippets.command(main)
