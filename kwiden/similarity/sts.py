"""Evaluating sentence vectors: Spearman's correlation with human scores
(STS files), and retrieval of each text's partner among all the others
(pair files). `kwiden eval-sts CHECKPOINT FILE` runs them, with the
`kwiden.SentenceEncoder` options `StsOptions` declares."""

import dataclasses
import pathlib

import numpy as np

from kwiden.arguments import option
from kwiden.files import read_text
from kwiden.similarity.retrieval import partner_ranks

# Cosines closer than this differ by float32 rounding alone: ranked, they would order the pairs at random.
SAME_COSINE = 1e-6


@dataclasses.dataclass(frozen=True)
class StsOptions:
    """What `kwiden eval-sts` gives `kwiden.SentenceEncoder`, with its defaults."""

    pooling: str = option(None, "default: a sentence-transformers folder's 1_Pooling; else pooler (SimBERT's: the "
                          "pooler Dense on [CLS], no tanh) where the checkpoint has one; else cls", "choice",
                          choices=("cls", "pooler", "mean"))  # fmt: skip
    batch_size: int = option(32, "texts a forward pass", "count", 1)


@dataclasses.dataclass(frozen=True)
class Pairs:
    """The rows of a tab-separated file: `(text1, text2)` pairs, with their scores where it has them."""

    path: str
    pairs: list
    scores: list = None


def read_pairs(path):
    """`Pairs` from `text1 \\t text2 \\t score` lines (an STS file) or `text1 \\t text2` lines (a pair file);
    blank lines skipped, anything else refused naming the line."""
    path = pathlib.Path(path)
    pairs, scores, numbers, columns = [], [], [], None
    for number, line in enumerate(read_text(path, "The pairs file", "a tab-separated text file").splitlines(), 1):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) not in (2, 3) or not all(cell.strip() for cell in cells):
            raise ValueError(f"{path}, line {number}: want text1<TAB>text2, or text1<TAB>text2<TAB>score; got "
                             f"{len(cells)} column(s){' with an empty one' if len(cells) in (2, 3) else ''}.")  # fmt: skip
        if columns is not None and len(cells) != columns:
            raise ValueError(f"{path}, line {number}: {len(cells)} columns where the lines before have {columns}.")
        columns = len(cells)
        if columns == 3:
            scores.append(_score(cells[2], path, number))
        pairs.append((cells[0].strip(), cells[1].strip()))
        numbers.append(number)
    if len(pairs) < 2:
        raise ValueError(f"{path} holds {len(pairs)} pair(s); an evaluation needs at least 2.")
    if columns == 3 and len(set(scores)) == 1:
        raise ValueError(f"{path}: every score is {scores[0]:g}; Spearman's correlation with scores that do not vary "
                         "is undefined. Give pairs scored apart, or drop the scores for retrieval.")  # fmt: skip
    if columns == 2:
        _refuse_pairs_of_one_text(path, pairs, numbers)
    return Pairs(str(path), pairs, scores if columns == 3 else None)


def _refuse_pairs_of_one_text(path, pairs, numbers):
    """A retrieval pair of one text twice has no partner to find: the text itself is not a candidate."""
    same = [number for number, (a, b) in zip(numbers, pairs) if a == b]
    if same:
        raise ValueError(f"{path}, line {same[0]}: its two texts are the same; retrieval finds each text's partner "
                         "among the other texts. Remove the line, or give it a partner of other words.")  # fmt: skip


def _score(text, path, number):
    try:
        score = float(text)
    except ValueError:
        score = None
    if score is None or not np.isfinite(score):
        raise ValueError(f"{path}, line {number}: the score {text.strip()!r} is not a finite number.")
    return score


def spearman(encoder, pairs, scores):
    """Spearman's rank correlation of the pairs' cosines with `scores`."""
    from scipy.stats import spearmanr

    first, second = encoder.encode([a for a, _ in pairs]), encoder.encode([b for _, b in pairs])
    cosines = np.sum(first * second, axis=1)
    if not np.isfinite(cosines).all():
        raise ValueError("The encoder gave a cosine that is not a number: its vectors are not finite.")
    if np.ptp(cosines) < SAME_COSINE:
        raise ValueError(f"Every pair's cosine is {cosines[0]:.6g}: the encoder gives these texts one vector, and "
                         "Spearman's correlation with cosines that do not vary is undefined.")  # fmt: skip
    return float(spearmanr(cosines, scores).statistic)


def retrieval(encoder, pairs):
    """`(top-1 accuracy, mean reciprocal rank)` of each side of each pair, as a query, finding its partner among
    the pairs' other texts. Texts the encoder reads as one (the same text, or the same but for case or spacing
    where its tokenizer does not tell them apart) are one candidate, never their own rival: a sentence that is two
    pairs' partner, as adjacent sentences pair, is ranked once. A tie with the partner counts against it. Refused:
    a pair whose two sides are read as one, and fewer than 3 texts (a partner with no rival)."""
    keys = [[_as_read(encoder, text) for text in pair] for pair in pairs]
    for index, (a, b) in enumerate(keys):
        if a == b:
            raise ValueError(f"Pair {index}'s texts {pairs[index][0]!r} and {pairs[index][1]!r} are read as one text "
                             "by the encoder: retrieval finds a text's partner among the others. Give it a partner "
                             "of other words.")  # fmt: skip
    texts = {}  # each text as read, once, in order
    for pair, key_pair in zip(pairs, keys):
        for text, key in zip(pair, key_pair):
            texts.setdefault(key, text)
    if len(texts) < 3:
        raise ValueError(f"The pairs hold {len(texts)} distinct texts: a partner needs a rival for its rank to mean "
                         "anything; give more pairs.")  # fmt: skip
    index = {key: i for i, key in enumerate(texts)}
    vectors = encoder.encode(list(texts.values())).astype("float64")
    cosines = vectors @ vectors.T
    if not np.isfinite(cosines).all():
        raise ValueError("The encoder gave a cosine that is not a number: its vectors are not finite.")
    queries = np.array([index[a] for a, _ in keys] + [index[b] for _, b in keys])
    partners = np.array([index[b] for _, b in keys] + [index[a] for a, _ in keys])
    ranks = partner_ranks(cosines, queries, partners)
    return float(np.mean(ranks == 1)), float(np.mean(1.0 / ranks))


def _as_read(encoder, text):
    """`text` as the encoder reads it: its token ids where it has a tokenizer, else the text."""
    tokenizer = getattr(encoder, "tokenizer", None)
    return text if tokenizer is None else tuple(tokenizer.encode(text)[0])
