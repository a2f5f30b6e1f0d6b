"""The one ranking tie rule, used by every stage that orders documents (retrieval, fusion, run files).

Rankings follow trec_eval: score descending, then document id descending (compared as strings).
``harness.evaluation.trec`` re-exports these for run files; retrieval-stage code (fusion, re-ranking)
imports them from here, below both.
"""

from __future__ import annotations

import numpy as np

Run = dict[str, dict[str, float]]


def _ranking_key(item: tuple[str, float]) -> tuple[float, str]:
    return (item[1], item[0])


def sorted_ranking(docs: dict[str, float]) -> list[tuple[str, float]]:
    """``(docid, score)`` pairs in trec_eval order: score descending, then docid descending."""
    return sorted(docs.items(), key=_ranking_key, reverse=True)


def top_k_ranking(docs: dict[str, float], k: int) -> list[tuple[str, float]]:
    """The first ``k`` entries of :func:`sorted_ranking`, without sorting the whole ranking.

    numpy finds the k-th largest score; only documents scoring at least that much (k plus
    any ties at the boundary) are sorted by the tie rule.
    """
    if k >= len(docs):
        return sorted_ranking(docs)
    if k <= 0:
        return []
    scores = np.fromiter(docs.values(), dtype=np.float64, count=len(docs))
    threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
    docids = list(docs)
    candidates = [(docids[i], docs[docids[i]]) for i in np.flatnonzero(scores >= threshold).tolist()]
    return sorted(candidates, key=_ranking_key, reverse=True)[:k]


def ranking_order(docids: list[str], scores: np.ndarray) -> np.ndarray:
    """Indices of the documents in trec_eval order (score descending, then docid descending), one
    float64 sort; numpy compares strings by code point, which is strcmp's order on UTF-8."""
    if not docids:
        return np.zeros(0, dtype=np.int64)
    return np.lexsort((np.array(docids), scores))[::-1]
