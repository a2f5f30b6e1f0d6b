"""Learned sparse vectors (SPLADE, any sentence-transformers ``SparseEncoder``) and their cache.

A ``kind: sparse`` record is loaded through sentence-transformers' ``SparseEncoder`` itself (SPLADE's
max over log(1 + ReLU(MLM logits)) under the attention mask is its ``SpladePooling``; inference-free query
models route queries through ``SparseStaticEmbedding``), so the vectors are the library's. Every sparse
setting lives in the record's ``params`` mapping, checked by :class:`SparseParams`; ``params`` is part of
``ModelRecord.vector_settings()``, hence of the cache key and the provenance.

A corpus is cached as sparse shards beside the dense ones (same folder layout, same ``finished_shards``
rule: the ids file is written last)::

    shard-00000.npy           float32 values (nnz,)       -- the CSR data
    shard-00000.indices.npy   int32 vocabulary ids (nnz,)
    shard-00000.indptr.npy    int64 row starts (n + 1,)
    shard-00000.json          {"index", "count", "dim", "seconds", "ids", "arrays": {name: record}}

each array written with ``save_array`` (size, sha256, shape, dtype) and read back with ``load_array``. A
shard that fails its check is deleted and encoded again, with a warning: it is never scored.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import PositiveFloat, PositiveInt

from harness.core.artifacts import CorruptArtifact, load_array, save_array
from harness.core.cache import MANIFEST, CacheLayout, auto_shard_size, digest_of, shard_paths
from harness.core.config import Record, validate
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, read_json_object, read_json_or_none
from harness.core.protocols import CorpusSource, TextDocument
from harness.models.model_registry import ModelRecord, record_file

log = logging.getLogger(__name__)

SPARSE_CACHE_FORMAT = 1
# pyserini's SPLADE encoders (pyserini/encode/_splade.py, SpladeQueryEncoder / SpladeDocumentEncoder):
# ``round(weight / weight_range * quant_range)`` with weight_range 5 and quant_range 256.
PYSERINI_WEIGHT_RANGE = 5
PYSERINI_QUANT_RANGE = 256
ENCODE_CHUNK_DOCS = 4096  # documents read and encoded at once within a shard (texts held stay bounded)
_ARRAYS = ("values", "indices", "indptr")


class SparseParams(Record):
    """The sparse settings of a ``kind: sparse`` record (its ``params:`` mapping)."""

    query_encoder: str | None = None  # another SparseEncoder (hub id or folder) for the queries
    max_active_dims: PositiveInt | None = None  # keep the top-k weights of each vector (None: all)
    doc_max_length: PositiveInt | None = None  # None: the record's max_length
    query_max_length: PositiveInt | None = None  # None: the record's max_length
    inference_free_query: bool = False  # the model routes queries to a SparseStaticEmbedding (checked)
    pyserini_impacts: bool = False  # quantise weights to integer impacts as pyserini does
    doc_quantization_factor: PositiveFloat | None = (
        None  # documents: round(w * factor) instead (anserini's 100)
    )


def sparse_params(record: ModelRecord) -> SparseParams:
    """The record's sparse settings; a bad key is one line naming the record file and ``params.<key>``."""
    if not record.is_sparse:
        raise HarnessError(f"model {record.name} is kind {record.kind!r}, not sparse")
    try:
        return SparseParams.model_validate(record.params)
    except ValueError:  # located only when wrong: finding the file reads every record
        return validate(SparseParams, record.params, record_file(record), where="params")


# ---- sparse matrices ------------------------------------------------------------------------------


def to_csr(embeddings: Any, dim: int | None = None):
    """A torch (sparse or dense) ``(n, vocab)`` tensor as a scipy CSR matrix: float32 values, int32
    column indices in increasing order, explicit zeros dropped."""
    import scipy.sparse
    import torch

    tensor = embeddings.detach().cpu()
    if tensor.ndim == 1:
        tensor = tensor.unsqueeze(0)
    shape = (tensor.shape[0], dim or tensor.shape[1])
    if tensor.is_sparse:
        tensor = tensor.coalesce()
        rows, cols = tensor.indices().numpy()
        values = tensor.values().to(torch.float32).numpy()
        matrix = scipy.sparse.csr_matrix((values, (rows, cols)), shape=shape, dtype=np.float32)
    else:
        matrix = scipy.sparse.csr_matrix(tensor.to(torch.float32).numpy())
    return canonical_csr(matrix)


