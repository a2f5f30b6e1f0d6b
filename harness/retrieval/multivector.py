"""Late-interaction (ColBERT) retrieval: exact MaxSim over token shards, MaxSim re-ranking, PLAID when asked.

MaxSim(q, d) = sum over the query's token vectors of the largest dot product with any of the document's
token vectors (ColBERT; PyLate's ``colbert_scores``; sentence-transformers' ``maxsim``). Exact search
walks the corpus shard by shard and, inside a shard, scores documents in chunks whose query-token x
document-token product stays under ``chunk_elements`` floats; a running top-k per query is merged after
every shard, so memory depends on the shard size, the chunk budget and k, never on the corpus size.
Ties are broken as trec_eval breaks them (score descending, then document id descending).

``--index plaid[,nbits=N][,kmeans_niters=N][,n_ivf_probe=N][,n_full_scores=N][,recall_sample=N]``
searches a fast-plaid (PyLate's PLAID) index instead, and records its settings and its recall@k
against the exact ranking on a seeded sample of queries.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import HarnessError
from harness.core.ranking import Run, sorted_ranking
from harness.encoding.multivector import (
    ShardedTokenVectors,
    TokenMatrices,
    TokenVectorCache,
    TokenVectorEncoder,
)
from harness.retrieval.dense import to_run
from harness.retrieval.settings import RetrievalSettings

log = logging.getLogger(__name__)

DEFAULT_CHUNK_ELEMENTS = 1 << 24  # query tokens x document tokens scored at once: 64 MB of float32
EXACT_INDEXES = ("Flat", "exact")
_PLAID_KEYS = {
    "nbits": (1, 8),
    "kmeans_niters": (1, 100),
    "n_ivf_probe": (1, 1 << 16),
    "n_full_scores": (1, 1 << 20),
    "recall_sample": (1, 1 << 20),
}
_PLAID_EXAMPLE = "plaid,nbits=4,n_ivf_probe=8,n_full_scores=4096,recall_sample=100"


# ---- MaxSim ------------------------------------------------------------------------------------------


def maxsim_scores(queries: TokenMatrices, documents: TokenMatrices) -> np.ndarray:
    """MaxSim of every query against every document: float32 ``(n_queries, n_documents)``.

    A text with no token vectors scores 0 (ColBERT encodes at least its markers, so none is empty).
    """
    scores = np.zeros((len(queries), len(documents)), dtype=np.float32)
    doc_kept = np.flatnonzero(documents.lengths > 0)
    query_kept = np.flatnonzero(queries.lengths > 0)
    if not len(doc_kept) or not len(query_kept):
        return scores
    similarities = (
        np.asarray(queries.vectors, dtype=np.float32) @ np.asarray(documents.vectors, dtype=np.float32).T
    )
    per_document = np.maximum.reduceat(similarities, documents.offsets[doc_kept], axis=1)
    summed = np.add.reduceat(per_document, queries.offsets[query_kept], axis=0)
    scores[np.ix_(query_kept, doc_kept)] = summed
    return scores


def _query_blocks(
    queries: TokenMatrices, budget: int, widest_document: int, documents: int
) -> list[np.ndarray]:
    """Query index blocks whose token count times the widest document, and whose query count times the
    shard's documents (the block's score matrix), stay within ``budget``."""
    blocks, start, tokens = [], 0, 0
    lengths = queries.lengths
    limit = max(1, budget // max(1, widest_document))
    most = max(1, budget // max(1, documents))
    for index, length in enumerate(lengths):
        if tokens and (tokens + length > limit or index - start >= most):
            blocks.append(np.arange(start, index))
            start, tokens = index, 0
        tokens += int(length)
    blocks.append(np.arange(start, len(lengths)))
    return blocks


def _document_chunks(documents: TokenMatrices, token_limit: int) -> list[tuple[int, int]]:
    """``(first, end)`` document ranges of at most ``token_limit`` tokens each (one document at least)."""
    chunks, first = [], 0
    offsets = documents.offsets
    while first < len(documents):
        end = int(np.searchsorted(offsets, offsets[first] + token_limit, side="right")) - 1
        end = max(end, first + 1)
        chunks.append((first, min(end, len(documents))))
        first = chunks[-1][1]
    return chunks


def _slice(documents: TokenMatrices, first: int, end: int) -> TokenMatrices:
    offsets = documents.offsets[first : end + 1]
    vectors = documents.vectors[offsets[0] : offsets[-1]]
    return TokenMatrices(vectors, offsets - offsets[0])


def shard_scores(
    queries: TokenMatrices, block: np.ndarray, documents: TokenMatrices, budget: int
) -> np.ndarray:
    """MaxSim of the queries in ``block`` against one shard, chunk by chunk within ``budget`` floats."""
    selected = queries.select(block.tolist())
    query_tokens = max(1, int(selected.offsets[-1]))
    token_limit = max(1, budget // query_tokens)
    scores = np.empty((len(block), len(documents)), dtype=np.float32)
    for first, end in _document_chunks(documents, token_limit):
        scores[:, first:end] = maxsim_scores(selected, _slice(documents, first, end))
    return scores


@dataclass
class RunningTopK:
    """The best ``k`` documents per query so far, in trec_eval order (score desc, then doc id desc).

    Slots not yet filled hold score -inf and position -1; they sort below every real document.
    """

    n_queries: int
    k: int
    scores: np.ndarray = field(init=False)
    positions: np.ndarray = field(init=False)
    ranks: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.scores = np.full((self.n_queries, self.k), -np.inf, dtype=np.float32)
        self.positions = np.full((self.n_queries, self.k), -1, dtype=np.int64)
        self.ranks = np.full((self.n_queries, self.k), -1, dtype=np.int64)

    def add(self, rows: np.ndarray, scores: np.ndarray, positions: np.ndarray, ranks: np.ndarray) -> None:
        """Merge the scores of the query ``rows`` against documents at corpus ``positions`` (id ``ranks``)."""
        count = len(rows)
        merged_scores = np.concatenate([self.scores[rows], scores], axis=1)
        merged_positions = np.concatenate(
            [self.positions[rows], np.broadcast_to(positions, (count, len(positions)))], axis=1
        )
        merged_ranks = np.concatenate([self.ranks[rows], np.broadcast_to(ranks, (count, len(ranks)))], axis=1)
        order = np.lexsort((merged_ranks, merged_scores), axis=1)[:, ::-1][:, : self.k]
        self.scores[rows] = np.take_along_axis(merged_scores, order, axis=1)
        self.positions[rows] = np.take_along_axis(merged_positions, order, axis=1)
        self.ranks[rows] = np.take_along_axis(merged_ranks, order, axis=1)


def id_ranks(doc_ids: Sequence[str]) -> np.ndarray:
    """Each document's position in string order of the ids (trec_eval's tie order: larger id first)."""
    ranks = np.empty(len(doc_ids), dtype=np.int64)
    ranks[np.argsort(np.array(doc_ids), kind="stable")] = np.arange(len(doc_ids))
    return ranks


def exact_search(
    queries: TokenMatrices,
    corpus: ShardedTokenVectors,
    top_k: int,
    *,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> tuple[np.ndarray, list[list[str]]]:
    """Exact MaxSim top-k over every shard: ``(scores [nq, k], doc ids per query)``."""
    doc_ids = corpus.doc_ids()
    ranks = id_ranks(doc_ids)
    k = min(top_k, len(doc_ids))
    best = RunningTopK(len(queries), k)
    start = 0
    for ids, documents in corpus.shards():
        widest = int(documents.lengths.max()) if len(documents) else 1
        positions = np.arange(start, start + len(ids))
        for block in _query_blocks(queries, chunk_elements, widest, len(ids)):
            best.add(
                block, shard_scores(queries, block, documents, chunk_elements), positions, ranks[positions]
            )
        start += len(ids)
    names = (
        np.asarray(doc_ids, dtype=object)[best.positions].tolist() if k else [[] for _ in range(len(queries))]
    )
    return best.scores, names


# ---- MaxSim re-ranking of a first-stage run ---------------------------------------------------------


def token_matrices_for(corpus: ShardedTokenVectors, doc_ids: set[str]) -> dict[str, np.ndarray]:
    """``doc id -> token matrix`` (a copy in memory) of the wanted documents, one pass over the shards."""
    found: dict[str, np.ndarray] = {}
    for ids, documents in corpus.shards():
        for index, doc_id in enumerate(ids):
            if doc_id in doc_ids:
                found[doc_id] = np.array(documents.matrix(index))
    missing = doc_ids - found.keys()
    if missing:
        raise HarnessError(
            f"the first-stage run ranks {len(missing)} document(s) not in the corpus (e.g. {sorted(missing)[0]!r}); "
            "re-rank a run of this dataset"
        )
    return found


def maxsim_rerank(
    run: Run, depth: int, query_matrices: Mapping[str, np.ndarray], documents: Mapping[str, np.ndarray]
) -> Run:
    """``run`` with each query's top ``depth`` (trec_eval order) re-scored by MaxSim; documents below the
    depth keep their first-stage order underneath (the k-th of them scores ``lowest MaxSim - 1 - k``),
    as the cross-encoder re-ranker (``harness.retrieval.rerank``) leaves them."""
    if depth <= 0:
        raise HarnessError(f"re-rank depth must be at least 1, got {depth}")
    reranked: Run = {}
    for qid, docs in run.items():
        ranking = sorted_ranking(docs)
        head_ids = [doc_id for doc_id, _ in ranking[:depth]]
        query = TokenMatrices.from_list([query_matrices[qid]], query_matrices[qid].shape[1])
        heads = TokenMatrices.from_list([documents[doc_id] for doc_id in head_ids], query.dim)
        scores = maxsim_scores(query, heads)[0] if head_ids else np.zeros(0, np.float32)
        head = {doc_id: float(score) for doc_id, score in zip(head_ids, scores, strict=True)}
        floor = min(head.values(), default=0.0) - 1.0
        tail = {doc_id: floor - offset for offset, (doc_id, _) in enumerate(ranking[depth:])}
        reranked[qid] = {**head, **tail}
    return reranked


# ---- PLAID (fast-plaid) when asked -------------------------------------------------------------------


@dataclass(frozen=True)
class MultivectorIndexSpec:
    """Exact MaxSim (``Flat``), or a PLAID index with its build and search settings."""

    kind: str = "exact"  # exact | plaid
    nbits: int = 4
    kmeans_niters: int = 4
    n_ivf_probe: int = 8
    n_full_scores: int = 4096
    recall_sample: int = 100

    @property
    def exact(self) -> bool:
        return self.kind == "exact"

    def describe(self) -> dict[str, Any]:
        return {"kind": "exact"} if self.exact else {"library": "fast-plaid", **asdict(self)}


def parse_multivector_index(spec: str | None) -> MultivectorIndexSpec:
    """``--index`` for a multivector model: Flat (exact MaxSim) or ``plaid[,key=N...]``; else one line."""
    text = (spec or "Flat").strip()
    if text in EXACT_INDEXES:
        return MultivectorIndexSpec()
    head, *parts = [part.strip() for part in text.split(",")]
    if head != "plaid":
        raise HarnessError(
            f"--index {text!r} is not an index for a multivector model: use Flat (exact MaxSim) or plaid (e.g. {_PLAID_EXAMPLE})"
        )
    values: dict[str, int] = {}
    for part in parts:
        key, _, value = part.partition("=")
        if key not in _PLAID_KEYS or not re.fullmatch(r"\d+", value):
            raise HarnessError(
                f"--index {text!r}: unknown parameter {part!r} (use {', '.join(f'{k}=N' for k in _PLAID_KEYS)}; e.g. {_PLAID_EXAMPLE})"
            )
        low, high = _PLAID_KEYS[key]
        if not low <= int(value) <= high:
            raise HarnessError(f"--index {text!r}: {key} must be from {low:,} to {high:,}, got {value}")
        values[key] = int(value)
    return MultivectorIndexSpec(kind="plaid", **values)


def fast_plaid_torch_version(version: str) -> str | None:
    """The torch version a fast-plaid wheel is built for, from its version's last part
    (``1.7.0.2110`` -> ``2.11.0``, ``1.4.6.271`` -> ``2.7.1``); None when it names none."""
    parts = version.split(".")
    build = parts[-1] if len(parts) == 4 else ""
    if not re.fullmatch(r"\d{3,4}", build):
        return None
    return f"{build[0]}.{build[1:-1]}.{build[-1]}"


def check_fast_plaid() -> None:
    """fast-plaid is installed and built for this torch (a mismatched build crashes the process, so it
    is refused before it is imported); else one line saying what to install."""
    import torch

    try:
        version = importlib.metadata.version("fast-plaid")
    except importlib.metadata.PackageNotFoundError:
        raise HarnessError(
            "--index plaid needs fast-plaid: `pip install fast-plaid` (or use --index Flat)"
        ) from None
    wanted = fast_plaid_torch_version(version)
    have = torch.__version__.split("+")[0]
    if wanted is not None and wanted != have:
        raise HarnessError(
            f"--index plaid: fast-plaid {version} is built for torch {wanted}, this environment has torch {have} "
            f"(it would crash); install the fast-plaid build for torch {have}, or use --index Flat"
        )


def plaid_search(
    spec: MultivectorIndexSpec,
    queries: TokenMatrices,
    corpus: ShardedTokenVectors,
    top_k: int,
    directory: Path,
) -> tuple[np.ndarray, list[list[str]]]:
    """Top-k from a fast-plaid index built once beside the token shards."""
    check_fast_plaid()
    import torch
    from fast_plaid import search

    doc_ids = corpus.doc_ids()
    index = search.FastPlaid(index=str(directory), device="cpu")
    if not (directory / "metadata.json").is_file():
        documents = [
            torch.from_numpy(np.array(m.matrix(i))) for _, m in corpus.shards() for i in range(len(m))
        ]
        index.create(documents_embeddings=documents, kmeans_niters=spec.kmeans_niters, nbits=spec.nbits)
    padded = [torch.from_numpy(queries.matrix(i)) for i in range(len(queries))]
    results = index.search(
        queries_embeddings=torch.nn.utils.rnn.pad_sequence(padded, batch_first=True),
        top_k=min(top_k, len(doc_ids)),
        n_ivf_probe=spec.n_ivf_probe,
        n_full_scores=spec.n_full_scores,
    )
    scores = np.array([[score for _, score in hits] for hits in results], dtype=np.float32)
    names = [[doc_ids[position] for position, _ in hits] for hits in results]
    return scores, names


def recall_against_exact(exact: Run, approximate: Run, k: int) -> float:
    """Mean over the queries of |approximate top-k ∩ exact top-k| / |exact top-k| (both in trec order)."""
    values = []
    for qid, docs in exact.items():
        truth = {doc_id for doc_id, _ in sorted_ranking(docs)[:k]}
        if not truth:
            continue
        found = {doc_id for doc_id, _ in sorted_ranking(approximate.get(qid, {}))[:k]}
        values.append(len(truth & found) / len(truth))
    return float(np.mean(values)) if values else float("nan")


def query_sample(query_ids: Sequence[str], size: int, seed: int = 0) -> list[int]:
    """A seeded sample of query positions (all of them when there are fewer), in dataset order."""
    if size >= len(query_ids):
        return list(range(len(query_ids)))
    rng = np.random.default_rng(seed)
    return sorted(rng.choice(len(query_ids), size=size, replace=False).tolist())


# ---- the retriever harness eval runs ---------------------------------------------------------------


@dataclass(frozen=True)
class MultivectorSettings:
    """How a multivector model ranks: depth, index, identical-id rule, cache, encoder and memory knobs."""

    cache_dir: Path
    top_k: int = RetrievalSettings.top_k
    index: str = RetrievalSettings.index
    drop_identical_ids: bool = False
    device: str = "cpu"
    batch_size: int = 32
    shard_size: int | None = None
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS
    recall_ks: tuple[int, ...] = (10, 100)


class MultivectorRetriever:
    """Encodes (or finds cached) token matrices of a dataset and ranks every query by MaxSim."""

    def __init__(self, dataset: Any, model: Any, settings: MultivectorSettings):
        self.dataset = dataset
        self.model = model  # harness.models.resolve.ResolvedModel of a kind: multivector record
        self.settings = settings
        self.index = parse_multivector_index(settings.index)
        if not self.index.exact:
            check_fast_plaid()  # before any encoding: a missing or mismatched build is one line now
        self.encoder = TokenVectorEncoder(model, device=settings.device, batch_size=settings.batch_size)
        self.cache = TokenVectorCache(settings.cache_dir)
        self.timings: dict[str, float] = {}

    def corpus(self) -> ShardedTokenVectors:
        return self.cache.corpus(self.dataset, self.encoder, shard_size=self.settings.shard_size)

    def retrieve(self) -> tuple[Run, dict[str, Any]]:
        """The run and what provenance records about it (encoder, cache entry, index and its recall)."""
        settings = self.settings
        started = time.perf_counter()
        corpus = self.corpus()
        query_ids, queries = self.cache.queries(self.dataset, self.encoder)
        self.timings["encode"] = time.perf_counter() - started
        fetch = settings.top_k + 1 if settings.drop_identical_ids else settings.top_k
        started = time.perf_counter()
        index_details = self.index.describe()
        if self.index.exact:
            scores, names = exact_search(queries, corpus, fetch, chunk_elements=settings.chunk_elements)
        else:
            scores, names = plaid_search(self.index, queries, corpus, fetch, corpus.directory / "plaid")
            index_details["recall_vs_exact"] = self._recall(query_ids, queries, corpus, scores, names, fetch)
        self.timings["search"] = time.perf_counter() - started
        run = to_run(query_ids, scores, names, settings.top_k, drop_identical_ids=settings.drop_identical_ids)
        details = {
            "encoder_settings": self.encoder.settings(),
            "encoder": self.encoder.describe(),
            "token_cache": {"corpus_key": corpus.key, "directory": str(corpus.directory), "dim": corpus.dim},
            "index": index_details,
            "scoring": "exact MaxSim (sum over query tokens of the max dot product over document tokens)",
        }
        return run, details

    def _recall(self, query_ids, queries, corpus, scores, names, fetch) -> dict[str, Any]:
        """Recall@k of the index against exact MaxSim on a seeded query sample."""
        sample = query_sample(query_ids, self.index.recall_sample)
        chosen = queries.select(sample)
        exact_scores, exact_names = exact_search(
            chosen, corpus, fetch, chunk_elements=self.settings.chunk_elements
        )
        sample_ids = [query_ids[i] for i in sample]
        exact = to_run(sample_ids, exact_scores, exact_names, fetch, drop_identical_ids=False)
        approximate = to_run(
            sample_ids, scores[sample], [names[i] for i in sample], fetch, drop_identical_ids=False
        )
        return {
            "queries": len(sample),
            "seed": 0,
            **{f"recall@{k}": recall_against_exact(exact, approximate, k) for k in self.settings.recall_ks},
        }

    def rerank(self, run: Run, depth: int) -> tuple[Run, dict[str, Any]]:
        """``run`` (any first stage: ``bm25 >> colbert``) with each query's top ``depth`` re-scored by MaxSim."""
        corpus = self.corpus()
        query_ids, queries = self.cache.queries(self.dataset, self.encoder)
        matrices = {qid: queries.matrix(i) for i, qid in enumerate(query_ids) if qid in run}
        heads = {doc_id for docs in run.values() for doc_id, _ in sorted_ranking(docs)[:depth]}
        reranked = maxsim_rerank(run, depth, matrices, token_matrices_for(corpus, heads))
        details = {
            "encoder_settings": self.encoder.settings(),
            "encoder": self.encoder.describe(),
            "depth": depth,
            "below_depth": "first-stage order, under the re-ranked block",
            "token_cache": {"corpus_key": corpus.key, "directory": str(corpus.directory)},
        }
        return reranked, details
