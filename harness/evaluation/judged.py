"""Judged@k: the share of a query's top k documents that carry a judgment (any grade, 0 included).

A low share means the metric scored many documents nobody judged as non-relevant, so nDCG@10 on a
new system can be an underestimate (TREC-COVID top-10 lists are often under 60% judged). The value
is ir_measures' Judged@k exactly (its JudgedProvider): the ranking ordered by score descending, ties by
docid ascending, scores as read (not rounded to float32); judged documents in the first k divided by k,
or by the ranking's length when it holds fewer than k documents. A query without results (averaged only
under trec_eval ``-c``) is 0 judged, where ir_measures gives no value.

What counts as low depends on the qrels. BEIR's qrels judge about one document per query (scifact: 1.1),
so no system can have more than ~11% of its top 10 judged; TREC pools judge hundreds. So each query's
reachable share, min(k, judged documents) / k (the ranking's length when shorter), is averaged beside
Judged@k, and a warning fires only when a system is far below that ceiling, or, in a table, far below
the other systems of its row: "far" is :data:`FAR_BELOW` of the top k. With a ceiling of 1 (a pooled
collection) that is the familiar Judged@10 < 0.8.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from harness.datasets.qrels import Qrels
from harness.evaluation.trec import Run

# The cut-off printed beside nDCG@10.
HEADLINE_K = 10
# How far (a share of the top k) Judged@k may sit below what the qrels allow, or below the best system of
# a table's row, before the outputs warn: beyond it, a fifth of the top k is unjudged where judged
# documents could have been, enough to move nDCG@k visibly.
FAR_BELOW = 0.2


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


def reachable_share(n_judged: int, n_ranked: int, k: int) -> float:
    """The highest Judged@k a ranking of ``n_ranked`` documents can have when the query has ``n_judged``
    judged documents (an empty ranking could have held k)."""
    depth = min(k, n_ranked) if n_ranked else k
    return min(depth, n_judged) / depth


def judged_and_reachable(
    qrels: Qrels, run: Run, qids: Iterable[str], ks: list[int]
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Per query, ``{"judged@k": share}`` and ``{"judged@k": reachable share}`` for every k."""
    depth = max(ks)
    shares: dict[str, dict[str, float]] = {}
    reachable: dict[str, dict[str, float]] = {}
    for qid in qids:
        judged = qrels.get(qid, {})
        docs = run.get(qid, {})
        flags = [docid in judged for docid in ir_measures_top(docs, depth)]
        shares[qid] = {judged_name(k): judged_share(flags, k) for k in ks}
        reachable[qid] = {judged_name(k): reachable_share(len(judged), len(docs), k) for k in ks}
    return shares, reachable


def _means(per_query: Mapping[str, Mapping[str, float]], ks: list[int]) -> dict[str, float]:
    return {
        judged_name(k): math.fsum(values[judged_name(k)] for values in per_query.values()) / len(per_query)
        for k in ks
    }


def judged_summary(
    per_query: Mapping[str, Mapping[str, float]],
    ks: list[int],
    reachable: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, object]:
    """The ``judged`` block of metrics.json: means over the averaged queries, the reachable means
    (``ceiling``, when ``reachable`` is given), per-query values and the warning."""
    means = _means(per_query, ks)
    ceiling = _means(reachable, ks) if reachable else None
    block: dict[str, object] = {"definition": DEFINITION, "mean": means}
    if ceiling is not None:
        block["ceiling"] = ceiling
    block["warning"] = judged_warning(means, ceiling)
    block["per_query"] = {qid: dict(values) for qid, values in per_query.items()}
    return block


def far_below(share: float, reference: float) -> bool:
    """Whether a Judged@k share sits more than :data:`FAR_BELOW` under ``reference`` (a ceiling or the best)."""
    return share < reference - FAR_BELOW


def judged_warning(means: Mapping[str, float], ceiling: Mapping[str, float] | None = None) -> str | None:
    """One line when Judged@10 is far below what the qrels allow (``ceiling``: the ``judged`` block's
    reachable means; without it, every document could have been judged), else None."""
    name = judged_name(HEADLINE_K)
    share = means.get(name)
    reachable = (ceiling or {}).get(name, 1.0)
    if share is None or not far_below(share, reachable):
        return None
    if reachable >= 1.0:
        why = f"(Judged@{HEADLINE_K} < {1.0 - FAR_BELOW:.1f})"
    else:
        why = f"where the qrels allow {reachable:.0%}"
    return (
        f"only {share:.0%} of the top-{HEADLINE_K} documents are judged {why}: "
        f"unjudged documents count as non-relevant, so nDCG@{HEADLINE_K} may understate this system"
    )
