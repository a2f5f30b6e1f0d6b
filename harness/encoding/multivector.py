"""Late-interaction (ColBERT) encoding: one vector per token, through sentence-transformers' ``MultiVectorEncoder``.

A ``kind: multivector`` record keeps every ColBERT setting in its ``params`` mapping (validated here by
``MultivectorParams``; ``vector_settings()`` already puts them in the cache key and the provenance)::

    params: {library: sentence-transformers, query_prefix: "[Q] ", document_prefix: "[D] ",
             query_length: 32, document_length: 180, do_query_expansion: true,
             attend_to_expansion_tokens: false, embedding_size: 128}

The model is loaded and run by the library itself (``MultiVectorEncoder`` reads PyLate and Stanford
ColBERT checkpoints); the record's settings are set on its Transformer module, so the record, not the
folder, decides the markers, lengths and mask-token query expansion.

Token vectors are cached like dense shards (``harness.encoding.embedding_cache``), one shard holding::

    shard-00000.npy          float32 (tokens, dim): every document's token matrix, concatenated
    shard-00000.offsets.npy  int64 (n + 1): document i is rows offsets[i]:offsets[i+1]
    shard-00000.json         {"index", "count", "dim", "tokens", "vectors", "offsets", "ids"} (written last)

both arrays written by ``save_array`` (size, sha256, shape, dtype checked on every read, no pickle). A
shard that fails its check is deleted and encoded again with a warning; it is never scored.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import PositiveInt, field_validator

from harness.core.artifacts import CorruptArtifact, load_array, save_array
from harness.core.cache import MANIFEST, CacheLayout, auto_shard_size, digest_of, finished_shards, shard_paths
from harness.core.config import Record, validate
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write_json, read_json_object
from harness.core.protocols import CorpusSource, TextDocument
from harness.models.model_registry import record_file

log = logging.getLogger(__name__)

TOKEN_CACHE_FORMAT = 1
LIBRARIES = ("sentence-transformers",)
_MARKER_FIX = (
    "a ColBERT model needs its query and document markers, e.g. query_prefix: '[Q] ', document_prefix: '[D] '"
)


class MultivectorParams(Record):
    """The ``params`` of a ``kind: multivector`` record (PyLate's ColBERT settings, by PyLate's names)."""

    library: Literal["sentence-transformers"] = "sentence-transformers"
    query_prefix: str
    document_prefix: str
    query_length: PositiveInt = 32
    document_length: PositiveInt = 180
    do_query_expansion: bool = True  # pad queries to query_length with [MASK] tokens (ColBERT's augmentation)
    attend_to_expansion_tokens: bool = False
    embedding_size: PositiveInt | None = None  # the projection's output size, checked against the model
    similarity: Literal["maxsim"] = "maxsim"

    @field_validator("query_prefix", "document_prefix")
    @classmethod
    def _marker_given(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(f"is empty; {_MARKER_FIX}")
        return value


def multivector_params(record: Any, source: str | Path | None = None) -> MultivectorParams:
    """The record's ``params`` as ``MultivectorParams``; a missing marker or bad key is one line naming
    the record file and the key."""
    where = source if source is not None else record_file(record)
    params = dict(record.params)
    if params.get("library") == "pylate":
        raise InputError(
            where,
            None,
            "params.library 'pylate': PyLate pins sentence-transformers 5.3 and cannot be installed beside "
            "this harness's sentence-transformers 6",
            "use library: sentence-transformers, whose MultiVectorEncoder loads PyLate checkpoints",
        )
    for key in ("query_prefix", "document_prefix"):
        if not params.get(key):
            raise InputError(where, None, f"multivector model {record.name} has no params.{key}", _MARKER_FIX)
    return validate(MultivectorParams, params, where, "params")


@dataclass(frozen=True)
class TokenMatrices:
    """Ragged per-text token matrices: text ``i`` is ``vectors[offsets[i]:offsets[i+1]]``."""

    vectors: np.ndarray  # (tokens, dim)
    offsets: np.ndarray  # int64 (n + 1,)

    @classmethod
    def from_list(cls, matrices: Sequence[np.ndarray], dim: int) -> TokenMatrices:
        lengths = np.array([len(matrix) for matrix in matrices], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        vectors = (
            np.concatenate([np.asarray(m, dtype=np.float32) for m in matrices])
            if len(matrices)
            else np.empty((0, dim), np.float32)
        )
        return cls(np.ascontiguousarray(vectors, dtype=np.float32), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def matrix(self, index: int) -> np.ndarray:
        return np.asarray(self.vectors[self.offsets[index] : self.offsets[index + 1]])

    def select(self, indices: Sequence[int]) -> TokenMatrices:
        return TokenMatrices.from_list([self.matrix(i) for i in indices], self.dim)


def model_positions(model: Any) -> int | None:
    """How many token positions the loaded model can take (None when its config does not say)."""
    transformer = model[0]
    config = getattr(getattr(transformer, "auto_model", None), "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    return positions if isinstance(positions, int) and positions > 0 else None


def check_token_budget(params: MultivectorParams, positions: int | None, name: str, where: str) -> None:
    """A query or document length longer than the model's position embeddings is one line."""
    if positions is None:
        return
    for key in ("query_length", "document_length"):
        value = getattr(params, key)
        if value > positions:
            raise InputError(
                where,
                None,
                f"params.{key} {value} is more tokens than model {name} can take ({positions} positions)",
                f"set {key} to at most {positions}",
            )


