"""Learned sparse retrieval: exact top-k by sparse dot product, and seismic when asked.

Exact search walks the corpus in chunks of documents (scipy CSR products, ``query_block`` queries at a
time) and keeps a running top-k per query, so what it holds beyond the vectors themselves is bounded by
the chunk, the block and k, never by the corpus size. Each (score, document) is one int64 key: the
float32 score's bits made order-preserving in the high half, the document id's rank among all ids in the
low half, so one integer order is exactly trec_eval's (score descending, then document
id descending; see ``harness.core.ranking``), boundary ties included. A document that shares no active
dimension with the query (score 0) is not retrieved, as in an inverted index (pyserini, seismic).

``--index seismic[,n_postings=N,...]`` builds a seismic (pyseismic-lsr) index in memory and records its
settings and its recall@k against the exact ranking on a sample of queries.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from harness.core.errors import HarnessError
from harness.core.ranking import Run, ranking_order
from harness.encoding.sparse import SparseCache, SparseTextEncoder, sparsity_stats
from harness.retrieval.dense import to_run
from harness.retrieval.settings import RetrievalSettings

log = logging.getLogger(__name__)

DOC_CHUNK = 16_384  # documents scored at once
QUERY_BLOCK = 1024  # queries scored at once against a chunk
NO_HIT = np.iinfo(np.int64).min
EXACT_SPECS = ("flat", "exact")
SEISMIC = "seismic"
_SEISMIC_EXAMPLE = "e.g. seismic or seismic,n_postings=3500,query_cut=10,heap_factor=0.7"


# ---- exact search ---------------------------------------------------------------------------------


def order_keys(scores: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """int64 keys ordered as (score, id rank): float32 bits flipped for negatives (so signed integer
    order is float order) in the high 32 bits, the rank (0 <= rank < 2**32) in the low 32."""
    bits = np.ascontiguousarray(scores, dtype=np.float32).view(np.int32).astype(np.int64)
    monotone = np.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    return (monotone << 32) | ranks.astype(np.int64)


def key_scores(keys: np.ndarray) -> np.ndarray:
    """The float32 scores of ``order_keys`` keys (inverse of the high half)."""
    monotone = (keys >> 32).astype(np.int64)
    bits = np.where(monotone >= 0, monotone, monotone ^ 0x7FFFFFFF).astype(np.int32)
    return bits.view(np.float32)


def id_ranks(doc_ids: Sequence[str]) -> np.ndarray:
    """Each document's rank in code-point order of ids (strcmp's order on UTF-8, trec_eval's)."""
    order = np.argsort(np.asarray(doc_ids, dtype=str), kind="stable")
    ranks = np.empty(len(doc_ids), dtype=np.int64)
    ranks[order] = np.arange(len(doc_ids), dtype=np.int64)
    return ranks


@dataclass
class SparseHits:
    """Top-k per query: corpus positions (-1: none), float32 scores and document ids ("" for none)."""

    positions: np.ndarray
    scores: np.ndarray
    doc_ids: list[list[str]]

    def run(self, query_ids: Sequence[str], top_k: int, *, drop_identical_ids: bool = False) -> Run:
        return to_run(query_ids, self.scores, self.doc_ids, top_k, drop_identical_ids=drop_identical_ids)


