"""What the pipeline passes between stages, as ``typing.Protocol``s: typed against, never probed with ``hasattr``.

A dataset, an encoder and a shard executor each have several implementations (a BEIR folder or a
test double; the dense ``Encoder``; in-process, local-pool and Ray executors). Code that takes one
names the protocol, so what it relies on is written down in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np


class TextDocument(Protocol):
    """One corpus document: what an encoder reads from it."""

    id: str
    title: str
    text: str


class Progress(Protocol):
    """A progress bar (tqdm or anything with ``update``)."""

    def update(self, n: int) -> Any: ...


@runtime_checkable
class CorpusSource(Protocol):
    """A dataset whose corpus can be encoded shard by shard.

    ``shard_starts`` returns None when the corpus file cannot seek (gzip, or a file that changed):
    readers then stream from the start instead.
    """

    name: str

    @property
    def num_docs(self) -> int: ...

    def fingerprint(self) -> dict[str, str]: ...

    def iter_documents(self, start: Any = None) -> Iterator[TextDocument]: ...

    def shard_starts(self, shard_size: int) -> Sequence[Any] | None: ...


@runtime_checkable
class EvalDataset(CorpusSource, Protocol):
    """A corpus plus the queries and judgements of one split."""

    split: str
    queries: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, int]]
    excluded_ids: Mapping[str, Sequence[str]]  # per query, removed from the ranking before scoring (BRIGHT)


@runtime_checkable
class DocumentEncoder(Protocol):
    """Texts in, float32 vectors out; ``settings`` is everything that changes a vector (the cache key)."""

    model: Any  # harness.models.model_registry.ResolvedModel
    device: str

    def settings(self) -> dict[str, Any]: ...

    def describe(self) -> dict[str, Any]: ...

    def resolve_runtime(self) -> str:
        """The runtime that computes the vectors (settles, and records in the cache, an ``exact`` choice)."""
        ...

    def encode_documents(
        self, docs: Sequence[TextDocument], *, progress: Progress | None = None
    ) -> np.ndarray: ...

    def encode_queries(self, texts: Sequence[str], *, progress: Progress | None = None) -> np.ndarray: ...


class ShardJob(Protocol):
    """One corpus entry to fill (``harness.encoding.embedding_cache.ShardJob``): everything but the shard numbers."""

    dataset: CorpusSource
    encoder: DocumentEncoder
    directory: Path
    shard_size: int
    progress: Progress | None
    on_shard: Callable[[dict[str, Any]], None] | None


@runtime_checkable
class ShardExecutor(Protocol):
    """Encodes some shards of a job's corpus into its cache entry folder: in process, in workers, on Ray."""

    def __call__(self, job: ShardJob, shard_indices: Iterable[int]) -> list[dict[str, Any]]: ...

    def describe(self) -> dict[str, Any]:
        """How the shards are encoded, for provenance (never part of a cache key)."""
        ...
