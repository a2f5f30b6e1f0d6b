"""Judged@k: the share of a query's top k documents that carry a judgment (any grade, 0 included).

A low share means the metric scored many documents nobody judged as non-relevant, so nDCG@10 on a
new system can be an underestimate (TREC-COVID top-10 lists are often under 60% judged). The value
is ir_measures' Judged@k exactly (its JudgedProvider): the ranking ordered by score descending, ties by
docid ascending, scores as read (not rounded to float32); judged documents in the first k divided by k,
or by the ranking's length when it holds fewer than k documents. A query without results (averaged only
under trec_eval ``-c``) is 0 judged, where ir_measures gives no value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from harness.datasets.qrels import Qrels
from harness.evaluation.trec import Run

# The cut-off printed beside nDCG@10, and the share below which the outputs warn.
HEADLINE_K = 10
WARN_BELOW = 0.8


def judged_name(k: int) -> str:
    return f"judged@{k}"


def judged_cutoffs(cutoffs: Iterable[int | None]) -> list[int]:
    """The cut-offs to report judged@k at: every metric cut-off, and always the headline 10."""
    return sorted({k for k in cutoffs if k is not None} | {HEADLINE_K})


DEFINITION = (
    "ir_measures' Judged@k: share of the top k documents (score descending, ties by docid ascending, "
    "scores as read) that have a judgment, any grade; a ranking shorter than k divides by its length; "
    "a query without results is 0"
)


def ir_measures_top(docs: Mapping[str, float], depth: int) -> list[str]:
    """The first ``depth`` docids in ir_measures' order: score descending, then docid ascending."""
    docids = list(docs)
    scores = np.fromiter(docs.values(), dtype=np.float64, count=len(docids))
    if depth < len(docids):  # only the documents scoring at least the depth-th best can be in the top
        threshold = np.partition(scores, len(scores) - depth)[len(scores) - depth]
        keep = np.flatnonzero(scores >= threshold)
        docids, scores = [docids[i] for i in keep.tolist()], scores[keep]
    ranked = sorted(zip(docids, scores.tolist(), strict=True), key=lambda item: (-item[1], item[0]))
    return [docid for docid, _ in ranked[:depth]]


def judged_share(judged_flags: list[bool], k: int) -> float:
    """ir_measures' Judged@k of a ranking's judged flags (top first): divided by k, or by the ranking's
    length when it is shorter; an empty ranking is 0."""
    top = judged_flags[:k]
    return sum(top) / len(top) if top else 0.0


def judged_at_k(qrels: Qrels, run: Run, qids: Iterable[str], ks: list[int]) -> dict[str, dict[str, float]]:
    """qid -> ``{"judged@k": share}`` for every k; a query absent from ``run`` has an empty ranking."""
    depth = max(ks)
    per_query: dict[str, dict[str, float]] = {}
    for qid in qids:
        judged = qrels.get(qid, {})
        flags = [docid in judged for docid in ir_measures_top(run.get(qid, {}), depth)]
        per_query[qid] = {judged_name(k): judged_share(flags, k) for k in ks}
    return per_query


def judged_summary(per_query: Mapping[str, Mapping[str, float]], ks: list[int]) -> dict[str, object]:
    """The ``judged`` block of metrics.json: means over the averaged queries, per-query values, warning."""
    means = {
        judged_name(k): math.fsum(values[judged_name(k)] for values in per_query.values()) / len(per_query)
        for k in ks
    }
    return {
        "definition": DEFINITION,
        "mean": means,
        "warning": judged_warning(means),
        "per_query": {qid: dict(values) for qid, values in per_query.items()},
    }


def judged_warning(means: Mapping[str, float]) -> str | None:
    """One line when Judged@10 is under :data:`WARN_BELOW`, else None."""
    share = means.get(judged_name(HEADLINE_K))
    if share is None or share >= WARN_BELOW:
        return None
    return (
        f"only {share:.0%} of the top-{HEADLINE_K} documents are judged (Judged@{HEADLINE_K} < {WARN_BELOW}): "
        "unjudged documents count as non-relevant, so nDCG@10 may understate this system"
    )
