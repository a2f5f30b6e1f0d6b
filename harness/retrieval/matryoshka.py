"""Matryoshka dimensions from one encode: every ``truncate_dim`` searched over the full-size vectors cut
to that dimension (re-normalised when the model normalises), never encoded again.

``dimension_models`` turns a model and its dimensions (``--truncate-dim 64 128 256`` or the record's
``truncate_dim`` list) into one model per dimension, each its own result (its settings, and so its
identity, carry its ``truncate_dim``); the embedding cache keys full-size vectors without the dimension,
so the first dimension encodes and the others find every vector cached. ``dimension_runs`` does the same
in one go with one encoder: one encode, one search per dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.core.errors import HarnessError
from harness.encoding.embedding_cache import (
    EmbeddingCache,
    TruncatedEmbeddings,
    check_truncate_dim,
    truncate_vectors,
)
from harness.models.resolve import ResolvedModel
from harness.retrieval.dense import IndexSpec, dense_search


def dimension_models(model: ResolvedModel, dims: Sequence[int] = ()) -> list[ResolvedModel]:
    """One model per Matryoshka dimension (``dims``, else the record's ``truncate_dim``), largest first;
    the model itself when there is none.
    """
    wanted = tuple(dims) or model.record.truncate_dims
    if not wanted:
        return [model]
    if len(set(wanted)) != len(wanted) or min(wanted) <= 0:
        raise HarnessError(f"--truncate-dim {' '.join(map(str, wanted))}: give distinct positive dimensions")
    return [
        replace(model, record=model.record.model_copy(update={"truncate_dim": dim}))
        for dim in sorted(wanted, reverse=True)
    ]


@dataclass
class DimensionRuns:
    """The run of every dimension, and what encoding them cost (for the closing note)."""

    runs: dict[int, dict[str, dict[str, float]]]
    full_dim: int
    corpus_key: str

    def describe(self) -> dict[str, Any]:
        return {"dimensions": sorted(self.runs), "full_dim": self.full_dim, "corpus_key": self.corpus_key}


def dimension_runs(
    dataset,
    encoder,
    cache: EmbeddingCache,
    dims: Sequence[int],
    *,
    top_k: int,
    spec: IndexSpec,
    drop_identical_ids: bool,
) -> DimensionRuns:
    """Encode the corpus and queries once at full size (``encoder``'s model must have no
    ``truncate_dim``), then search each dimension over the cut vectors.
    """
    record = encoder.model.record
    if record.truncate_dims:
        raise HarnessError(
            f"model {record.name} is already cut to {record.truncate_dim}; pass the full-size model"
        )
    full = cache.corpus(dataset, encoder, progress=False)
    query_ids, query_vectors = cache.queries(dataset, encoder)
    for dim in dims:  # every dimension checked before any search
        check_truncate_dim(dim, full.dim, record.name)
    normalize_scores = record.similarity == "cosine"
    runs = {
        dim: dense_search(
            truncate_vectors(query_vectors, dim, record.normalize),
            query_ids,
            TruncatedEmbeddings(full, dim, record.normalize, record.name),
            top_k,
            spec,
            normalize=normalize_scores,
            drop_identical_ids=drop_identical_ids,
        )
        for dim in sorted(dims, reverse=True)
    }
    return DimensionRuns(runs, full.dim, full.key)
