"""Embedding metrics for RAG rows: texts in, L2-normalised vectors out, cached like corpus embeddings.

The model comes from the registry (default the offline all-MiniLM-L6-v2) and is run by the harness's
encoder on torch fp32; texts are encoded as they are, without the model's query or document prefixes
(every text here plays the same role). The vectors of one run's distinct texts are one entry of the
cache's embeddings folder (``embeddings/rag__<model>__texts__<key16>/``), keyed by the texts, the model
identity and the encoder settings, so a re-run encodes nothing and ``harness cache`` lists and frees it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.cache import MANIFEST, CacheLayout, digest_of, shard_paths
from harness.core.fileio import atomic_write_json, read_json_or_none
from harness.encoding.embedding_cache import write_shard
from harness.encoding.runtime_choice import build_encoder
from harness.models.resolve import ResolvedModel, resolve_model
from harness.qa.answers.profiles import get_profile
from harness.qa.rag.rows import CORRECTNESS_WEIGHTS, RAGRow, Score

# Token F1 of the non-judge answer correctness: SQuAD's definition, as qa-eval's default profile.
_SQUAD = get_profile("squad")

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
RUNTIME = "torch"  # small batches of short texts: no export or exactness check worth its start-up


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class TextEmbedder:
    """Normalised vectors of texts under one model; every vector computed once per cache."""

    def __init__(self, model: ResolvedModel, cache_dir: str | Path, *, device: str | None = "cpu"):
        self.model = model
        self.layout = CacheLayout(Path(cache_dir))
        self.encoder = build_encoder(
            model, device=device, runtime=RUNTIME, cache_dir=cache_dir, batch_size=32
        )
        self._vectors: dict[str, np.ndarray] = {}
        self.encoded = 0  # texts encoded by this process (0 on a cached re-run)

    @classmethod
    def from_spec(cls, spec: str, cache_dir: str | Path, *, trust_remote_code: bool = False) -> TextEmbedder:
        return cls(resolve_model(spec, trust_remote_code=trust_remote_code), cache_dir)

    def describe(self) -> dict[str, Any]:
        """The model's identity and the settings that made the vectors (provenance)."""
        return {
            "model": self.model.record.name,
            "slug": self.model.slug,
            "identity": self.model.identity,
            "settings": self.encoder.settings(),
            "prefixes": "none (texts encoded as they are)",
            "normalised": True,
        }

    def prepare(self, texts: Iterable[str]) -> None:
        """Load (or encode and store) the vectors of ``texts`` in one cache entry."""
        wanted = sorted({text for text in texts if text not in self._vectors})
        if not wanted:
            return
        key_inputs = {
            "format": CACHE_FORMAT,
            "kind": "texts",
            "texts": digest_of([text_digest(text) for text in wanted]),
            "model": self.model.identity,
            "settings": self.encoder.settings(),
        }
        key = digest_of(key_inputs)
        directory = self.layout.embeddings_entry("rag", self.model.slug, "texts", key)
        vectors = self._load(directory, wanted) if directory.is_dir() else None
        if vectors is None:
            vectors = self._encode_and_store(directory, key, key_inputs, wanted)
        self._vectors.update(zip(wanted, vectors, strict=True))

    def _load(self, directory: Path, wanted: list[str]) -> np.ndarray | None:
        vectors_path, ids_path = shard_paths(directory, 0)
        meta = read_json_or_none(ids_path)
        if meta is None or not vectors_path.is_file() or meta.get("ids") != [text_digest(t) for t in wanted]:
            return None
        log.info("text embeddings for %s found in cache", self.model.slug)
        return np.load(vectors_path, allow_pickle=False)

    def _encode_and_store(
        self, directory: Path, key: str, inputs: dict[str, Any], wanted: list[str]
    ) -> np.ndarray:
        started = time.perf_counter()
        vectors = normalise(self.encoder.encode_texts(wanted))
        self.encoded += len(wanted)
        directory.mkdir(parents=True, exist_ok=True)
        meta = write_shard(
            directory, 0, [text_digest(t) for t in wanted], vectors, time.perf_counter() - started
        )
        atomic_write_json(
            directory / MANIFEST,
            {
                "format": CACHE_FORMAT,
                "kind": "texts",
                "key": key,
                "dataset": "rag",
                "split": None,
                "model": self.model.slug,
                "key_inputs": inputs,
                "num_docs": len(wanted),
                "shard_size": len(wanted),
                "num_shards": 1,
                "dim": meta["dim"],
                "finished_shards": [0],
                "encode_seconds": meta["seconds"],
                "complete": True,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            },
        )
        return vectors

    def vector(self, text: str) -> np.ndarray:
        if text not in self._vectors:
            self.prepare([text])
        return self._vectors[text]

    def cosine(self, left: str, right: str) -> float:
        return float(np.dot(self.vector(left), self.vector(right)))


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


def texts_of(rows: Sequence[RAGRow]) -> list[str]:
    """Every text an embedding metric may read: questions, answers and ground truths."""
    texts: list[str] = []
    for row in rows:
        texts.extend(filter(None, (row.question, row.answer)))
        texts.extend(row.ground_truths or ())
    return texts


def semantic_similarity(embedder: TextEmbedder, row: RAGRow) -> float:
    """Cosine of the normalised answer and ground-truth vectors, the best ground truth; empty answer 0."""
    if row.is_empty:
        return 0.0
    return max(embedder.cosine(row.answer, truth) for truth in row.ground_truths)


def embedding_scores(embedder: TextEmbedder, row: RAGRow, metrics: Iterable[str]) -> dict[str, Score]:
    """The metrics that need the embedding model only (an empty answer scores 0, as in qa-eval)."""
    scores: dict[str, Score] = {}
    for name in metrics:
        if name == "semantic_similarity":
            scores[name] = semantic_similarity(embedder, row)
        elif name == "answer_relevance_embed":
            scores[name] = 0.0 if row.is_empty else embedder.cosine(row.question, row.answer)
        elif name == "answer_correctness_embed":
            f1 = _SQUAD.f1(row.answer or "", list(row.ground_truths))
            scores[name] = CORRECTNESS_WEIGHTS[0] * f1 + CORRECTNESS_WEIGHTS[1] * semantic_similarity(
                embedder, row
            )
    return scores