def canonical_csr(matrix):
    """``matrix`` as CSR with float32 data, int32 indices, sorted columns and no stored zeros."""
    import scipy.sparse

    matrix = scipy.sparse.csr_matrix(matrix, dtype=np.float32)
    matrix.eliminate_zeros()
    matrix.sort_indices()
    matrix.indices = matrix.indices.astype(np.int32, copy=False)
    return matrix


def quantize_impacts(matrix, scale: float):
    """Integer impacts ``round(w * scale)`` (Python's round: half to even, as numpy's), computed in
    float64 as pyserini does on Python floats; weights that round to 0 are dropped."""
    quantized = matrix.copy()
    quantized.data = np.round(matrix.data.astype(np.float64) * scale).astype(np.float32)
    return canonical_csr(quantized)


def pyserini_query_scale() -> float:
    return PYSERINI_QUANT_RANGE / PYSERINI_WEIGHT_RANGE


def active_dims(matrix) -> np.ndarray:
    """Non-zero weights per row."""
    return np.diff(matrix.indptr)


def sparsity_stats(queries, document_shards: Iterable[Any], vocab: int) -> dict[str, float]:
    """Active dimensions and sparsity ratio (mean per vector) of queries and corpus, and FLOPS as
    sentence-transformers' ``SparseInformationRetrievalEvaluator._calculate_avg_flops`` computes it: the
    dot product of the per-dimension fraction of queries and of documents with a non-zero weight there.
    """
    query_counts = np.bincount(queries.indices, minlength=vocab)
    doc_counts = np.zeros(vocab, dtype=np.int64)
    num_docs = doc_active = 0
    for matrix in document_shards:
        doc_counts += np.bincount(matrix.indices, minlength=vocab)
        num_docs += matrix.shape[0]
        doc_active += int(matrix.nnz)
    num_queries = queries.shape[0]
    query_mean = queries.nnz / num_queries if num_queries else 0.0
    doc_mean = doc_active / num_docs if num_docs else 0.0
    flops = _st_flops(query_counts, num_queries, doc_counts, num_docs)
    return {
        "query_active_dims": query_mean,
        "query_sparsity_ratio": 1.0 - query_mean / vocab,
        "corpus_active_dims": doc_mean,
        "corpus_sparsity_ratio": 1.0 - doc_mean / vocab,
        "avg_flops": flops,
    }


def _st_flops(query_counts: np.ndarray, num_queries: int, doc_counts: np.ndarray, num_docs: int) -> float:
    """sentence-transformers' float32 arithmetic (int32 count vectors divided by the counts, one
    ``torch.dot``), so the figure is theirs to the last bit rather than a float64 neighbour."""
    import torch

    if not num_queries or not num_docs:
        return 0.0
    queries = torch.from_numpy(query_counts.astype(np.int32)) / num_queries
    documents = torch.from_numpy(doc_counts.astype(np.int32)) / num_docs
    return float(torch.dot(queries, documents))


# ---- the encoder ----------------------------------------------------------------------------------


def _route_modules(model, route: str) -> list:
    """The modules that encode ``route`` (query or document): a Router's branch, else the whole model."""
    first = model[0]
    sub_modules = getattr(first, "sub_modules", None)
    if sub_modules is not None and route in sub_modules:
        return list(sub_modules[route])
    return list(model)


def _position_limit(modules: Sequence[Any]) -> int | None:
    """The model's max position embeddings (None when no module has a transformer config)."""
    for module in modules:
        for attribute in ("auto_model", "model"):
            config = getattr(getattr(module, attribute, None), "config", None)
            limit = getattr(config, "max_position_embeddings", None)
            if isinstance(limit, int):
                return limit
    return None


def _output_dimension(model, method: str) -> int:
    """The vectors' dimension (the vocabulary), from one encoded word: ``SpladePooling`` learns its
    dimension on the first forward pass, before which the model reports the backbone's hidden size."""
    return int(
        getattr(model, method)(["a"], convert_to_sparse_tensor=True, show_progress_bar=False).shape[-1]
    )


def _is_static(modules: Sequence[Any]) -> bool:
    return any(type(module).__name__ == "SparseStaticEmbedding" for module in modules)