class TokenVectorEncoder:
    """A multivector record's model, loaded through sentence-transformers, encoding token matrices."""

    def __init__(self, model: Any, *, device: str = "cpu", batch_size: int = 32, source: str | None = None):
        self.model = model  # harness.models.resolve.ResolvedModel
        self.record = model.record
        if not self.record.is_multivector:
            raise HarnessError(f"model {self.record.name} is kind {self.record.kind}, not multivector")
        self.where = source if source is not None else record_file(self.record)
        self.params = multivector_params(self.record, self.where)
        self.device = device
        self.batch_size = batch_size
        self._dim: int | None = None

    @functools.cached_property
    def library_model(self) -> Any:
        """The ``MultiVectorEncoder``, with the record's markers, lengths and query expansion set on it."""
        from sentence_transformers import MultiVectorEncoder

        params = self.params
        model = MultiVectorEncoder(
            self.model.source,
            device=self.device,
            prompts={"query": params.query_prefix, "document": params.document_prefix},
            local_files_only=True,
            trust_remote_code=self.record.trust_remote_code,
        )
        check_token_budget(params, model_positions(model), self.record.name, self.where)
        transformer = model[0]
        transformer.query_expansion = None  # the lengths first: the expansion setter checks against them
        transformer.query_length = params.query_length
        transformer.document_length = params.document_length
        if params.do_query_expansion:
            transformer.query_expansion = {
                "strategy": "fixed",
                "attend": params.attend_to_expansion_tokens,
                "length": params.query_length,
            }
        return model

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.encode_queries(["a"])[0].shape[1])
            wanted = self.params.embedding_size
            if wanted is not None and wanted != self._dim:
                raise InputError(
                    self.where,
                    None,
                    f"params.embedding_size {wanted} but model {self.record.name} outputs {self._dim}-dim token vectors",
                    f"set embedding_size: {self._dim}",
                )
        return self._dim

    def document_text(self, doc: TextDocument) -> str:
        """Title and text joined as the dense encoders join them (the marker is added by the library)."""
        return f"{doc.title or ''}{self.record.title_join}{doc.text or ''}".strip()

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        return self._encode(list(texts), "query")

    def encode_documents(self, docs: Sequence[TextDocument]) -> list[np.ndarray]:
        return self._encode([self.document_text(doc) for doc in docs], "document")

    def _encode(self, texts: list[str], role: str) -> list[np.ndarray]:
        if not texts:
            return []
        model = self.library_model
        encode = model.encode_query if role == "query" else model.encode_document
        matrices = encode(texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False)
        return [np.asarray(matrix, dtype=np.float32) for matrix in matrices]

    def settings(self) -> dict[str, Any]:
        """What changes a token vector: the record's vector settings and the library's version."""
        import sentence_transformers

        return {
            **self.record.vector_settings(),
            "library": f"sentence-transformers {sentence_transformers.__version__}",
        }

    def describe(self) -> dict[str, Any]:
        return {
            "label": f"{self.record.name} (multivector, {self.params.library})",
            "class": "sentence_transformers.MultiVectorEncoder",
            "params": self.params.model_dump(),
            "device": self.device,
        }


# ---- the token shards ------------------------------------------------------------------------------


