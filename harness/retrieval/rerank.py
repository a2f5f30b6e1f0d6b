"""Re-ranking the top of a run with a cross-encoder (sentence-transformers' ``CrossEncoder``).

For each query the first ``depth`` documents of the run (trec_eval order) are scored as pairs
``(query, title + " " + text)`` (stripped, as BEIR's re-ranker builds them) and re-ordered by that score.
Documents below the depth keep their first-stage order underneath the re-ranked block: the k-th of them
(from 0) scores ``lowest re-ranked score - 1 - k``, so any reader that sorts by score sees that order.

Pairs longer than ``max_length`` tokens are truncated by the tokenizer (longest first); how many were
is recorded. Scores are cached under the one cache layout (kind ``rerank``), keyed by the model's
identity (weight hashes), max length and precision, then per pair by a digest of the query and passage
text, so a re-run, a new depth or a new evaluation setting scores only pairs never seen before.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.cache import MANIFEST, CacheLayout, digest_of
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write_json, read_json_object, read_json_or_none
from harness.core.protocols import CorpusSource
from harness.core.ranking import Run, sorted_ranking
from harness.encoding.runtime import check_precision, pick_device, precision_dtype, short_precision
from harness.models.hub import fetch_from_hub
from harness.models.identity import folder_identity, slugify
from harness.models.model_registry import find_record

log = logging.getLogger(__name__)

DEFAULT_RERANK_DEPTH = 100
DEFAULT_MAX_LENGTH = 512
EXAMPLE_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L6-v2"


@dataclass(frozen=True)
class CrossEncoderModel:
    """A cross-encoder checkpoint on this machine: its folder, identity (weight hashes) and limits."""

    name: str
    source: Path
    identity: dict[str, Any]
    slug: str
    max_positions: int | None


def resolve_cross_encoder(spec: str, *, trust_remote_code: bool = False) -> CrossEncoderModel:
    """A local folder or hub id holding a sequence-classification model with one output; else one line."""
    spec = (spec or "").strip()
    record = find_record(spec) if spec else None
    if record is not None:
        raise HarnessError(
            f"re-ranker {spec!r} is the bi-encoder record {record.name}, not a cross-encoder "
            f"(give a sequence-classification checkpoint, e.g. {EXAMPLE_CROSS_ENCODER})"
        )
    path = Path(spec).expanduser()
    if path.is_dir():
        folder, model_id, revision = path.resolve(), None, None
    elif not spec or path.exists() or spec.startswith((".", "/", "~")):
        raise HarnessError(f"re-ranker {spec!r} is not a model folder or a hub id (owner/name)")
    else:
        folder, revision = fetch_from_hub(spec, None)
        model_id = spec
    config = _checked_config(spec, folder)
    identity = {"model_id": model_id, "revision": revision, **folder_identity(folder)}
    if model_id is None:
        identity["folder_name"] = folder.name
    slug = slugify(model_id) if model_id else f"local__{slugify(folder.name)}-{identity['weights_hash'][:8]}"
    positions = config.get("max_position_embeddings")
    return CrossEncoderModel(
        name=model_id or folder.name,
        source=folder,
        identity=identity,
        slug=slug,
        max_positions=positions if isinstance(positions, int) and positions > 0 else None,
    )


def _checked_config(spec: str, folder: Path) -> dict[str, Any]:
    """The folder's config.json, when it describes a one-output sequence classifier."""
    config_path = folder / "config.json"
    config = read_json_or_none(config_path) if config_path.is_file() else None
    fix = f"a re-ranker is a sequence-classification model with one output, e.g. {EXAMPLE_CROSS_ENCODER}"
    if config is None:
        raise HarnessError(f"re-ranker {spec!r} is not a cross-encoder: {folder} has no config.json ({fix})")
    architectures = [str(name) for name in config.get("architectures") or []]
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        named = ", ".join(architectures) or "no architecture"
        raise HarnessError(
            f"re-ranker {spec!r} is not a cross-encoder: its config.json names {named} ({fix})"
        )
    labels = config.get("num_labels") or len(config.get("id2label") or {}) or 1
    if labels != 1:
        raise HarnessError(
            f"re-ranker {spec!r} has {labels} output labels; re-ranking needs one relevance score ({fix})"
        )
    return config


@dataclass(frozen=True)
class RerankSettings:
    """How a run is re-ranked; devices and precision are handled as the bi-encoder's (``--device``, ``--precision``)."""

    depth: int = DEFAULT_RERANK_DEPTH
    batch_size: int = 32
    max_length: int | None = None  # None: 512, capped by the model's position embeddings
    device: str | None = None
    precision: str | None = None  # fp32 (default), bf16, fp16

    def __post_init__(self) -> None:
        if self.depth <= 0:
            raise HarnessError(f"re-rank depth must be at least 1, got {self.depth}")
        if self.max_length is not None and self.max_length <= 0:
            raise HarnessError(f"re-rank max length must be at least 1, got {self.max_length}")
        if self.batch_size <= 0:
            raise HarnessError(f"re-rank batch size must be at least 1, got {self.batch_size}")