def exact_sparse_search(
    queries,
    shards: Sequence[tuple[Sequence[str], Any]],
    top_k: int,
    *,
    doc_chunk: int = DOC_CHUNK,
    query_block: int = QUERY_BLOCK,
) -> SparseHits:
    """Exact top-k by sparse dot product of CSR ``queries`` against the corpus ``shards`` (ids, CSR)."""
    import scipy.sparse

    queries = scipy.sparse.csr_matrix(queries, dtype=np.float32)
    all_ids = [doc_id for ids, _ in shards for doc_id in ids]
    ranks = id_ranks(all_ids)
    num_queries, k = queries.shape[0], max(1, min(top_k, len(all_ids)))
    # Per query, the best k keys so far in ascending order (NO_HIT fills a row not yet full).
    best_keys = np.full((num_queries, k), NO_HIT, dtype=np.int64)
    best_positions = np.full((num_queries, k), -1, dtype=np.int64)
    offset = 0
    for _, matrix in shards:
        for start in range(0, matrix.shape[0], doc_chunk):
            chunk_t = matrix[start : start + doc_chunk].T.tocsr()  # (vocab, docs), shared by every block
            for low in range(0, num_queries, query_block):
                rows = slice(low, min(low + query_block, num_queries))
                scores = (queries[rows] @ chunk_t).tocsr()  # only documents sharing a dimension
                _merge(best_keys[rows], best_positions[rows], scores, ranks, offset + start)
        offset += matrix.shape[0]
    return _hits(best_keys[:, ::-1], best_positions[:, ::-1], all_ids)


def _merge(best_keys, best_positions, scores, ranks, first: int) -> None:
    """Fold one block's sparse scores into the running top-k (in place, each row kept ascending).

    Only entries above their row's current k-th key can enter; the rows they touch are re-ranked by one
    ``lexsort`` of those entries and the rows' current best.
    """
    k = best_keys.shape[1]
    rows = np.repeat(np.arange(scores.shape[0]), np.diff(scores.indptr))
    positions = first + scores.indices.astype(np.int64)
    keys = order_keys(scores.data, ranks[positions])
    enters = (scores.data != 0) & (keys > best_keys[rows, 0])
    if not enters.any():
        return
    touched, local = np.unique(rows[enters], return_inverse=True)
    all_rows = np.concatenate([local, np.repeat(np.arange(len(touched)), k)])
    all_keys = np.concatenate([keys[enters], best_keys[touched].ravel()])
    all_positions = np.concatenate([positions[enters], best_positions[touched].ravel()])
    order = np.lexsort((all_keys, all_rows))  # by row, then key ascending
    ends = np.cumsum(np.bincount(all_rows, minlength=len(touched)))
    from_end = ends[all_rows[order]] - np.arange(len(order))  # 1 for a row's largest key
    kept = order[from_end <= k]  # every row holds at least k (its current best): exactly k kept, in order
    best_keys[touched] = all_keys[kept].reshape(len(touched), k)
    best_positions[touched] = all_positions[kept].reshape(len(touched), k)


def _hits(best_keys, best_positions, all_ids: Sequence[str]) -> SparseHits:
    """Rows already in descending key order: positions, scores and ids (none where NO_HIT)."""
    keys = np.ascontiguousarray(best_keys)
    positions = np.where(keys == NO_HIT, -1, best_positions)
    scores = np.where(keys == NO_HIT, np.float32(0), key_scores(keys)).astype(np.float32)
    names = [[all_ids[p] if p >= 0 else "" for p in row] for row in positions.tolist()]
    return SparseHits(positions, scores, names)


# ---- seismic --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeismicSpec:
    """A seismic index's build and search settings (pyseismic-lsr's own defaults, but the query cut) and
    how many queries its recall against exact search is measured on."""

    n_postings: int = 3500
    centroid_fraction: float = 0.1
    summary_energy: float = 0.4
    query_cut: int = 10
    heap_factor: float = 0.7
    recall_sample: int = 200

    def describe(self) -> dict[str, Any]:
        return {"index": SEISMIC, **asdict(self)}


