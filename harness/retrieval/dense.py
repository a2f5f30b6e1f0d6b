"""Dense search with FAISS over sharded, memory-mapped embeddings.

Exact search (the default, ``Flat``) walks the shards one at a time and keeps a running per-query
top-k, so peak memory depends on the shard size and k, not on the corpus size. Approximate indexes
(any other FAISS factory string, e.g. ``HNSW32`` or ``IVF1024,PQ48np``) are trained on a sample, filled
shard by shard, saved beside the embeddings and reused.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.core.cache import CacheLayout
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write

log = logging.getLogger(__name__)

TRAINING_SAMPLE = 100_000
_EXAMPLES = "examples: Flat, HNSW32,efSearch=128, IVF1024,PQ48np,nprobe=32"
# Factory numbers FAISS does not check itself: out of range it aborts or crashes the whole process
# (HNSW0: SIGABRT, HNSW1: SIGSEGV, PQ8x0: SIGFPE), so they are checked before FAISS sees them.
_FACTORY_RANGES = (
    (re.compile(r"HNSW(\d+)"), "HNSW's links per node M", 2, 512),
    (re.compile(r"IVF(\d+)"), "IVF's number of lists", 1, 1 << 24),
    (re.compile(r"PQ(\d+)"), "PQ's number of sub-quantizers", 1, 4096),
    (re.compile(r"PQ\d+x(\d+)"), "PQ's bits per code", 1, 16),
)
# Search parameters: FAISS takes C ints and silently returns nothing for 0 or an overflowed value.
_SEARCH_RANGES = {"nprobe": ("IVF", 1, 1 << 24), "efSearch": ("HNSW", 1, 100_000)}


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
    """Parse ``FACTORY[,nprobe=N][,efSearch=N]``; check every number's range and that FAISS accepts it."""
    import faiss

    parts = [part.strip() for part in spec.split(",") if part.strip()]
    factory_parts: list[str] = []
    params: dict[str, int] = {}
    for part in parts:
        if "=" in part:
            key, _, value = part.partition("=")
            if key not in _SEARCH_RANGES or not value.isdigit():
                raise HarnessError(
                    f"--index {spec!r}: unknown parameter {part!r} (use nprobe=N or efSearch=N; {_EXAMPLES})"
                )
            params[key] = int(value)
        else:
            factory_parts.append(part)
    factory = ",".join(factory_parts) or "Flat"
    _check_ranges(spec, factory, params)
    # PQ needs the dimension to divide by the sub-quantizer count; check with a compatible dimension
    # here and again with the real one at build time.
    try:
        faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        raise HarnessError(
            f"--index {spec!r}: FAISS rejects it: {_faiss_reason(error)} ({_EXAMPLES})"
        ) from None
    return IndexSpec(factory=factory, nprobe=params.get("nprobe"), ef_search=params.get("efSearch"))


def _check_ranges(spec: str, factory: str, params: dict[str, int]) -> None:
    for pattern, what, low, high in _FACTORY_RANGES:
        for match in pattern.finditer(factory):
            if not low <= int(match.group(1)) <= high:
                raise HarnessError(
                    f"--index {spec!r}: {what} must be from {low:,} to {high:,}, got {match.group(1)} ({_EXAMPLES})"
                )
    for key, value in params.items():
        family, low, high = _SEARCH_RANGES[key]
        if family not in factory:
            raise HarnessError(f"--index {spec!r}: {key} applies to {family} indexes only; remove it")
        if not low <= value <= high:
            raise HarnessError(f"--index {spec!r}: {key} must be from {low:,} to {high:,}, got {value:,}")


def _faiss_reason(error: RuntimeError) -> str:
    """The useful end of a FAISS error ("Error in <C++ signature> at <file>: Error: '<cond>' failed: why")."""
    text = " ".join(str(error).split()) or "rejected"
    for marker in ("failed: ", "Error: "):
        if marker in text:
            return text.rsplit(marker, 1)[1]
    return text


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
        index = _load_index(path, embeddings)
        _check_lists(spec, index, embeddings.num_docs)
        return index
    try:
        index = faiss.index_factory(embeddings.dim, spec.factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        raise HarnessError(
            f"--index {spec.factory!r}: FAISS rejects it at dimension {embeddings.dim}: {_faiss_reason(error)}"
        ) from None
    _check_lists(spec, index, embeddings.num_docs)
    try:
        if not index.is_trained:
            index.train(_training_sample(embeddings, TRAINING_SAMPLE, normalize))
        for _, vectors in embeddings.shards():
            index.add(_prepare(vectors, normalize))
    except RuntimeError as error:
        raise HarnessError(
            f"--index {spec.factory!r}: FAISS cannot build it over {embeddings.num_docs:,} documents: "
            f"{_faiss_reason(error)} (choose smaller parameters, or Flat)"
        ) from None
    # Streamed through atomic_write (no copy of the index in memory): a full disk is the one output
    # error, and a killed run never leaves a half-written index under the final name.
    with atomic_write(path, "wb") as handle:
        faiss.write_index(index, faiss.PyCallbackIOWriter(handle.write))
    return index


def _check_lists(spec: IndexSpec, index, num_docs: int) -> None:
    """An IVF index needs a training point per list, and nprobe can visit at most every list."""
    import faiss

    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return
    if num_docs < ivf.nlist:
        raise HarnessError(
            f"--index {spec.factory!r}: {ivf.nlist:,} lists need at least {ivf.nlist:,} documents to train, the "
            f"corpus has {num_docs:,} (use fewer lists, about 4*sqrt(documents), or Flat)"
        )
    if spec.nprobe is not None and spec.nprobe > ivf.nlist:
        raise HarnessError(
            f"--index {spec.factory!r}: nprobe={spec.nprobe:,} exceeds the index's {ivf.nlist:,} lists "
            f"(use nprobe=1..{ivf.nlist})"
        )


def _load_index(path: Path, embeddings: ShardSource):
    """A saved index, checked to read whole and to hold this corpus's vectors."""
    import faiss

    fix = f"delete {path} and rerun to rebuild it"
    try:
        index = faiss.read_index(str(path))
    except RuntimeError as error:
        raise HarnessError(f"{path}: unreadable FAISS index ({_faiss_reason(error)}); {fix}") from None
    if index.ntotal != embeddings.num_docs or index.d != embeddings.dim:
        raise HarnessError(
            f"{path}: holds {index.ntotal:,} vectors of dimension {index.d}, the embeddings "
            f"{embeddings.num_docs:,} of dimension {embeddings.dim}; {fix}"
        )
    return index


def search_index(
    index, queries: np.ndarray, top_k: int, spec: IndexSpec, doc_ids: list[str], *, normalize: bool = False
) -> tuple[np.ndarray, list[list[str]]]:
    """Top-k from a built approximate index."""
    import faiss

    params = faiss.ParameterSpace()
    try:
        if spec.nprobe is not None:
            params.set_index_parameter(index, "nprobe", spec.nprobe)
        if spec.ef_search is not None:
            params.set_index_parameter(index, "efSearch", spec.ef_search)
        scores, positions = index.search(_prepare(queries, normalize), min(top_k, len(doc_ids)))
    except RuntimeError as error:
        raise HarnessError(f"--index {spec.factory!r}: FAISS search failed: {_faiss_reason(error)}") from None
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
