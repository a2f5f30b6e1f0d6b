"""Judged@k: the share of a query's top k documents that carry a judgment (any grade, 0 included).

A low share means the metric scored many documents nobody judged as non-relevant, so nDCG@10 on a
new system can be an underestimate (TREC-COVID top-10 lists are often under 60% judged). The value
is P@k with every judged document counted, as ir_measures defines it: judged documents in the top k
divided by k, the top k cut by trec_eval's tie rule. An empty ranking (trec_eval ``-c``) is 0 judged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from harness.datasets.qrels import Qrels
from harness.evaluation.trec import Run, top_k_ranking

# The cut-off printed beside nDCG@10, and the share below which the outputs warn.
HEADLINE_K = 10
WARN_BELOW = 0.8


def judged_name(k: int) -> str:
    return f"judged@{k}"


def judged_cutoffs(cutoffs: Iterable[int | None]) -> list[int]:
    """The cut-offs to report judged@k at: every metric cut-off, and always the headline 10."""
    return sorted({k for k in cutoffs if k is not None} | {HEADLINE_K})


def judged_at_k(qrels: Qrels, run: Run, qids: Iterable[str], ks: list[int]) -> dict[str, dict[str, float]]:
    """qid -> ``{"judged@k": share}`` for every k; a query absent from ``run`` has an empty ranking."""
    depth = max(ks)
    per_query: dict[str, dict[str, float]] = {}
    for qid in qids:
        judged = qrels.get(qid, {})
        top = [docid in judged for docid, _ in top_k_ranking(run.get(qid, {}), depth)]
        per_query[qid] = {judged_name(k): sum(top[:k]) / k for k in ks}
    return per_query


def judged_summary(per_query: Mapping[str, Mapping[str, float]], ks: list[int]) -> dict[str, object]:
    """The ``judged`` block of metrics.json: means over the averaged queries, per-query values, warning."""
    means = {
        judged_name(k): math.fsum(values[judged_name(k)] for values in per_query.values()) / len(per_query)
        for k in ks
    }
    return {
        "definition": "share of the top k documents (trec_eval order) that have a judgment, any grade",
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
