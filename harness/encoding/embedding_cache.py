"""The embedding cache: never encode the same corpus (or query set) twice.

An entry is a folder under ``<cache>/embeddings/`` named after the dataset, the model and the first
characters of its key. The key is a sha256 over everything that can change a vector: the data file
checksums, the model's identity (id, revision, weight hashes) and the encoder's settings.

A corpus is stored as independent shards, shard ``i`` holding documents ``[i*S, (i+1)*S)`` in file
order::

    shard-00000.npy    float32 (n, dim), read back memory-mapped
    shard-00000.json   {"index", "count", "dim", "seconds", "ids": [...]}  (written last: "finished")
    manifest.json      key inputs, counts, finished shards, encode seconds

Each file is written atomically (temporary file + rename), so a killed run leaves only whole shards
behind and the next run encodes just the missing ones. ``encode_corpus_shards`` writes any subset of
shards and nothing else, so several processes or Ray workers can fill one entry side by side.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import itertools
import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.artifacts import CorruptArtifact, load_array, save_array
from harness.core.cache import (
    LEGACY_SHARD_DOCS,
    MANIFEST,
    CacheLayout,
    auto_shard_size,
    digest_of,
    finished_shards,
    shard_paths,
)
from harness.core.errors import HarnessError, OutputError
from harness.core.fileio import atomic_write_json, read_json_object, read_json_or_none
from harness.core.protocols import CorpusSource, DocumentEncoder, Progress

log = logging.getLogger(__name__)

CACHE_FORMAT = 1


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, fix="`harness cache clear` frees it")


# ---- writing into the cache: a full device is said as such, and leaves nothing half-written ------------

# Documents read and encoded at once within a shard: the texts held (and the tokenizer's window over
# them) stay this size however large the shard; 4,096 scifact-length texts are ~6 MB.
ENCODE_CHUNK_DOCS = 4096
_NPY_HEADER = 128  # bytes numpy writes before a 2-D float32 array's data
_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_SLACK = 1 << 20  # block rounding and metadata: a write this close to the free space may fail for lack of it


def _free_bytes(folder: Path) -> int | None:
    """Free bytes on the device holding ``folder`` (or its nearest existing parent); None when unknown."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def _amount(count: int) -> str:
    return (
        f"{count / 1e6:,.1f} MB"
        if count >= 1e6
        else f"{count / 1e3:.1f} kB"
        if count >= 1e3
        else f"{count} bytes"
    )


@contextlib.contextmanager
def _writing_to_cache(path: Path, needed: int) -> Iterator[None]:
    """Turn a failed cache write whose cause is a full device into one line that says so.

    A write error names no errno when a library's own writer stops short (numpy: "12000 requested and
    8160 written"), so a write that failed for lack of space, or for a reason unknown, while the device
    holds less than ``needed`` (plus slack), is reported as the full device it is.
    """
    try:
        yield
    except OutputError as error:
        cause = error.__context__
        code = cause.errno if isinstance(cause, OSError) else None
        free = _free_bytes(path.parent)
        if (code is None or code in _SPACE_ERRNOS) and free is not None and free < needed + _SLACK:
            raise OutputError(
                f"cannot write {path}: no space left on the device holding {path.parent} "
                f"({_amount(needed)} needed, {_amount(free)} free); free space there, or point --cache-dir "
                "(env HARNESS_CACHE_DIR) at a disk with room, and rerun (finished shards are kept and resume)"
            ) from None
        raise


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    """A cache JSON file, written atomically (a full device named as such)."""
    with _writing_to_cache(path, len(json.dumps(payload, indent=2, ensure_ascii=False).encode("utf-8"))):
        atomic_write_json(path, payload)