def parse_sparse_index(spec: str, model_name: str) -> SeismicSpec | None:
    """``--index`` for a sparse model: Flat/exact (None: exact search) or ``seismic[,key=value...]``; a
    FAISS spec is one line saying what a sparse model takes instead."""
    parts = [part.strip() for part in (spec or "Flat").split(",") if part.strip()]
    head = parts[0] if parts else "Flat"
    if head.lower() in EXACT_SPECS and len(parts) == 1:
        return None
    if head.lower() != SEISMIC:
        raise HarnessError(
            f"--index {spec!r} is a FAISS index for dense vectors; model {model_name} is sparse: use "
            f"--index Flat (exact) or --index seismic ({_SEISMIC_EXAMPLE})"
        )
    known = {item.name: item.type for item in fields(SeismicSpec)}
    values: dict[str, Any] = {}
    for part in parts[1:]:
        key, _, text = part.partition("=")
        if key not in known or not text:
            raise HarnessError(
                f"--index {spec!r}: unknown seismic setting {part!r} (known: {', '.join(known)}; {_SEISMIC_EXAMPLE})"
            )
        try:
            value = float(text) if known[key] == "float" else int(text)
        except ValueError:
            raise HarnessError(f"--index {spec!r}: {key} must be a {known[key]}, got {text!r}") from None
        if value <= 0 or (key in ("centroid_fraction", "summary_energy") and value > 1):
            raise HarnessError(f"--index {spec!r}: {key} must be positive (fractions at most 1), got {text}")
        values[key] = value
    return SeismicSpec(**values)


def _seismic_tokens(indices: np.ndarray):
    import seismic

    return np.asarray([str(i) for i in indices.tolist()], dtype=seismic.get_seismic_string())


def build_seismic_index(shards: Sequence[tuple[Sequence[str], Any]], spec: SeismicSpec):
    """A seismic index over the corpus (vocabulary ids as its components), built in memory; documents
    without any active dimension are left out (they can match no query)."""
    import seismic

    vocab = max((int(matrix.shape[1]) for _, matrix in shards), default=0)
    dataset = seismic.SeismicDataset(dim=vocab)
    for ids, matrix in shards:
        matrix.sort_indices()  # seismic wants increasing components within a row
        dataset.add_documents_by_id(
            [str(doc_id) for doc_id in ids],
            np.asarray(matrix.indices, dtype=np.int64),
            np.asarray(matrix.data, dtype=np.float32),
            np.asarray(matrix.indptr, dtype=np.int64),
        )
    with _stdout_to_stderr():  # seismic's Rust core prints its progress on file descriptor 1
        return seismic.SeismicIndex.build_from_dataset(
            dataset,
            n_postings=spec.n_postings,
            centroid_fraction=spec.centroid_fraction,
            summary_energy=spec.summary_energy,
        )


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send what native code writes to stdout to stderr instead: stdout carries the command's output."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def seismic_search(
    index, queries, query_ids: Sequence[str], top_k: int, spec: SeismicSpec
) -> list[list[tuple[str, float]]]:
    """Each query's hits from seismic, put in trec_eval order (score descending, then id descending)."""
    import scipy.sparse
    import seismic

    queries = scipy.sparse.csr_matrix(queries, dtype=np.float32)
    components, values = [], []
    for row in range(queries.shape[0]):
        start, end = queries.indptr[row], queries.indptr[row + 1]
        components.append(_seismic_tokens(queries.indices[start:end]))
        values.append(np.asarray(queries.data[start:end], dtype=np.float32))
    with _stdout_to_stderr():
        results = index.batch_search(
            np.asarray([str(q) for q in query_ids], dtype=seismic.get_seismic_string()),
            components,
            values,
            k=top_k,
            query_cut=spec.query_cut,
            heap_factor=spec.heap_factor,
        )
    by_query = {str(hits[0][0]): hits for hits in results if hits}  # batch results come in any order
    ranked = []
    for query_id in query_ids:
        hits = by_query.get(str(query_id), [])
        doc_ids = [str(doc_id) for _, _, doc_id in hits]
        scores = np.asarray([score for _, score, _ in hits], dtype=np.float64)
        ranked.append([(doc_ids[i], float(scores[i])) for i in ranking_order(doc_ids, scores).tolist()])
    return ranked


def recall_against_exact(approximate: list[list[str]], exact: list[list[str]], k: int) -> float:
    """Mean over queries of |approximate top-k ∩ exact top-k| / |exact top-k| (queries without exact hits
    left out)."""
    shares = [
        len(set(a[:k]) & set(e[:k])) / len(e[:k]) for a, e in zip(approximate, exact, strict=True) if e[:k]
    ]
    return float(np.mean(shares)) if shares else 1.0


