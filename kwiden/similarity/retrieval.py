"""Retrieval of a partner among rivals by cosine: the one rule every retrieval figure in kwiden is
counted by (`kwiden eval-sts`, SimBERT's `retrieval_accuracy`). A tie with the partner counts
against it: a vector that cannot tell two texts apart has not found the partner."""

import numpy as np


def unit_cosines(vectors):
    """The cosines of the rows of `vectors`, a row a row, in float64."""
    vectors = np.asarray(vectors, np.float64)
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors @ vectors.T


def partner_ranks(cosines, queries, partners, excluded=None):
    """Each query's partner's rank (1 is first) among the query's row of `cosines`, itself and the
    columns `excluded` marks left out; a rival as similar as the partner ranks ahead of it."""
    cosines = np.array(cosines, np.float64)
    np.fill_diagonal(cosines, -np.inf)
    if excluded is not None:
        cosines[np.asarray(excluded) > 0] = -np.inf
    rows = cosines[queries]
    partner = rows[np.arange(len(queries)), partners]
    return np.sum(rows >= partner[:, None], axis=1)


def retrieval_accuracy(vectors, repeats=None):
    """The share of rows whose most similar other row, by the cosine of `vectors`, is their partner
    (rows 2i and 2i + 1 are partners); the columns `repeats` marks (the row's own sentence again, of
    another record) are no rivals."""
    rows = np.arange(len(vectors))
    return float(np.mean(partner_ranks(unit_cosines(vectors), rows, rows ^ 1, repeats) == 1))
