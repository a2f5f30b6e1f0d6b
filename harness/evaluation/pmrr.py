"""p-MRR, FollowIR's instruction-following score, computed as mteb's ``calculate_pmrr`` computes it.

FollowIR (Weller et al. 2024, arXiv:2403.15246) runs every query twice: with its original instruction
and with an altered one under which some judged documents stop being relevant (the "changed qrels").
A model that follows the instruction moves those documents down. For each changed document d of a query,
with rank r_og in the original run and r_new in the altered run (trec_eval order: score descending, then
document id descending; a document missing from a run ranks one past its end, as mteb's
``get_rank_from_dict`` does after its tie fix, mteb #5092)::

    r_og >= r_new:  (1 / r_og) / (1 / r_new) - 1     (moved up or stayed: 0 or negative)
    r_og <  r_new:  1 - (1 / r_new) / (1 / r_og)     (moved down: positive)

A query's score is the mean over its changed documents, p-MRR the mean over queries
(mteb ``_evaluators/retrieval_metrics.py``: ``rank_score``, ``calculate_pmrr``). A query of the changed
qrels missing from either run is left out (mteb logs a warning); :class:`PMrr` names them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from harness.core.errors import HarnessError
from harness.core.ranking import Run, ranking_order

# FollowIR's query ids in one combined run (mteb evaluate_p_mrr_change): "<qid>-og" and "<qid>-changed".
ORIGINAL_SUFFIX = "-og"
CHANGED_SUFFIX = "-changed"


@dataclass(frozen=True)
class PMrr:
    """p-MRR over the queries present in both runs, each query's own score, and the queries left out."""

    score: float
    per_query: dict[str, float]
    missing: tuple[str, ...] = ()


def ranks(ranking: Mapping[str, float], doc_ids: Iterable[str]) -> list[int]:
    """1-based trec_eval ranks of ``doc_ids`` in ``ranking``; one past its end for a document it lacks."""
    docids = list(ranking)
    order = ranking_order(docids, np.fromiter(ranking.values(), dtype=np.float64, count=len(docids)))
    position = {docids[index]: rank for rank, index in enumerate(order.tolist(), start=1)}
    beyond = len(docids) + 1
    return [position.get(doc_id, beyond) for doc_id in doc_ids]


def rank_change_score(original_rank: int, changed_rank: int) -> float:
    """FollowIR's per-document score (mteb ``rank_score``): positive when the altered instruction moved
    the document down, negative when it moved up, in [-1, 1)."""
    if original_rank >= changed_rank:
        return ((1 / original_rank) / (1 / changed_rank)) - 1
    return 1 - ((1 / changed_rank) / (1 / original_rank))


def p_mrr(original_run: Run, changed_run: Run, changed_qrels: Mapping[str, Iterable[str]]) -> PMrr:
    """p-MRR of a model whose run under the original instructions is ``original_run`` and under the
    altered ones ``changed_run`` (both keyed by the plain query id), over ``changed_qrels``: query id ->
    the documents whose relevance the altered instruction took away (mteb's ``qrel_diff`` config)."""
    per_query: dict[str, float] = {}
    missing: list[str] = []
    for query_id, changed_docs in changed_qrels.items():
        if query_id not in original_run or query_id not in changed_run:
            missing.append(query_id)
            continue
        docs = list(changed_docs)
        if not docs:
            continue
        pairs = zip(ranks(original_run[query_id], docs), ranks(changed_run[query_id], docs), strict=True)
        per_query[query_id] = float(np.mean([rank_change_score(og, new) for og, new in pairs]))
    if not per_query:
        raise HarnessError(
            f"p-MRR: none of the {len(changed_qrels)} queries of the changed qrels has a changed document "
            "ranked in both runs (check that both runs use the changed qrels' query ids)"
        )
    # mteb averages the per-query means in query-id order (pandas groupby sorts its keys); pandas' grouped
    # summation may differ from numpy's in the last bit, so the two agree to float round-off (~1e-16).
    score = float(np.mean([per_query[query_id] for query_id in sorted(per_query)]))
    return PMrr(score, per_query, tuple(missing))


def split_instruction_run(run: Run) -> tuple[Run, Run]:
    """One FollowIR run (``<qid>-og`` and ``<qid>-changed`` rows) as its original and altered runs keyed by
    the plain query id; a query id with neither suffix is one error line."""
    original: Run = {}
    changed: Run = {}
    for query_id, ranking in run.items():
        if query_id.endswith(ORIGINAL_SUFFIX):
            original[query_id.removesuffix(ORIGINAL_SUFFIX)] = ranking
        elif query_id.endswith(CHANGED_SUFFIX):
            changed[query_id.removesuffix(CHANGED_SUFFIX)] = ranking
        else:
            raise HarnessError(
                f"FollowIR run: query {query_id!r} ends in neither {ORIGINAL_SUFFIX!r} nor {CHANGED_SUFFIX!r} "
                "(each query is run once per instruction, as <qid>-og and <qid>-changed)"
            )
    return original, changed