@dataclass
class SparseTextEncoder:
    """A ``kind: sparse`` record's SparseEncoder(s): texts in, CSR matrices out (one row per text)."""

    record: ModelRecord
    identity: dict[str, Any]
    slug: str
    params: SparseParams
    document_model: Any  # sentence_transformers.SparseEncoder
    query_model: Any
    device: str = "cpu"
    batch_size: int = 32
    vocab: int = field(init=False)

    def __post_init__(self) -> None:
        self.vocab = _output_dimension(self.document_model, "encode_document")
        query_vocab = _output_dimension(self.query_model, "encode_query")
        if query_vocab != self.vocab:
            raise HarnessError(
                f"{record_file(self.record)}: params.query_encoder has {query_vocab} dimensions, the document "
                f"model {self.vocab}; both sides must share one vocabulary"
            )
        self._check_budget("document", self.document_model, self.doc_max_length, "doc_max_length")
        self._check_budget("query", self.query_model, self.query_max_length, "query_max_length")
        static = _is_static(_route_modules(self.query_model, "query"))
        if static != self.params.inference_free_query:
            said = "says" if self.params.inference_free_query else "does not say"
            raise HarnessError(
                f"{record_file(self.record)}: params.inference_free_query {said} so, but the model "
                f"{'has' if static else 'has no'} static (inference-free) query encoder; set it to "
                f"{str(static).lower()}"
            )

    @classmethod
    def load(cls, model, device: str = "cpu", *, batch_size: int = 32) -> SparseTextEncoder:
        """Load a resolved ``kind: sparse`` model (``harness.models.resolve.ResolvedModel``)."""
        from sentence_transformers import SparseEncoder

        record = model.record
        params = sparse_params(record)
        options = {"device": device, "trust_remote_code": record.trust_remote_code}
        documents = SparseEncoder(model.source or record.model_id, **options)
        queries = SparseEncoder(params.query_encoder, **options) if params.query_encoder else documents
        return cls(record, model.identity, model.slug, params, documents, queries, device, batch_size)

    @property
    def doc_max_length(self) -> int:
        return self.params.doc_max_length or self.record.max_length

    @property
    def query_max_length(self) -> int:
        return self.params.query_max_length or self.record.max_length

    def _check_budget(self, route: str, model, length: int, key: str) -> None:
        limit = _position_limit(_route_modules(model, route))
        if limit is not None and length > limit:
            raise HarnessError(
                f"{record_file(self.record)}: {route} max length {length} exceeds the model's "
                f"{limit} position embeddings; set params.{key} (or max_length) to at most {limit}"
            )

    def settings(self) -> dict[str, Any]:
        """Everything that changes a stored vector (cache key and provenance)."""
        return {
            **self.record.vector_settings(),
            "doc_max_length": self.doc_max_length,
            "query_max_length": self.query_max_length,
            "max_active_dims": self.params.max_active_dims,
            "query_encoder": self.params.query_encoder,
            "vocab": self.vocab,
        }

    def describe(self) -> dict[str, Any]:
        return {"label": f"{self.record.name} (sparse)", "device": self.device, "vocab": self.vocab}

    def document_text(self, doc: TextDocument) -> str:
        """``(title + join + text).strip()``, the dense encoder's (beir's) rule; the document prompt is
        passed to sentence-transformers as ``prompt``."""
        joined = f"{doc.title or ''}{self.record.title_join}{doc.text or ''}".strip()
        return joined

    def _encode(self, model, method: str, texts: list[str], route: str, length: int):
        if not texts:
            import scipy.sparse

            return scipy.sparse.csr_matrix((0, self.vocab), dtype=np.float32)
        for module in _route_modules(model, route):
            if hasattr(module, "max_seq_length"):
                module.max_seq_length = length
        prompt = self.record.prompt_settings()["query_prefix" if route == "query" else "doc_prefix"]
        extra = {"prompt": prompt} if prompt else {}
        embeddings = getattr(model, method)(
            texts,
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_sparse_tensor=True,
            save_to_cpu=True,
            max_active_dims=self.params.max_active_dims,
            **extra,
        )
        return to_csr(embeddings, self.vocab)

    def encode_queries(self, texts: Sequence[str]):
        """CSR ``(n, vocab)`` query vectors (``SparseEncoder.encode_query``)."""
        return self._encode(self.query_model, "encode_query", list(texts), "query", self.query_max_length)

    def encode_documents(self, docs: Sequence[TextDocument]):
        """CSR ``(n, vocab)`` document vectors (``SparseEncoder.encode_document``)."""
        texts = [self.document_text(doc) for doc in docs]
        return self._encode(self.document_model, "encode_document", texts, "document", self.doc_max_length)

    def scoring_vectors(self, queries, documents):
        """The vectors as scored: pyserini's integer impacts when ``pyserini_impacts`` is set."""
        if not self.params.pyserini_impacts:
            return queries, documents
        doc_scale = self.params.doc_quantization_factor or pyserini_query_scale()
        return quantize_impacts(queries, pyserini_query_scale()), (
            (ids, quantize_impacts(matrix, doc_scale)) for ids, matrix in documents
        )


