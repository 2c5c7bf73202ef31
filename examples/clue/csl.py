"""CSL (Chinese Scientific Literature): are the keywords really the
abstract's? A pair: the keywords joined, then the abstract. Labels from
train.json ("0", "1").

    python examples/clue/csl.py --data-dir CLUE/csl_public \
        --checkpoint chinese_L-12_H-768_A-12 --vocab chinese_L-12_H-768_A-12/vocab.txt

Writes `csl_predict.json` under --output-dir.
"""

import snippets

# The Chinese semicolon: keywords are listed that way in Chinese papers.
KEYWORD_SEPARATOR = "；"


def texts(record):
    keywords = record["keyword"]
    if not isinstance(keywords, list):
        raise ValueError(f"'keyword' is a list of keywords, not {type(keywords).__name__} {keywords!r}.")
    return KEYWORD_SEPARATOR.join(map(str, keywords)), record["abst"]


TASK = snippets.Task("csl", "csl_predict.json", texts)


def main(argv=None):
    return snippets.run(TASK, argv)


if __name__ == "__main__":
    snippets.command(main)