def passage_text(title: str, text: str) -> str:
    """The passage side of a pair: title and text joined by a space, as BEIR's re-ranker does."""
    return f"{title} {text}".strip()


def passages_for(dataset: CorpusSource, docids: Iterable[str]) -> dict[str, str]:
    """``docid -> passage text`` for the wanted documents, in one streaming pass over the corpus."""
    wanted = set(docids)
    found: dict[str, str] = {}
    for document in dataset.iter_documents():
        if document.id in wanted:
            found[document.id] = passage_text(document.title, document.text)
            if len(found) == len(wanted):
                break
    return found


def head_docids(run: Run, depth: int) -> set[str]:
    """Every document that some query's top ``depth`` holds (what a re-ranker needs the text of)."""
    return {docid for docs in run.values() for docid, _ in sorted_ranking(docs)[:depth]}


@dataclass
class CrossEncoderReranker:
    """Scores (query, passage) pairs through the score cache, loading the model only for unseen pairs."""

    model: CrossEncoderModel
    settings: RerankSettings
    cache_dir: Path
    trust_remote_code: bool = False
    pairs_scored: int = 0  # pairs the model scored in this process
    pairs_cached: int = 0  # pairs found in the cache
    pairs_truncated: int = 0  # pairs (of those asked for) longer than max_length
    _loaded: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.device = pick_device(self.settings.device)
        self.dtype = precision_dtype(self.settings.precision or "fp32")
        if self.dtype == "int8":
            raise HarnessError("re-ranking runs in fp32, bf16 or fp16; int8 is the ONNX bi-encoder runtime's")
        check_precision(self.dtype, self.device)
        limit = self.model.max_positions or DEFAULT_MAX_LENGTH
        self.max_length = min(self.settings.max_length or DEFAULT_MAX_LENGTH, limit)
        key = digest_of(
            {"model": self.model.identity, "max_length": self.max_length, "precision": self.dtype}
        )
        self.directory = CacheLayout(self.cache_dir).rerank_scores(self.model.slug, key)
        self.key = key

    def describe(self) -> dict[str, Any]:
        """What changes a re-ranked score (keys the result) beside the model's identity."""
        return {
            "model": self.model.name,
            "identity": self.model.identity,
            "depth": self.settings.depth,
            "max_length": self.max_length,
            "truncation": "longest_first",
            "precision": short_precision(self.dtype),
            "pair": "(query, title + ' ' + text)",
            "below_depth": "first-stage order, under the re-ranked block",
        }

    def rerank(self, run: Run, queries: Mapping[str, str], passages: Mapping[str, str]) -> Run:
        """``run`` with each query's top ``depth`` re-scored by the cross-encoder (see the module doc)."""
        depth = self.settings.depth
        heads = {qid: sorted_ranking(docs) for qid, docs in run.items()}
        pairs = {
            (qid, docid): (queries[qid], passages[docid])
            for qid, ranking in heads.items()
            for docid, _ in ranking[:depth]
        }
        scores = self.scores(list(pairs.values()))
        reranked: Run = {}
        for qid, ranking in heads.items():
            head = {docid: scores[(queries[qid], passages[docid])] for docid, _ in ranking[:depth]}
            floor = min(head.values(), default=0.0) - 1.0
            tail = {docid: floor - offset for offset, (docid, _) in enumerate(ranking[depth:])}
            reranked[qid] = {**head, **tail}
        return reranked

    def scores(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """The score of every pair: cached ones read back, the others computed once and cached."""
        keys = {pair: _pair_key(pair) for pair in pairs}
        cached, truncated = self._read_cache()
        missing = list(dict.fromkeys(pair for pair, key in keys.items() if key not in cached))
        self.pairs_cached += len(keys) - len(missing)
        if missing:
            new_scores, new_truncated = self._predict(missing)
            self._write_cache(
                {keys[pair]: score for pair, score in zip(missing, new_scores, strict=True)},
                [keys[pair] for pair in new_truncated],
            )
            cached.update({keys[pair]: score for pair, score in zip(missing, new_scores, strict=True)})
            truncated.update(keys[pair] for pair in new_truncated)
        self.pairs_truncated += sum(1 for key in set(keys.values()) if key in truncated)
        return {pair: cached[key] for pair, key in keys.items()}

    def _read_cache(self) -> tuple[dict[str, float], set[str]]:
        """Every score the cache holds, from the files whose checksum matches; the others are dropped."""
        scores: dict[str, float] = {}
        truncated: set[str] = set()
        for path in sorted(self.directory.glob("scores-*.json")):
            checked = read_score_file(path)
            if checked is None:
                continue
            scores.update(checked[0])
            truncated.update(checked[1])
        return scores, truncated

    def _write_cache(self, scores: dict[str, float], truncated: list[str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not (self.directory / MANIFEST).is_file():
            manifest = {
                "key": self.key,
                "model": self.model.slug,
                "identity": self.model.identity,
                "max_length": self.max_length,
                "precision": short_precision(self.dtype),
            }
            atomic_write_json(self.directory / MANIFEST, manifest)
        # A new file per scoring pass: concurrent writers never overwrite each other's scores.
        name = f"scores-{digest_of(sorted(scores))[:12]}-{secrets.token_hex(2)}.json"
        atomic_write_json(self.directory / name, score_file_payload(scores, truncated))

    def _predict(self, pairs: list[tuple[str, str]]) -> tuple[list[float], list[tuple[str, str]]]:
        import torch

        model = self._load()
        tokenizer = model.tokenizer
        lengths = [len(ids) for ids in tokenizer([q for q, _ in pairs], [p for _, p in pairs])["input_ids"]]
        truncated = [pair for pair, length in zip(pairs, lengths, strict=True) if length > self.max_length]
        log.info("re-ranking %d new pairs with %s on %s", len(pairs), self.model.name, self.device)
        autocast = self.device == "cpu" and self.dtype == "bfloat16"
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            values = model.predict(
                pairs, batch_size=self.settings.batch_size, show_progress_bar=False, convert_to_numpy=True
            )
        self.pairs_scored += len(pairs)
        return [float(value) for value in values], truncated

    def _load(self):
        if self._loaded is None:
            import torch
            from sentence_transformers import CrossEncoder

            model_kwargs: dict[str, Any] = {}
            if self.dtype in ("float16", "bfloat16") and self.device != "cpu":
                model_kwargs["dtype"] = getattr(torch, self.dtype)
            self._loaded = CrossEncoder(
                str(self.model.source),
                device=self.device,
                max_length=self.max_length,
                local_files_only=True,
                trust_remote_code=self.trust_remote_code,
                model_kwargs=model_kwargs,
            )
        return self._loaded


def _pair_key(pair: tuple[str, str]) -> str:
    return digest_of(list(pair))[:32]


# ---- the score files: each carries the sha256 of what it holds, checked on every read ------------------

SCORE_FILE_FORMAT = 2  # 1: no checksum (such files are scored again, never trusted)


def _content_digest(scores: Mapping[str, float], truncated: list[str]) -> str:
    return digest_of({"scores": scores, "truncated": truncated})


def score_file_payload(scores: Mapping[str, float], truncated: list[str]) -> dict[str, Any]:
    """What one scoring pass writes: its scores, the truncated pairs and the sha256 over both."""
    return {
        "format": SCORE_FILE_FORMAT,
        "sha256": _content_digest(scores, truncated),
        "scores": dict(scores),
        "truncated": list(truncated),
    }


def read_score_file(path: Path) -> tuple[dict[str, float], list[str]] | None:
    """The scores and truncated pairs of one cache file, or None (with a warning) when it is not exactly
    what was written: unreadable, edited, truncated, or from a version that wrote no checksum. Such a file
    is deleted, so its pairs are scored again and written afresh; a score that fails its check is never used.
    """
    payload, problem = _checked_score_file(path)
    if problem is None:
        return {key: float(value) for key, value in payload["scores"].items()}, payload["truncated"]
    log.warning(
        "re-rank cache file %s %s; its pairs are scored again (it is deleted; "
        "`harness cache clear --kind rerank` frees the whole re-rank cache)",
        path,
        problem,
    )
    path.unlink(missing_ok=True)
    return None


def _checked_score_file(path: Path) -> tuple[dict[str, Any], str | None]:
    """The file's content and why it cannot be trusted (None when it matches the checksum written with it)."""
    try:
        payload = read_json_object(path)
    except InputError as error:
        return {}, f"is unreadable ({error.problem})"
    scores, truncated = payload.get("scores"), payload.get("truncated")
    if "sha256" not in payload:
        return payload, "has no checksum (written by an older version)"
    if not isinstance(scores, dict) or not isinstance(truncated, list):
        return payload, "lacks its scores or truncated pairs"
    if payload["sha256"] != _content_digest(scores, truncated):
        return payload, "changed since it was written (sha256 differs)"
    # The checksum matched, so these are the values written; still, only finite numbers are scores.
    if not all(_is_score(value) for value in scores.values()) or not all(
        isinstance(key, str) for key in truncated
    ):
        return payload, "holds a score that is not a finite number"
    return payload, None


def _is_score(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