def recall_sample(num_queries: int, size: int, seed: int = 0) -> np.ndarray:
    """The queries (positions, sorted) on which an index's recall is measured."""
    if size >= num_queries:
        return np.arange(num_queries)
    return np.sort(np.random.default_rng(seed).choice(num_queries, size=size, replace=False))


# ---- the retriever --------------------------------------------------------------------------------


@dataclass
class SparseRetriever:
    """A ``kind: sparse`` model over one dataset: encode (or find cached) vectors, then search exactly or
    with seismic; ``retrieve`` returns the run and the details provenance records."""

    dataset: Any  # harness.core.protocols.EvalDataset
    encoder: SparseTextEncoder
    settings: RetrievalSettings
    cache: SparseCache
    index: SeismicSpec | None = None
    shard_size: int | None = None

    def retrieve(self) -> tuple[Run, dict[str, Any]]:
        timings: dict[str, float] = {}
        started = time.perf_counter()
        corpus = self.cache.corpus(self.dataset, self.encoder, shard_size=self.shard_size)
        timings["encode_corpus"] = time.perf_counter() - started
        started = time.perf_counter()
        query_ids, queries = self.cache.queries(self.dataset, self.encoder)
        timings["encode_queries"] = time.perf_counter() - started
        queries, documents = self.encoder.scoring_vectors(queries, corpus.shards)
        shards = list(documents)
        drop = self.settings.drops_identical_ids(self.dataset.drop_identical_ids)
        fetch = self.settings.top_k + 1 if drop else self.settings.top_k
        started = time.perf_counter()
        index_details: dict[str, Any] = {"index": "exact"}
        if self.index is None:
            run = exact_sparse_search(queries, shards, fetch).run(
                query_ids, self.settings.top_k, drop_identical_ids=drop
            )
        else:
            run, index_details = self._seismic(queries, query_ids, shards, fetch, drop)
        timings["search"] = time.perf_counter() - started
        details = {
            "encoder_settings": self.encoder.settings(),
            "encoder": self.encoder.describe(),
            "sparse_cache": {
                "corpus_key": corpus.key,
                "directory": str(corpus.directory),
                "rebuilt_shards": corpus.rebuilt,
            },
            "sparsity": sparsity_stats(queries, (matrix for _, matrix in shards), self.encoder.vocab),
            "sparse_index": index_details,
            "sparse_timings": {name: round(seconds, 3) for name, seconds in timings.items()},
        }
        return run, details

    def _seismic(self, queries, query_ids, shards, fetch: int, drop: bool) -> tuple[Run, dict[str, Any]]:
        spec = self.index
        built = time.perf_counter()
        index = build_seismic_index(shards, spec)
        build_seconds = time.perf_counter() - built
        ranked = seismic_search(index, queries, query_ids, fetch, spec)
        run: Run = {}
        for query_id, hits in zip(query_ids, ranked, strict=True):
            kept = [(doc_id, score) for doc_id, score in hits if not (drop and doc_id == query_id)]
            run[query_id] = dict(kept[: self.settings.top_k])
        recall, sample_size = self._recall(index, queries, query_ids, shards)
        details = {
            **spec.describe(),
            "build_seconds": round(build_seconds, 3),
            "recall_sample": sample_size,
            "recall_vs_exact": recall,
        }
        return run, details

    def _recall(self, index, queries, query_ids, shards) -> tuple[dict[str, float], int]:
        """Recall@10, @100 and @top-k of the index against exact search, on a seeded query sample."""
        spec, ks = self.index, sorted({10, 100, self.settings.top_k})
        sample = recall_sample(len(query_ids), spec.recall_sample)
        sample_ids = [query_ids[i] for i in sample.tolist()]
        depth = max(ks)
        exact = [[d for d in row if d] for row in exact_sparse_search(queries[sample], shards, depth).doc_ids]
        found = seismic_search(index, queries[sample], sample_ids, depth, spec)
        approximate = [[doc_id for doc_id, _ in hits] for hits in found]
        return {f"recall@{k}": recall_against_exact(approximate, exact, k) for k in ks}, len(sample)
