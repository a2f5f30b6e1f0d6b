"""``harness check-model --probe N``: how much each preflight disagreement moves nDCG@10, measured.

On the dataset's first N judged queries, every candidate in a pool (BM25's top 100 of those queries,
united with their judged documents) is scored twice: once as the record says, once with the record changed
to follow the source that disagrees (:meth:`harness.models.preflight.SettingCheck.alternative`). Both
rankings are evaluated with nDCG@10 against the same judgments, so the difference is the disagreement's
effect on these queries, without encoding the whole corpus. A pool is a re-ranking of good candidates,
so absolute values sit above a full-corpus run's; the difference is what the probe is for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.core.errors import HarnessError
from harness.core.protocols import TextDocument
from harness.datasets.beir import BeirDataset
from harness.encoding.plan import EncodingSettings, encoder_spec_for
from harness.evaluation.metrics import evaluate
from harness.models.model_registry import find_record
from harness.models.preflight import DROP_IDENTICAL_IDS, Preflight, SettingCheck
from harness.models.prompts import bind_prompts
from harness.models.resolve import ResolvedModel
from harness.retrieval.bm25 import BM25Retriever

PROBE_METRIC = "ndcg@10"
POOL_DEPTH = 100  # BM25 candidates per probed query
POOL_RETRIEVER = "bm25"  # the BM25 record that builds the pool
# Settings whose alternative changes only how vectors are compared or ranked: nothing is re-encoded.
SCORING_SIDE = {"similarity", DROP_IDENTICAL_IDS}


@dataclass
class ProbePool:
    """The probed queries, their judgments and the candidate documents every variant ranks."""

    dataset: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    documents: list[TextDocument]
    drop_identical_ids: bool


@dataclass(frozen=True)
class ProbeOutcome:
    """One disagreement measured: nDCG@10 as the record says and with the other source's value."""

    check: SettingCheck
    change: dict[str, Any]
    record_score: float | None
    alternative_score: float | None
    skipped: str = ""  # why this one could not be measured

    @property
    def difference(self) -> float | None:
        if self.record_score is None or self.alternative_score is None:
            return None
        return self.alternative_score - self.record_score


@dataclass(frozen=True)
class _Vectors:
    queries: np.ndarray
    documents: np.ndarray


def probe_pool(dataset: BeirDataset, n_queries: int, encoding: EncodingSettings) -> ProbePool:
    """The first ``n_queries`` judged queries (in the queries file's order), with BM25's top 100 of each
    united with their judged documents as the candidates."""
    judged = [qid for qid in dataset.queries if dataset.qrels.get(qid)]
    if not judged:
        raise HarnessError(f"dataset {dataset.name} has no judged query to probe")
    chosen = judged[:n_queries]
    queries = {qid: dataset.queries[qid] for qid in chosen}
    qrels = {qid: dict(dataset.qrels[qid]) for qid in chosen}
    subset = dataclasses.replace(dataset, queries=queries, qrels=qrels)
    record = find_record(POOL_RETRIEVER)
    if record is None:
        raise HarnessError(f"the probe's pool needs the {POOL_RETRIEVER} model record, which is missing")
    retriever = BM25Retriever(record, cache_dir=encoding.cache_dir, progress=False)
    run = retriever.retrieve(subset, POOL_DEPTH, drop_identical_ids=dataset.drop_identical_ids)
    wanted = {docid for ranking in run.values() for docid in ranking}
    wanted |= {docid for judgments in qrels.values() for docid in judgments}
    documents = [doc for doc in dataset.iter_documents() if doc.id in wanted]
    return ProbePool(dataset.name, queries, qrels, documents, dataset.drop_identical_ids)


def probe(
    found: Preflight, model: ResolvedModel, dataset: BeirDataset, n_queries: int, encoding: EncodingSettings
) -> list[ProbeOutcome]:
    """nDCG@10 on ``n_queries`` queries under the record and under each disagreement's alternative."""
    pool = probe_pool(dataset, n_queries, encoding)
    try:
        baseline = _encode(model, pool, encoding)
    except HarnessError as error:  # the record as written cannot run (e.g. a pooling its folder refuses)
        return [
            ProbeOutcome(check, dict(check.changes), None, None, str(error)) for check in found.disagreements
        ]
    record_score = _score(pool, baseline, model.record.similarity, pool.drop_identical_ids)
    outcomes = []
    for check in found.disagreements:
        change = dict(check.changes)
        if not change or "revision" in change:
            reason = "another revision is other weights: evaluate it with its own record"
            outcomes.append(
                ProbeOutcome(check, change, record_score, None, reason if change else "no change")
            )
            continue
        similarity = change.get("similarity", model.record.similarity)
        drop = change.get(DROP_IDENTICAL_IDS, pool.drop_identical_ids)
        vectors = baseline
        if not set(change) <= SCORING_SIDE:
            variant = dataclasses.replace(model, record=model.record.model_copy(update=change))
            try:
                vectors = _encode(variant, pool, encoding, documents=baseline if check.query_side else None)
            except HarnessError as error:
                outcomes.append(ProbeOutcome(check, change, record_score, None, str(error)))
                continue
        outcomes.append(ProbeOutcome(check, change, record_score, _score(pool, vectors, similarity, drop)))
    return outcomes


def _encode(
    model: ResolvedModel, pool: ProbePool, encoding: EncodingSettings, documents: _Vectors | None = None
) -> _Vectors:
    """Query and pool-document vectors as ``model``'s record says; ``documents``' vectors when given."""
    # Prompts resolved for the pool's dataset, as the pipeline binds them before encoding.
    encoder = encoder_spec_for(bind_prompts(model, pool.dataset), encoding).build(encoding.device)
    try:
        queries = encoder.encode_queries(list(pool.queries.values()))
        docs = documents.documents if documents is not None else encoder.encode_documents(pool.documents)
    finally:
        encoder.release()
    return _Vectors(queries, docs)


def _score(pool: ProbePool, vectors: _Vectors, similarity: str, drop_identical_ids: bool) -> float:
    """nDCG@10 of ranking every pool document for every probed query by ``similarity``."""
    queries, documents = vectors.queries.astype(np.float64), vectors.documents.astype(np.float64)
    if similarity == "cosine":
        queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        documents = documents / np.maximum(np.linalg.norm(documents, axis=1, keepdims=True), 1e-12)
    scores = queries @ documents.T
    doc_ids = [doc.id for doc in pool.documents]
    run = {
        qid: {
            docid: float(score)
            for docid, score in zip(doc_ids, row, strict=True)
            if not (drop_identical_ids and docid == qid)
        }
        for qid, row in zip(pool.queries, scores, strict=True)
    }
    return evaluate(pool.qrels, run, [PROBE_METRIC]).aggregate[PROBE_METRIC]
