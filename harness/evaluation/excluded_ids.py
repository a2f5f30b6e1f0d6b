"""BRIGHT's ``excluded_ids``: documents each query must not be credited or blamed for, removed before scoring.

Each BRIGHT example lists ``excluded_ids`` (``["N/A"]`` when there are none): documents of the corpus
that a query would match trivially (e.g. the post it was written from). BRIGHT's ``retrievers.py``
(``get_scores``, ``retrieval_bm25``) scores the whole corpus, pops every excluded id (skipping "N/A")
from the query's scores and keeps the top 1000 of the rest; ``run.py`` then asserts that no excluded id
is in the scores or in the query's gold ids before handing both to pytrec_eval (k 1, 5, 10, 25, 50,
100). mteb (#2696, #3268; BRIGHT v1.1 tasks) gets the same effect by ranking only the non-excluded
documents (``top_ranked``). Here the exclusion is applied to a finished run, before any metric: apply
it to a run retrieved at least ``depth + the most ids any query excludes`` deep to keep ``depth`` hits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from harness.core.errors import HarnessError
from harness.core.ranking import Run, ranking_order
from harness.datasets.qrels import Qrels

# BRIGHT's placeholder for "this query excludes nothing".
NO_EXCLUSION = "N/A"


def _excluded_set(doc_ids: Iterable[str]) -> set[str]:
    return {doc_id for doc_id in doc_ids if doc_id != NO_EXCLUSION}


def check_excluded_ids(excluded_ids: Mapping[str, Iterable[str]], qrels: Qrels) -> None:
    """Refuse, in one line, an excluded document that the qrels judge relevant to the same query
    (BRIGHT's run.py asserts this never happens: such a query could not be scored fairly)."""
    for query_id, doc_ids in excluded_ids.items():
        judged = qrels.get(query_id, {})
        relevant = sorted(doc_id for doc_id in _excluded_set(doc_ids) if judged.get(doc_id, 0) > 0)
        if relevant:
            raise HarnessError(
                f"query {query_id!r} excludes document {relevant[0]!r} that its qrels judge relevant "
                f"(grade {judged[relevant[0]]}); an excluded id must not be a gold id (BRIGHT run.py asserts "
                "this): fix the dataset's excluded_ids or its qrels"
            )


def apply_excluded_ids(
    run: Run, excluded_ids: Mapping[str, Iterable[str]], qrels: Qrels, *, depth: int | None = None
) -> Run:
    """``run`` without each query's excluded documents, checked against ``qrels`` first
    (:func:`check_excluded_ids`); with ``depth``, each query keeps its ``depth`` best remaining hits in
    trec_eval order (BRIGHT keeps 1000). Queries with no exclusions are passed through unchanged."""
    check_excluded_ids(excluded_ids, qrels)
    kept: Run = {}
    for query_id, ranking in run.items():
        excluded = _excluded_set(excluded_ids.get(query_id, ()))
        remaining = {doc_id: score for doc_id, score in ranking.items() if doc_id not in excluded}
        if depth is not None and len(remaining) > depth:
            docids = list(remaining)
            scores = np.fromiter(remaining.values(), dtype=np.float64, count=len(docids))
            remaining = {
                docids[i]: remaining[docids[i]] for i in ranking_order(docids, scores)[:depth].tolist()
            }
        kept[query_id] = remaining
    return kept
