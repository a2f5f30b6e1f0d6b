"""Dense search with FAISS over sharded, memory-mapped embeddings.

Exact search (the default, ``Flat``) walks the shards one at a time and keeps a running per-query
top-k, so peak memory depends on the shard size and k, not on the corpus size. Approximate indexes
(any other FAISS factory string, e.g. ``HNSW32`` or ``IVF1024,PQ48np``) are trained on a sample, filled
shard by shard, saved beside the embeddings and reused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.core.cache import CacheLayout
from harness.core.errors import HarnessError

log = logging.getLogger(__name__)

TRAINING_SAMPLE = 100_000


class ShardSource(Protocol):
    """What search needs from the embedding cache: dimension, size, and (ids, vectors) per shard."""

    dim: int
    num_docs: int
    directory: Path

    def shards(self) -> Iterator[tuple[list[str], np.ndarray]]: ...


@dataclass(frozen=True)
class IndexSpec:
    """A FAISS index factory string plus search-time parameters, e.g. ``HNSW32,efSearch=128``."""

    factory: str = "Flat"
    nprobe: int | None = None
    ef_search: int | None = None

    @property
    def exact(self) -> bool:
        return self.factory == "Flat"

    def describe(self) -> dict[str, object]:
        return {"factory": self.factory, "nprobe": self.nprobe, "efSearch": self.ef_search}


def parse_index_spec(spec: str, dim: int = 64) -> IndexSpec:
    """Parse ``FACTORY[,nprobe=N][,efSearch=N]`` and check FAISS accepts the factory string."""
    import faiss

    parts = [part.strip() for part in spec.split(",") if part.strip()]
    factory_parts: list[str] = []
    params: dict[str, int] = {}
    for part in parts:
        if "=" in part:
            key, _, value = part.partition("=")
            if key not in ("nprobe", "efSearch") or not value.isdigit():
                raise HarnessError(
                    f"index spec {spec!r}: unknown parameter {part!r} (use nprobe=N or efSearch=N)"
                )
            params[key] = int(value)
        else:
            factory_parts.append(part)
    factory = ",".join(factory_parts) or "Flat"
    # PQ needs the dimension to divide by the sub-quantizer count; check with a compatible dimension
    # here and again with the real one at build time.
    try:
        faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        first_line = str(error).strip().splitlines()[-1] if str(error).strip() else "rejected"
        raise HarnessError(
            f"FAISS rejects index spec {spec!r}: {first_line} (examples: Flat, HNSW32, IVF1024,PQ48np,nprobe=32)"
        ) from None
    return IndexSpec(factory=factory, nprobe=params.get("nprobe"), ef_search=params.get("efSearch"))


def _gpu_count() -> int:
    import faiss

    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def _prepare(vectors: np.ndarray, normalize: bool) -> np.ndarray:
    """Contiguous float32 for FAISS; a normalised copy (never touching the memory map) for cosine."""
    if not normalize:
        return np.ascontiguousarray(vectors, dtype=np.float32)
    array = np.array(vectors, dtype=np.float32, copy=True)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    np.divide(array, np.maximum(norms, 1e-12), out=array)
    return array


def _flat_index(dim: int):
    import faiss

    index = faiss.IndexFlatIP(dim)
    if _gpu_count() > 0:
        index = faiss.index_cpu_to_all_gpus(index)
    return index


def search_exact(
    queries: np.ndarray, embeddings: ShardSource, top_k: int, *, normalize: bool = False
) -> tuple[np.ndarray, list[list[str]]]:
    """Exact inner-product top-k over all shards: ``(scores [nq, k], doc ids per query)``."""
    import faiss

    queries = _prepare(queries, normalize)
    n_queries = queries.shape[0]
    k = min(top_k, embeddings.num_docs)
    # ResultHeap keeps the best k (largest inner product) per query across shard results.
    heap = faiss.ResultHeap(n_queries, k, keep_max=True)
    offset = 0
    on_gpu = _gpu_count() > 0
    for ids, vectors in embeddings.shards():
        shard = _prepare(vectors, normalize)
        # FAISS blocks the query x shard product internally, so one call per shard stays bounded.
        if on_gpu:
            index = _flat_index(embeddings.dim)
            index.add(shard)
            scores, positions = index.search(queries, min(k, len(ids)))
            del index
        else:
            # No index on CPU: FAISS reads the memory-mapped shard in place instead of copying it.
            scores, positions = faiss.knn(queries, shard, min(k, len(ids)), metric=faiss.METRIC_INNER_PRODUCT)
        heap.add_result(scores, np.where(positions >= 0, positions + offset, -1).astype(np.int64))
        offset += len(ids)
    heap.finalize()
    return heap.D, _positions_to_ids(heap.I, embeddings)


def _positions_to_ids(positions: np.ndarray, embeddings: ShardSource) -> list[list[str]]:
    """Doc ids of corpus positions (-1 -> ""), reading the shards' ids again rather than keeping every
    id of the corpus in memory while searching: only the ids of the hits are kept."""
    names = np.full(positions.shape, "", dtype=object)
    start = 0
    for ids, _ in embeddings.shards():
        inside = (positions >= start) & (positions < start + len(ids))
        if inside.any():
            names[inside] = np.asarray(ids, dtype=object)[positions[inside] - start]
        start += len(ids)
    return names.tolist()


def _training_sample(embeddings: ShardSource, size: int, normalize: bool, seed: int = 0) -> np.ndarray:
    """A uniform sample across shards, drawn shard by shard so the whole matrix is never in memory."""
    rng = np.random.default_rng(seed)
    fraction = min(1.0, size / max(1, embeddings.num_docs))
    parts = []
    for _, vectors in embeddings.shards():
        take = rng.random(len(vectors)) < fraction
        if take.any():
            parts.append(_prepare(vectors[take], normalize))
    return np.concatenate(parts) if parts else np.empty((0, embeddings.dim), dtype=np.float32)


def build_or_load_index(spec: IndexSpec, embeddings: ShardSource, *, normalize: bool = False):
    """An approximate index saved beside the embeddings; built once (train on a sample, add shard by shard)."""
    import faiss

    path = CacheLayout.faiss_index(embeddings.directory, spec.factory)
    if path.exists():
        log.info("reusing index %s", path)
        return faiss.read_index(str(path))
    try:
        index = faiss.index_factory(embeddings.dim, spec.factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        raise HarnessError(
            f"FAISS rejects index spec {spec.factory!r} at dimension {embeddings.dim}: {error}"
        ) from None
    if not index.is_trained:
        sample = _training_sample(embeddings, TRAINING_SAMPLE, normalize)
        index.train(sample)
    for _, vectors in embeddings.shards():
        index.add(_prepare(vectors, normalize))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, path)
    return index


def search_index(
    index, queries: np.ndarray, top_k: int, spec: IndexSpec, doc_ids: list[str], *, normalize: bool = False
) -> tuple[np.ndarray, list[list[str]]]:
    """Top-k from a built approximate index."""
    import faiss

    params = faiss.ParameterSpace()
    if spec.nprobe is not None:
        params.set_index_parameter(index, "nprobe", spec.nprobe)
    if spec.ef_search is not None:
        params.set_index_parameter(index, "efSearch", spec.ef_search)
    scores, positions = index.search(_prepare(queries, normalize), min(top_k, len(doc_ids)))
    names = [[doc_ids[p] if p >= 0 else "" for p in row] for row in positions]
    return scores, names


def all_doc_ids(embeddings: ShardSource) -> list[str]:
    ids: list[str] = []
    for shard_ids, _ in embeddings.shards():
        ids.extend(shard_ids)
    return ids


def to_run(
    query_ids: Iterable[str],
    scores: np.ndarray,
    doc_ids: list[list[str]],
    top_k: int,
    *,
    drop_identical_ids: bool,
) -> dict[str, dict[str, float]]:
    """Turn search output into a run, dropping empty slots and (when the dataset says so) doc == query hits."""
    run: dict[str, dict[str, float]] = {}
    for row, qid in enumerate(query_ids):
        hits: dict[str, float] = {}
        for doc_id, score in zip(doc_ids[row], scores[row], strict=True):
            if not doc_id or (drop_identical_ids and doc_id == qid):
                continue
            hits[doc_id] = float(score)
            if len(hits) == top_k:
                break
        run[qid] = hits
    return run


def dense_search(
    queries: np.ndarray,
    query_ids: list[str],
    embeddings: ShardSource,
    top_k: int,
    spec: IndexSpec,
    *,
    normalize: bool,
    drop_identical_ids: bool,
) -> dict[str, dict[str, float]]:
    """Search every query and return a run; one extra hit is fetched when identical ids are dropped."""
    fetch = top_k + 1 if drop_identical_ids else top_k
    if spec.exact:
        scores, names = search_exact(queries, embeddings, fetch, normalize=normalize)
    else:
        index = build_or_load_index(spec, embeddings, normalize=normalize)
        scores, names = search_index(
            index, queries, fetch, spec, all_doc_ids(embeddings), normalize=normalize
        )
    return to_run(query_ids, scores, names, top_k, drop_identical_ids=drop_identical_ids)