# ---- sparse shards --------------------------------------------------------------------------------


def sparse_shard_files(directory: Path, index: int) -> dict[str, Path]:
    """The three arrays and the ids file of one sparse shard (values in the dense shard's .npy name)."""
    values, ids = shard_paths(directory, index)
    stem = values.with_suffix("")
    return {
        "values": values,
        "indices": stem.with_name(f"{stem.name}.indices.npy"),
        "indptr": stem.with_name(f"{stem.name}.indptr.npy"),
        "ids": ids,
    }


def write_sparse_shard(directory: Path, index: int, ids: list[str], matrix, seconds: float) -> dict[str, Any]:
    """Write one shard: the three arrays, then the ids file that marks it finished."""
    matrix = canonical_csr(matrix)
    if matrix.shape[0] != len(ids):
        raise ValueError(f"sparse shard {index}: {len(ids)} ids but {matrix.shape[0]} rows")
    files = sparse_shard_files(directory, index)
    arrays = {
        "values": matrix.data.astype(np.float32),
        "indices": matrix.indices.astype(np.int32),
        "indptr": matrix.indptr.astype(np.int64),
    }
    records = {name: save_array(files[name], array) for name, array in arrays.items()}
    meta = {
        "index": index,
        "count": len(ids),
        "dim": int(matrix.shape[1]),
        "nnz": int(matrix.nnz),
        "seconds": round(seconds, 3),
        "arrays": records,
        "ids": ids,
    }
    atomic_write_json(files["ids"], meta)
    return meta


def read_sparse_shard(directory: Path, index: int, dim: int, *, fix: str) -> tuple[list[str], Any]:
    """One shard's ids and CSR matrix, every array checked against its write-time record."""
    import scipy.sparse

    files = sparse_shard_files(directory, index)
    meta = read_json_object(files["ids"], fix=fix)
    ids, records = meta.get("ids"), meta.get("arrays")
    if not isinstance(ids, list) or not isinstance(records, dict):
        raise CorruptArtifact(files["ids"], "has no list of ids or array records", fix)
    dtypes = {"values": "float32", "indices": "int32", "indptr": "int64"}
    arrays = {
        name: load_array(files[name], records.get(name), shape=(None,), dtype=dtypes[name], fix=fix)
        for name in _ARRAYS
    }
    indptr = arrays["indptr"]
    if len(indptr) != len(ids) + 1 or indptr[-1] != len(arrays["values"]):
        raise CorruptArtifact(files["indptr"], "row starts disagree with the ids and values", fix)
    matrix = scipy.sparse.csr_matrix((arrays["values"], arrays["indices"], indptr), shape=(len(ids), dim))
    return ids, matrix


def remove_sparse_shard(directory: Path, index: int) -> None:
    for path in sparse_shard_files(directory, index).values():
        path.unlink(missing_ok=True)