def offsets_path(directory: Path, index: int) -> Path:
    return shard_paths(directory, index)[0].with_suffix(".offsets.npy")


def write_token_shard(
    directory: Path, index: int, ids: list[str], matrices: TokenMatrices, seconds: float
) -> dict[str, Any]:
    """Write one finished shard: vectors and offsets first, then the ids file that marks it complete."""
    if len(matrices) != len(ids):
        raise ValueError(f"shard {index}: {len(ids)} ids but {len(matrices)} token matrices")
    vectors_path, ids_path = shard_paths(directory, index)
    vectors_record = save_array(vectors_path, matrices.vectors)
    offsets_record = save_array(offsets_path(directory, index), matrices.offsets)
    meta = {
        "index": index,
        "count": len(ids),
        "dim": matrices.dim,
        "tokens": int(matrices.offsets[-1]),
        "seconds": round(seconds, 3),
        "vectors": vectors_record,
        "offsets": offsets_record,
        "ids": ids,
    }
    atomic_write_json(ids_path, meta)
    return meta


def read_token_shard(
    directory: Path, index: int, *, fix: str, mmap: bool = True
) -> tuple[list[str], TokenMatrices]:
    """One shard's ids and token matrices, refused (``CorruptArtifact``) unless exactly as written."""
    vectors_path, ids_path = shard_paths(directory, index)
    try:
        meta = read_json_object(ids_path, fix=fix)
    except InputError as error:
        raise CorruptArtifact(ids_path, error.problem, fix) from None
    ids = meta.get("ids")
    if not isinstance(ids, list) or not isinstance(meta.get("vectors"), dict):
        raise CorruptArtifact(ids_path, "has no list of ids or no vectors record", fix)
    offsets = load_array(
        offsets_path(directory, index), meta.get("offsets"), shape=(len(ids) + 1,), dtype="int64", fix=fix
    )
    vectors = load_array(vectors_path, meta["vectors"], shape=(None, meta.get("dim")), mmap=mmap, fix=fix)
    if offsets[0] != 0 or offsets[-1] != len(vectors) or np.any(np.diff(offsets) < 0):
        raise CorruptArtifact(offsets_path(directory, index), "offsets do not index the vectors", fix)
    return ids, TokenMatrices(vectors, np.asarray(offsets))


def _remove_shard(directory: Path, index: int) -> None:
    for path in (*shard_paths(directory, index), offsets_path(directory, index)):
        path.unlink(missing_ok=True)


class ShardedTokenVectors:
    """A finished corpus entry of token matrices, read shard by shard (memory-mapped, checked)."""

    def __init__(self, directory: Path, manifest: dict[str, Any]):
        self.directory = Path(directory)
        self.manifest = manifest
        self.key: str = manifest["key"]
        self.num_docs: int = int(manifest["num_docs"])
        self.num_shards: int = int(manifest["num_shards"])
        self.dim: int = int(manifest["dim"])

    @property
    def fix(self) -> str:
        return f"`harness cache clear {self.key[:12]}` and rerun (the shard is encoded again)"

    def shards(self) -> Iterator[tuple[list[str], TokenMatrices]]:
        for index in range(self.num_shards):
            yield read_token_shard(self.directory, index, fix=self.fix)

    def doc_ids(self) -> list[str]:
        ids: list[str] = []
        for index in range(self.num_shards):
            meta = read_json_object(shard_paths(self.directory, index)[1], fix=self.fix)
            ids.extend(meta["ids"])
        return ids

    def total_tokens(self) -> int:
        return sum(int(matrices.offsets[-1]) for _, matrices in self.shards())


