"""Tie diagnostics: how much a metric could move over the orders of documents with equal scores.

trec_eval breaks a tie by document id (descending), a rule with no meaning; other tools break it
otherwise and report other numbers (beir #105, ir_measures #18). For each query the documents of a
tied group may come in any order. Every metric the harness reports rises when a document of higher
grade swaps ahead of an adjacent tied document of lower grade (nDCG by the rearrangement inequality;
P, recall, R_cap, success, AP, MAP@k, MRR, R-precision and bpref because a relevant document moves up
and no other moves across it). So the two extreme orders are known without enumeration: within each
tied group, highest grades first gives the highest value, lowest grades first the lowest. Both are
evaluated by the one metric engine on a re-scored copy of the run, so the bounds share its semantics.

The bounds are over orders of the documents in the run. A whole-ranking metric (no cut-off) on a run
truncated inside a tied group could also see tied documents the retriever left out; the report says
so per metric.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from harness.datasets.qrels import Qrels
from harness.evaluation.trec import Run, ranking_order

PerQuery = dict[str, dict[str, float]]
SIDES = ("lowest", "highest")
# How many query ids a cut-off's straddling list keeps (the count is always complete).
MAX_LISTED_QUERIES = 20
_EXACT = "exact: tied documents ordered by grade, lowest / highest first (monotone under such swaps)"
_EXACT_RETRIEVED = _EXACT + "; over the retrieved documents only (a tie at the run's last rank may hide more)"
# Families whose value is monotone under a higher-grade-ahead swap of adjacent documents (see above).
MONOTONE_FAMILIES = frozenset(
    {"ndcg", "recall", "p", "map", "mrr", "rprec", "bpref", "gmap", "success", "r_cap"}
)


def _descending(docs: Mapping[str, float]) -> np.ndarray:
    return np.sort(np.fromiter(docs.values(), dtype=np.float64, count=len(docs)))[::-1]


def has_ties(descending_scores: np.ndarray) -> bool:
    return bool(np.any(descending_scores[1:] == descending_scores[:-1]))


def order_matters(
    docs: Mapping[str, float], grades: Mapping[str, int], descending_scores: np.ndarray
) -> bool:
    """Whether some tied group holds documents of different grades (unjudged = 0); if none does, every
    order of the tied documents scores the same, so the query need not be re-scored.

    Only groups holding a judged document of non-zero grade can matter: such a group is mixed when it
    is larger than the number of its documents judged with that same grade (a few look-ups per judged
    document instead of a pass over the ranking for each).
    """
    ascending = descending_scores[::-1]
    same_grade: dict[tuple[float, int], int] = {}
    for docid, grade in grades.items():
        score = docs.get(docid)
        if score is not None:
            same_grade[score, grade] = same_grade.get((score, grade), 0) + 1
    for (score, grade), count in same_grade.items():
        if grade == 0:
            continue
        group = np.searchsorted(ascending, score, "right") - np.searchsorted(ascending, score, "left")
        if group > count:
            return True
    return False


def straddles(descending_scores: Sequence[float], k: int) -> bool:
    """Whether a tied group crosses the cut-off: ranks k and k+1 hold equal scores."""
    return len(descending_scores) > k and descending_scores[k - 1] == descending_scores[k]


def extreme_order(
    docs: Mapping[str, float], grades: Mapping[str, int], highest_first: bool
) -> dict[str, float]:
    """The ranking with each tied group sorted by grade (unjudged = 0), re-scored n..1 so no tie remains.

    Documents of equal score and grade keep trec_eval's order (their position in it is the last key).
    """
    docids = list(docs)
    n = len(docids)
    scores = np.fromiter(docs.values(), dtype=np.float64, count=n)
    position = np.empty(n, dtype=np.int64)
    position[ranking_order(docids, scores)] = np.arange(n)
    grade = np.fromiter((grades.get(docid, 0) for docid in docids), dtype=np.int64, count=n)
    order = np.lexsort((position, -grade if highest_first else grade, -scores)).tolist()
    return dict(zip([docids[i] for i in order], np.arange(n, 0, -1, dtype=np.float64).tolist(), strict=True))


def bound_method(metric: str) -> str:
    """How the lowest / highest values of ``metric`` were found: exact, or only bounded."""
    family, _, cutoff = metric.partition("@")
    if family not in MONOTONE_FAMILIES:
        return "bounded: not known to be monotone in the tie order; lowest / highest grade-first orders only"
    return _EXACT if cutoff else _EXACT_RETRIEVED


def tie_diagnostics(
    qrels: Qrels,
    run: Mapping[str, Mapping[str, float]],
    per_query: PerQuery,
    metrics: Sequence[str],
    cutoffs: Iterable[int],
    *,
    evaluate_run: Callable[[Run], PerQuery],
    mean: Callable[[str, list[float]], float],
    chunk_queries: int = 2000,
) -> dict[str, object]:
    """The ``ties`` block of metrics.json for the queries in ``per_query``.

    ``evaluate_run`` scores a run with the same metrics and settings (the one engine); ``mean`` is its
    aggregation (gmap's is not the arithmetic mean). Queries are read and re-scored ``chunk_queries`` at
    a time, so memory follows the chunk, not the run.
    """
    cutoffs = sorted(set(cutoffs))
    tied: list[str] = []
    movable: list[str] = []
    straddling_qids: dict[int, list[str]] = {k: [] for k in cutoffs}
    extremes: dict[str, PerQuery] = {side: {} for side in SIDES}
    qids = list(per_query)
    for start in range(0, len(qids), chunk_queries):
        chunk = {qid: dict(run.get(qid, {})) for qid in qids[start : start + chunk_queries]}
        chunk_movable = []
        for qid, docs in chunk.items():
            scores = _descending(docs)
            if not has_ties(scores):
                continue
            tied.append(qid)
            for k in cutoffs:
                if straddles(scores, k):
                    straddling_qids[k].append(qid)
            if order_matters(docs, qrels.get(qid, {}), scores):
                chunk_movable.append(qid)
        movable.extend(chunk_movable)
        for side in SIDES if chunk_movable else ():
            reordered = {
                qid: extreme_order(chunk[qid], qrels.get(qid, {}), highest_first=side == "highest")
                for qid in chunk_movable
            }
            extremes[side].update(evaluate_run(reordered))
    bounds = {}
    for metric in metrics:
        values = {
            side: [extremes[side].get(qid, row)[metric] for qid, row in per_query.items()] for side in SIDES
        }
        bounds[metric] = {
            "reported": mean(metric, [row[metric] for row in per_query.values()]),
            **{side: mean(metric, values[side]) for side in SIDES},
            "queries_that_can_move": sum(
                extremes["lowest"][qid][metric] != extremes["highest"][qid][metric] for qid in movable
            ),
            "method": bound_method(metric),
        }
    straddling = {
        f"@{k}": {"queries": len(straddling_qids[k]), "qids": sorted(straddling_qids[k])[:MAX_LISTED_QUERIES]}
        for k in cutoffs
    }
    return {
        "queries_with_ties": len(tied),
        "queries_whose_tie_order_matters": len(movable),
        "straddling_cutoff": straddling,
        "bounds": bounds,
        "rule": "reported values break ties by docid descending (trec_eval); bounds range over every order "
        "of tied documents",
    }