@dataclass
class SparseCorpus:
    """A finished sparse corpus entry: its shards, checked and in memory (the vectors themselves)."""

    directory: Path
    key: str
    vocab: int
    shards: list[tuple[list[str], Any]]
    rebuilt: list[int] = field(default_factory=list)  # shards found corrupt and encoded again

    @property
    def num_docs(self) -> int:
        return sum(len(ids) for ids, _ in self.shards)

    def matrices(self) -> Iterator[Any]:
        return (matrix for _, matrix in self.shards)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class SparseCache:
    """Sparse corpus and query vectors on disk, keyed like the dense cache (data checksums, model
    identity, every vector setting)."""

    def __init__(self, root: Path):
        self.layout = CacheLayout(Path(root))

    def _key(
        self, dataset: CorpusSource, encoder: SparseTextEncoder, part: str, extra: dict
    ) -> tuple[str, dict]:
        inputs = {
            "format": SPARSE_CACHE_FORMAT,
            "kind": part,
            "model": encoder.identity,
            "settings": encoder.settings(),
            **extra,
        }
        return digest_of(inputs), inputs

    def corpus(
        self, dataset: CorpusSource, encoder: SparseTextEncoder, *, shard_size: int | None = None
    ) -> SparseCorpus:
        """The corpus vectors: shards on disk are read (and checked), missing or corrupt ones encoded."""
        num_docs = int(dataset.num_docs)
        if num_docs == 0:
            raise HarnessError(f"dataset {dataset.name} has an empty corpus; nothing to encode")
        shard_size = shard_size or auto_shard_size(num_docs)
        corpus_files = {name: sha for name, sha in dataset.fingerprint().items() if name.startswith("corpus")}
        key, inputs = self._key(
            dataset, encoder, "sparse-corpus", {"corpus": corpus_files, "shard_size": shard_size}
        )
        directory = self.layout.embeddings_entry(dataset.name, encoder.slug, "sparse-corpus", key)
        directory.mkdir(parents=True, exist_ok=True)
        num_shards = math.ceil(num_docs / shard_size)
        fix = "it is encoded again"
        shards: dict[int, tuple[list[str], Any]] = {}
        rebuilt: list[int] = []
        for index in range(num_shards):
            if not sparse_shard_files(directory, index)["ids"].is_file():
                continue
            try:
                shards[index] = read_sparse_shard(directory, index, encoder.vocab, fix=fix)
            except HarnessError as error:  # never scored: deleted, then encoded below like a missing one
                log.warning("%s", error)
                remove_sparse_shard(directory, index)
                rebuilt.append(index)
        missing = [index for index in range(num_shards) if index not in shards]
        for index, docs in _shard_documents(dataset, missing, shard_size):
            started = time.perf_counter()
            ids, matrix = _encode_shard(encoder, docs)
            write_sparse_shard(directory, index, ids, matrix, time.perf_counter() - started)
            shards[index] = read_sparse_shard(directory, index, encoder.vocab, fix=fix)
        ordered = [shards[index] for index in range(num_shards)]
        if sum(len(ids) for ids, _ in ordered) != num_docs:
            raise HarnessError(
                f"{directory}: shards hold another number of documents than the corpus; clear it"
            )
        manifest = {
            "format": SPARSE_CACHE_FORMAT,
            "kind": "sparse-corpus",
            "key": key,
            "dataset": dataset.name,
            "model": encoder.slug,
            "key_inputs": inputs,
            "num_docs": num_docs,
            "shard_size": shard_size,
            "num_shards": num_shards,
            "dim": encoder.vocab,
            "complete": True,
        }
        written = dict(read_json_or_none(directory / MANIFEST) or {})
        if written.pop("updated", None) is None or written != manifest or missing:
            atomic_write_json(directory / MANIFEST, {**manifest, "updated": _now()})
        return SparseCorpus(directory, key, encoder.vocab, ordered, rebuilt)

    def queries(self, dataset, encoder: SparseTextEncoder) -> tuple[list[str], Any]:
        """Query ids (dataset order) and their CSR vectors, encoded once per key."""
        files = {name: sha for name, sha in dataset.fingerprint().items() if not name.startswith("corpus")}
        key, _ = self._key(dataset, encoder, "sparse-queries", {"split": dataset.split, "files": files})
        directory = self.layout.embeddings_entry(dataset.name, encoder.slug, "sparse-queries", key)
        if sparse_shard_files(directory, 0)["ids"].is_file():
            try:
                return read_sparse_shard(directory, 0, encoder.vocab, fix="the queries are encoded again")
            except HarnessError as error:
                log.warning("%s", error)
                remove_sparse_shard(directory, 0)
        ids = list(dataset.queries)
        started = time.perf_counter()
        matrix = encoder.encode_queries([dataset.queries[query_id] for query_id in ids])
        directory.mkdir(parents=True, exist_ok=True)
        write_sparse_shard(directory, 0, ids, matrix, time.perf_counter() - started)
        return ids, canonical_csr(matrix)


def _shard_documents(
    dataset: CorpusSource, wanted: list[int], shard_size: int
) -> Iterator[tuple[int, Iterator]]:
    """``(index, documents)`` of each wanted shard, streaming the corpus once in file order."""
    if not wanted:
        return
    documents, chosen = iter(dataset.iter_documents()), set(wanted)
    for index in range(max(wanted) + 1):
        docs = itertools.islice(documents, shard_size)
        if index in chosen:
            yield index, docs
        else:
            for _ in docs:  # skip without holding them
                pass


def _encode_shard(encoder: SparseTextEncoder, docs: Iterator) -> tuple[list[str], Any]:
    import scipy.sparse

    ids: list[str] = []
    parts = []
    while chunk := list(itertools.islice(docs, ENCODE_CHUNK_DOCS)):
        parts.append(encoder.encode_documents(chunk))
        ids.extend(doc.id for doc in chunk)
    matrix = (
        scipy.sparse.vstack(parts, format="csr") if parts else scipy.sparse.csr_matrix((0, encoder.vocab))
    )
    return ids, canonical_csr(matrix)