def write_shard(
    directory: Path, index: int, ids: list[str], vectors: np.ndarray, seconds: float
) -> dict[str, Any]:
    """Write one finished shard: vectors first, then the ids file that marks it complete.

    When either write fails (a full disk, say), neither file stays: the shard is simply missing, and
    the next run encodes it again.
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(ids):
        raise ValueError(f"shard {index}: {len(ids)} ids but vectors of shape {vectors.shape}")
    vectors_path, ids_path = shard_paths(directory, index)
    with _writing_to_cache(vectors_path, vectors.nbytes + _NPY_HEADER):
        record = save_array(vectors_path, vectors)  # size, sha256, shape: checked on every read
    meta = {
        "index": index,
        "count": len(ids),
        "dim": int(vectors.shape[1]),
        "seconds": round(seconds, 3),
        "vectors": record,
        "ids": ids,
    }
    try:
        _write_json(ids_path, meta)
    except BaseException:
        vectors_path.unlink(missing_ok=True)  # vectors without their ids file are never read: free them
        raise
    return meta


def read_shard(directory: Path, index: int, dim: int | None, *, fix: str) -> tuple[list[str], np.ndarray]:
    """One shard's ids and memory-mapped vectors, checked against what was recorded when it was written.

    A shard changed, truncated or reshaped since is refused (``CorruptArtifact`` naming the file).
    Shards written before records existed carry none: their shape is still checked.
    """
    vectors_path, ids_path = shard_paths(directory, index)
    meta = read_json_object(ids_path, fix=fix)
    ids = meta.get("ids")
    if not isinstance(ids, list):
        raise CorruptArtifact(ids_path, "has no list of ids", fix)
    vectors = load_array(vectors_path, meta.get("vectors"), shape=(len(ids), dim), mmap=True, fix=fix)
    return ids, vectors


@dataclass(frozen=True)
class ShardJob:
    """One corpus entry to fill: everything an executor needs besides which shards to encode."""

    dataset: CorpusSource
    encoder: DocumentEncoder
    directory: Path
    shard_size: int
    progress: Progress | None = None
    on_shard: Callable[[dict[str, Any]], None] | None = None  # called with each written shard's metadata

    def shard_written_elsewhere(self, meta: dict[str, Any]) -> None:
        """A worker process or Ray actor wrote a shard: count its documents here and report it."""
        if self.progress is not None:
            self.progress.update(meta["count"])
        if self.on_shard is not None:
            self.on_shard(meta)


def encode_corpus_shards(job: ShardJob, shard_indices: Iterable[int]) -> list[dict[str, Any]]:
    """Encode the given shards of the job's corpus into its folder; the unit of work for any worker.

    Shards 0..n in a row are streamed in file order; a worker given later or scattered shards seeks
    straight to each one (``dataset.shard_starts``) instead of reading every earlier document.
    Returns each written shard's metadata (without the ids).
    """
    dataset, directory = job.dataset, job.directory
    wanted = set(shard_indices)
    if not wanted:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for index, docs in _shard_documents(dataset, sorted(wanted), job.shard_size):
        started = time.perf_counter()
        ids, vectors = _encode_in_chunks(job, docs)
        if not ids:
            raise HarnessError(
                f"corpus of {dataset.name} ended before shard {index}; it changed while encoding"
            )
        meta = write_shard(directory, index, ids, vectors, time.perf_counter() - started)
        meta.pop("ids")
        written.append(meta)
        if job.on_shard is not None:
            job.on_shard(meta)
    return written


def _encode_in_chunks(job: ShardJob, docs: Iterator) -> tuple[list[str], np.ndarray]:
    """One shard's ids and vectors, its documents read and encoded ``ENCODE_CHUNK_DOCS`` at a time, so
    the texts held at once do not grow with the shard (up to 50,000 documents of a large corpus). The
    vectors go straight into one array the size of a full shard: pages past a short last shard are never
    touched, so they cost no memory."""
    ids: list[str] = []
    vectors: np.ndarray | None = None
    while chunk := list(itertools.islice(docs, ENCODE_CHUNK_DOCS)):
        encoded = job.encoder.encode_documents(chunk, progress=job.progress)
        if vectors is None:
            vectors = np.empty((job.shard_size, encoded.shape[1]), dtype=np.float32)
        vectors[len(ids) : len(ids) + len(chunk)] = encoded
        ids.extend(doc.id for doc in chunk)
    return ids, (vectors[: len(ids)] if vectors is not None else np.empty((0, 0), dtype=np.float32))


def _shard_documents(
    dataset: CorpusSource, wanted: list[int], shard_size: int
) -> Iterator[tuple[int, Iterator]]:
    """``(index, documents)`` of each wanted shard (sorted), seeking when shards are skipped. Each shard's
    documents are an iterator, to be read to its end before the next shard is asked for."""
    starts = None
    if wanted != list(range(len(wanted))):
        starts = dataset.shard_starts(shard_size)  # None for gzip: stream instead
    if starts is not None:
        for index in wanted:
            documents = dataset.iter_documents(starts[index]) if index < len(starts) else iter(())
            yield index, itertools.islice(documents, shard_size)
        return
    documents, chosen = iter(dataset.iter_documents()), set(wanted)
    for index in range(wanted[-1] + 1):
        docs = itertools.islice(documents, shard_size)
        if index in chosen:
            yield index, docs
        else:
            collections.deque(docs, maxlen=0)  # skip the shard's documents without holding them


class ShardedEmbeddings:
    """A finished corpus entry: ``(ids, memory-mapped float32 vectors)`` shard by shard."""

    def __init__(self, directory: Path, manifest: dict[str, Any]):
        self.directory = Path(directory)
        self.manifest = manifest
        self.key: str = manifest["key"]
        self.dim: int = int(manifest["dim"])
        self.num_docs: int = int(manifest["num_docs"])
        self.shard_size: int = int(manifest["shard_size"])
        self.num_shards: int = int(manifest["num_shards"])

    def shards(self) -> Iterator[tuple[list[str], np.ndarray]]:
        for index in range(self.num_shards):
            yield read_shard(
                self.directory, index, self.dim, fix=f"`harness cache clear {self.key[:12]}` and rerun"
            )

    def doc_ids(self) -> list[str]:
        return [doc_id for ids, _ in self.shards() for doc_id in ids]

    def load_all(self) -> tuple[list[str], np.ndarray]:
        """Every id and vector in memory at once (small corpora and tests only)."""
        parts = list(self.shards())
        ids = [doc_id for shard_ids, _ in parts for doc_id in shard_ids]
        vectors = (
            np.concatenate([np.asarray(v) for _, v in parts])
            if parts
            else np.empty((0, self.dim), np.float32)
        )
        return ids, vectors


# ---- Matryoshka dimensions: views of the full-size vectors -------------------------------------------


def check_truncate_dim(dim: int, full_dim: int, model_name: str) -> None:
    """A dimension the model does not have is one line naming both."""
    if dim > full_dim:
        raise HarnessError(
            f"truncate_dim {dim} is larger than model {model_name}'s dimension {full_dim}; use a dimension "
            f"of at most {full_dim} (--truncate-dim or the model record's truncate_dim)"
        )


def truncate_vectors(vectors: np.ndarray, dim: int, normalize: bool) -> np.ndarray:
    """The first ``dim`` values of every vector (float32), re-normalised to unit length when ``normalize``
    (as sentence-transformers' ``encode(truncate_dim=..., normalize_embeddings=True)``: truncate, then
    normalise with the norm clamped at 1e-12).
    """
    cut = np.array(np.asarray(vectors)[:, :dim], dtype=np.float32)
    if normalize:
        norms = np.linalg.norm(cut, axis=1, keepdims=True)
        cut /= np.maximum(norms, np.float32(1e-12))
    return cut


class TruncatedEmbeddings(ShardedEmbeddings):
    """A Matryoshka view of a finished corpus entry: each vector cut to its first ``dim`` values (and
    re-normalised when the model normalises) as it is read. The corpus is encoded once, at full size;
    every dimension searches over its own view, and an approximate index of a view lives in its own
    ``dim-<d>`` folder beside the full-size shards.
    """

    def __init__(self, full: ShardedEmbeddings, dim: int, normalize: bool, model_name: str):
        check_truncate_dim(dim, full.dim, model_name)
        super().__init__(full.directory, full.manifest)
        self.full = full
        self.dim = dim
        self.normalize = normalize
        self.directory = full.directory / f"dim-{dim}"

    def shards(self) -> Iterator[tuple[list[str], np.ndarray]]:
        self.directory.mkdir(parents=True, exist_ok=True)  # where an approximate index of the view goes
        for ids, vectors in self.full.shards():
            yield ids, truncate_vectors(vectors, self.dim, self.normalize)


def document_identity(identity: dict[str, Any]) -> dict[str, Any]:
    """A model identity without a dual encoder's query model: documents are the document model's alone,
    so a corpus entry stays valid when only the query model changes."""
    return {key: value for key, value in identity.items() if key != "query_model"}


def single_truncate_dim(encoder) -> int | None:
    """The one Matryoshka dimension the encoder's record asks for (None: full size, or several, which
    ``harness.retrieval.matryoshka.dimension_models`` splits into one model per dimension first)."""
    dims = encoder.model.record.truncate_dims
    return dims[0] if len(dims) == 1 else None


class EmbeddingCache:
    """Corpus and query embeddings on disk, keyed by data checksums, model identity and settings.

    The cached vectors are always full-size (``truncate_dim`` is not part of the key); a record with one
    ``truncate_dim`` gets views of them cut to that dimension, so every dimension of a model reuses one
    encode.
    """

    def __init__(self, root: Path):
        self.root = Path(root)
        self.layout = CacheLayout(self.root)

    # ---- keys -------------------------------------------------------------------------------

    def corpus_key_inputs(self, dataset, encoder, shard_size: int) -> dict[str, Any]:
        fingerprint = dataset.fingerprint()
        corpus = {name: sha for name, sha in fingerprint.items() if name.startswith("corpus")}
        return {
            "format": CACHE_FORMAT,
            "kind": "corpus",
            "corpus": corpus,
            "model": document_identity(encoder.model.identity),
            "settings": encoder.settings(),
            "shard_size": shard_size,
        }

    def corpus_key(self, dataset, encoder, shard_size: int | None = None) -> str:
        size = self.shard_size_for(dataset, encoder, shard_size)
        return digest_of(self.corpus_key_inputs(dataset, encoder, size))

    def shard_size_for(self, dataset, encoder, requested: int | None) -> int:
        """``requested``, or the corpus-sized default (``auto_shard_size``).

        The shard size is part of the key, so the default would miss entries written when every
        corpus had 50,000-document shards: a complete one of those is used instead of encoding again.
        """
        if requested is not None:
            return requested
        size = auto_shard_size(int(dataset.num_docs))
        legacy_only = size != LEGACY_SHARD_DOCS and not self._complete(dataset, encoder, size)
        if legacy_only and self._complete(dataset, encoder, LEGACY_SHARD_DOCS):
            log.info(
                "using the complete cache entry of %s written with %d-document shards",
                dataset.name,
                LEGACY_SHARD_DOCS,
            )
            return LEGACY_SHARD_DOCS
        return size

    def _complete(self, dataset, encoder, shard_size: int) -> bool:
        key = digest_of(self.corpus_key_inputs(dataset, encoder, shard_size))
        manifest = read_json_or_none(self._entry_dir(dataset, encoder, "corpus", key) / MANIFEST) or {}
        return bool(manifest.get("complete")) and manifest.get("key") == key

    def queries_key_inputs(self, dataset, encoder) -> dict[str, Any]:
        # The queries file and the split's qrels: together they decide which queries are encoded.
        files = {name: sha for name, sha in dataset.fingerprint().items() if not name.startswith("corpus")}
        # A dual encoder's queries are its query model's: their key names that model, not the documents'.
        query_side = encoder.query_side() if hasattr(encoder, "query_side") else encoder
        return {
            "format": CACHE_FORMAT,
            "kind": "queries",
            "split": dataset.split,
            "files": files,
            "model": query_side.model.identity,
            "settings": query_side.settings(),
        }

    def _entry_dir(self, dataset, encoder, kind: str, key: str) -> Path:
        return self.layout.embeddings_entry(dataset.name, encoder.model.slug, kind, key)

    def corpus_directory(self, dataset, encoder, shard_size: int | None = None) -> Path:
        """The folder that holds (or will hold) this corpus entry's shards; nothing is written."""
        return self._entry_dir(dataset, encoder, "corpus", self.corpus_key(dataset, encoder, shard_size))

    # ---- corpus -----------------------------------------------------------------------------

    def corpus(
        self,
        dataset,
        encoder,
        *,
        shard_size: int | None = None,
        progress: bool = True,
        encode_shards: Callable[[ShardJob, list[int]], Any] = encode_corpus_shards,
    ) -> ShardedEmbeddings:
        """The corpus embeddings, encoding only the shards not already on disk.

        ``encode_shards`` does the encoding; it takes ``encode_corpus_shards``'s arguments, so a pool
        of processes or Ray actors (``harness.encoding.pool``, ``harness.encoding.ray_pool``) can stand in.
        """
        shard_size = self.shard_size_for(dataset, encoder, shard_size)
        if shard_size <= 0:
            raise HarnessError(f"shard size must be positive, not {shard_size}")
        inputs = self.corpus_key_inputs(dataset, encoder, shard_size)
        key = digest_of(inputs)
        directory = self._entry_dir(dataset, encoder, "corpus", key)
        num_docs = int(dataset.num_docs)
        if num_docs == 0:
            raise HarnessError(f"dataset {dataset.name} has an empty corpus; nothing to encode")
        num_shards = math.ceil(num_docs / shard_size)
        manifest_path = directory / MANIFEST
        try:
            manifest = _read_json(manifest_path) if manifest_path.is_file() else None
        except HarnessError:  # an unreadable manifest is rebuilt: the shard files are the truth
            manifest = None
        if manifest is None or manifest.get("key") != key:
            manifest = {
                "format": CACHE_FORMAT,
                "kind": "corpus",
                "key": key,
                "dataset": dataset.name,
                "split": None,
                "model": encoder.model.slug,
                "key_inputs": inputs,
                "num_docs": num_docs,
                "shard_size": shard_size,
                "num_shards": num_shards,
                "dim": None,
                "finished_shards": [],
                "encode_seconds": 0.0,
                "created": _now(),
            }
        done = finished_shards(directory, num_shards)
        missing = [index for index in range(num_shards) if index not in done]
        if missing:
            dim = single_truncate_dim(encoder)
            if dim is not None:  # refused before the encode, not after it
                check_truncate_dim(dim, encoder.dim, encoder.model.record.name)
            self._encode_missing(
                dataset, encoder, directory, manifest, missing, shard_size, progress, encode_shards
            )
        else:
            log.info(
                "corpus embeddings of %s for %s found in cache (%s)",
                dataset.name,
                encoder.model.slug,
                directory,
            )
        full = ShardedEmbeddings(directory, self._finish_manifest(directory, manifest))
        return self.dimension_view(full, encoder)

    @staticmethod
    def dimension_view(full: ShardedEmbeddings, encoder) -> ShardedEmbeddings:
        """``full``, or its view at the record's one ``truncate_dim``."""
        dim = single_truncate_dim(encoder)
        if dim is None:
            return full
        record = encoder.model.record
        return TruncatedEmbeddings(full, dim, record.normalize, record.name)

    @staticmethod
    def query_dimension(vectors: np.ndarray, encoder) -> np.ndarray:
        """Query vectors at the record's one ``truncate_dim`` (as they are without one)."""
        dim = single_truncate_dim(encoder)
        if dim is None:
            return vectors
        record = encoder.model.record
        check_truncate_dim(dim, vectors.shape[1], record.name)
        return truncate_vectors(vectors, dim, record.normalize)

    def _encode_missing(
        self, dataset, encoder, directory, manifest, missing, shard_size, progress, encode_shards
    ) -> None:
        from tqdm.auto import tqdm

        num_docs, num_shards = manifest["num_docs"], manifest["num_shards"]
        remaining = sum(min(shard_size, num_docs - i * shard_size) for i in missing)
        if len(missing) < num_shards:
            log.info(
                "resuming %s: %d of %d shards already encoded",
                directory.name,
                num_shards - len(missing),
                num_shards,
            )
        directory.mkdir(parents=True, exist_ok=True)
        manifest["complete"] = False
        _write_json(directory / MANIFEST, manifest)

        def record_shard(meta: dict[str, Any]) -> None:
            manifest["dim"] = meta["dim"]
            manifest["finished_shards"] = sorted({*manifest["finished_shards"], meta["index"]})
            manifest["encode_seconds"] = round(manifest["encode_seconds"] + meta["seconds"], 3)
            manifest["updated"] = _now()
            _write_json(directory / MANIFEST, manifest)

        with tqdm(
            total=num_docs,
            initial=num_docs - remaining,
            unit="doc",
            desc=f"encoding {dataset.name}",
            disable=not progress,
            dynamic_ncols=True,
        ) as bar:
            job = ShardJob(dataset, encoder, directory, shard_size, progress=bar, on_shard=record_shard)
            encode_shards(job, missing)

    def _finish_manifest(self, directory: Path, manifest: dict[str, Any]) -> dict[str, Any]:
        """Reconcile the manifest with the shard files (other workers may have written some)."""
        num_shards = manifest["num_shards"]
        done = finished_shards(directory, num_shards)
        if len(done) != num_shards:
            raise HarnessError(f"{directory}: {num_shards - len(done)} shard(s) missing after encoding")
        if manifest.get("complete") and manifest.get("dim") is not None:
            return manifest  # verified when it was completed; a cache hit reads no shard files
        metas = [_read_json(shard_paths(directory, i)[1]) for i in range(num_shards)]
        dims = {meta["dim"] for meta in metas}
        count = sum(meta["count"] for meta in metas)
        if len(dims) != 1 or count != manifest["num_docs"]:
            raise HarnessError(
                f"{directory}: shards disagree (dims {sorted(dims)}, {count} docs); clear and rerun"
            )
        manifest.update(
            dim=dims.pop(),
            finished_shards=done,
            encode_seconds=round(sum(meta["seconds"] for meta in metas), 3),
            complete=True,
            updated=_now(),
        )
        _write_json(directory / MANIFEST, manifest)
        return manifest

    # ---- queries ----------------------------------------------------------------------------

    def queries(self, dataset, encoder) -> tuple[list[str], np.ndarray]:
        """Query ids (dataset order) and their float32 vectors (at the record's ``truncate_dim``)."""
        ids, vectors = self.full_size_queries(dataset, encoder)
        return ids, self.query_dimension(vectors, encoder)

    def full_size_queries(self, dataset, encoder) -> tuple[list[str], np.ndarray]:
        """Query ids (dataset order) and their full-size float32 vectors, encoded once per key."""
        inputs = self.queries_key_inputs(dataset, encoder)
        key = digest_of(inputs)
        directory = self._entry_dir(dataset, encoder, "queries", key)
        cached = self._cached_queries(directory)
        if cached is not None:
            log.info("query embeddings of %s for %s found in cache", dataset.name, encoder.model.slug)
            return cached
        ids = list(dataset.queries)
        started = time.perf_counter()
        vectors = encoder.encode_queries([dataset.queries[query_id] for query_id in ids])
        seconds = time.perf_counter() - started
        directory.mkdir(parents=True, exist_ok=True)
        meta = write_shard(directory, 0, ids, vectors, seconds)
        manifest = {
            "format": CACHE_FORMAT,
            "kind": "queries",
            "key": key,
            "dataset": dataset.name,
            "split": dataset.split,
            "model": encoder.model.slug,
            "key_inputs": inputs,
            "num_docs": len(ids),
            "shard_size": max(1, len(ids)),
            "num_shards": 1,
            "dim": meta["dim"],
            "finished_shards": [0],
            "encode_seconds": meta["seconds"],
            "complete": True,
            "created": _now(),
        }
        _write_json(directory / MANIFEST, manifest)
        return ids, np.asarray(vectors, dtype=np.float32)

    @staticmethod
    def _cached_queries(directory: Path) -> tuple[list[str], np.ndarray] | None:
        """The cached query vectors, or None when absent or damaged (then they are encoded again)."""
        vectors_path, ids_path = shard_paths(directory, 0)
        if not (vectors_path.is_file() and ids_path.is_file()):
            return None
        try:
            ids, vectors = read_shard(directory, 0, None, fix="encoding the queries again")
        except HarnessError as error:  # queries are cheap to encode: redo them rather than stop
            log.warning("%s", error)
            return None
        return ids, np.array(vectors)
