"""Evaluating sentence vectors: Spearman's correlation with human scores
(STS files), and retrieval of each text's partner among all the others
(pair files). `kwiden eval-sts CHECKPOINT FILE` runs them."""

import dataclasses
import pathlib

import numpy as np

from kwiden.files import read_text


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
    pairs, scores, columns = [], [], None
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
    if len(pairs) < 2:
        raise ValueError(f"{path} holds {len(pairs)} pair(s); an evaluation needs at least 2.")
    return Pairs(str(path), pairs, scores if columns == 3 else None)


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
    return float(spearmanr(cosines, scores).statistic)


def retrieval(encoder, pairs):
    """`(top-1 accuracy, mean reciprocal rank)` of each text's partner among all the other texts of the pairs
    (a tie with the partner counts against it)."""
    texts = [a for a, _ in pairs] + [b for _, b in pairs]
    vectors = encoder.encode(texts).astype("float64")
    cosines = vectors @ vectors.T
    np.fill_diagonal(cosines, -np.inf)
    count = len(pairs)
    partner = np.concatenate([np.arange(count, 2 * count), np.arange(count)])
    partner_cosine = cosines[np.arange(2 * count), partner]
    others = np.delete(cosines.reshape(-1), np.arange(2 * count) * (2 * count) + partner).reshape(2 * count, -1)
    ranks = 1 + np.sum(others >= partner_cosine[:, None], axis=1)
    return float(np.mean(ranks == 1)), float(np.mean(1.0 / ranks))