class TokenVectorCache:
    """Corpus and query token matrices on disk, keyed by the data checksums, model identity and settings."""

    def __init__(self, root: Path):
        self.layout = CacheLayout(Path(root))

    def key_inputs(
        self, dataset: Any, encoder: TokenVectorEncoder, part: str, shard_size: int
    ) -> dict[str, Any]:
        fingerprint = dataset.fingerprint()
        wanted = (
            (lambda name: name.startswith("corpus"))
            if part == "corpus"
            else (lambda name: not name.startswith("corpus"))
        )
        return {
            "format": TOKEN_CACHE_FORMAT,
            "kind": f"multivector-{part}",
            "split": None if part == "corpus" else getattr(dataset, "split", None),
            "files": {name: sha for name, sha in fingerprint.items() if wanted(name)},
            "model": encoder.model.identity,
            "settings": encoder.settings(),
            "shard_size": shard_size,
        }

    def corpus(
        self,
        dataset: CorpusSource,
        encoder: TokenVectorEncoder,
        *,
        shard_size: int | None = None,
        progress: bool = False,
    ) -> ShardedTokenVectors:
        """The corpus token matrices, encoding only shards not on disk (or failing their check)."""
        num_docs = int(dataset.num_docs)
        if num_docs == 0:
            raise HarnessError(f"dataset {dataset.name} has an empty corpus; nothing to encode")
        size = shard_size or auto_shard_size(num_docs)
        inputs = self.key_inputs(dataset, encoder, "corpus", size)
        key = digest_of(inputs)
        directory = self.layout.embeddings_entry(dataset.name, encoder.model.slug, "tokens-corpus", key)
        num_shards = math.ceil(num_docs / size)
        manifest = {
            "format": TOKEN_CACHE_FORMAT,
            "kind": "multivector-corpus",
            "key": key,
            "dataset": dataset.name,
            "model": encoder.model.slug,
            "key_inputs": inputs,
            "num_docs": num_docs,
            "shard_size": size,
            "num_shards": num_shards,
        }
        directory.mkdir(parents=True, exist_ok=True)
        done = set(finished_shards(directory, num_shards))
        fix = f"`harness cache clear {key[:12]}` and rerun"
        metas: dict[int, dict[str, Any]] = {}
        for index in sorted(done):
            try:
                ids, matrices = read_token_shard(directory, index, fix=fix)
                metas[index] = {"count": len(ids), "dim": matrices.dim, "tokens": int(matrices.offsets[-1])}
            except CorruptArtifact as error:
                log.warning(
                    "%s: %s; shard %d is encoded again (never scored)", error.path, error.problem, index
                )
                _remove_shard(directory, index)
        missing = [index for index in range(num_shards) if index not in metas]
        documents = iter(dataset.iter_documents() if missing else ())
        for index in range(num_shards if missing else 0):
            docs = list(itertools.islice(documents, size))
            if index not in missing:
                continue
            started = time.perf_counter()
            matrices = TokenMatrices.from_list(encoder.encode_documents(docs), encoder.dim)
            meta = write_token_shard(
                directory, index, [doc.id for doc in docs], matrices, time.perf_counter() - started
            )
            metas[index] = {"count": meta["count"], "dim": meta["dim"], "tokens": meta["tokens"]}
            if progress:
                log.info("encoded token shard %d/%d of %s", index + 1, num_shards, dataset.name)
        dims = {meta["dim"] for meta in metas.values()}
        count = sum(meta["count"] for meta in metas.values())
        if len(dims) != 1 or count != num_docs:
            raise HarnessError(f"{directory}: shards disagree (dims {sorted(dims)}, {count} docs); {fix}")
        manifest.update(dim=dims.pop(), tokens=sum(meta["tokens"] for meta in metas.values()), complete=True)
        atomic_write_json(directory / MANIFEST, manifest)
        return ShardedTokenVectors(directory, manifest)

    def queries(self, dataset: Any, encoder: TokenVectorEncoder) -> tuple[list[str], TokenMatrices]:
        """Query ids (dataset order) and their token matrices, encoded once per key."""
        inputs = self.key_inputs(dataset, encoder, "queries", 0)
        key = digest_of(inputs)
        directory = self.layout.embeddings_entry(dataset.name, encoder.model.slug, "tokens-queries", key)
        if finished_shards(directory, 1):
            try:
                ids, matrices = read_token_shard(
                    directory, 0, fix="the queries are encoded again", mmap=False
                )
                return ids, matrices
            except CorruptArtifact as error:  # queries are cheap: encode them again rather than stop
                log.warning("%s: %s; the queries are encoded again", error.path, error.problem)
                _remove_shard(directory, 0)
        ids = list(dataset.queries)
        started = time.perf_counter()
        matrices = TokenMatrices.from_list(
            encoder.encode_queries([dataset.queries[q] for q in ids]), encoder.dim
        )
        directory.mkdir(parents=True, exist_ok=True)
        write_token_shard(directory, 0, ids, matrices, time.perf_counter() - started)
        atomic_write_json(
            directory / MANIFEST, {"key": key, "kind": "multivector-queries", "key_inputs": inputs}
        )
        return ids, matrices
