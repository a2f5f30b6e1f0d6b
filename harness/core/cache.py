"""The one layout of the cache folder: where every cached artifact lives, and how to list and free it.

Everything the harness computes once and reuses is kept under one root (``--cache-dir``, env
``HARNESS_CACHE_DIR``, default ``cache/``), one folder per kind::

    embeddings/<dataset>__<model>__<corpus|queries>__<key16>/   manifest.json, shard-NNNNN.{npy,json}
    embeddings/<...corpus entry...>/index-<factory>.faiss      approximate FAISS indexes (kind "faiss"),
                                                               kept beside the vectors they index
    bm25/<key32>/                                               bm25s index, doc_ids.json, manifest.json
    onnx/<model>__<key16>/                                      model.onnx, export.json, exact-check.json
    judge/<judge model>/<key>.json                              one judge model's replies, one file per call
    rerank/<model>__<key16>/                                    manifest.json, scores-<key16>.json: cross-encoder
                                                               scores by (query, document) text digest

Each key is a sha256 over everything that changes the artifact's content (``digest_of``), so equal
inputs find the same folder and any change misses it. Writers stage into hidden ``.<name>.<random>.tmp``
files or folders and rename them into place; a killed writer leaves only such leftovers behind, which
``leftovers`` finds and ``harness cache clear --leftovers`` frees.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.fileio import read_json_or_none

EMBEDDINGS_DIR = "embeddings"
BM25_DIR = "bm25"
ONNX_DIR = "onnx"
JUDGE_DIR = "judge"
RERANK_DIR = "rerank"
MANIFEST = "manifest.json"
FAISS_SUFFIX = ".faiss"
EXPORT_RECORD = "export.json"
EXACT_CHECK = "exact-check.json"
KINDS = ("embeddings", "faiss", "bm25", "onnx", "judge", "rerank")


def digest_of(payload: Any) -> str:
    """sha256 of a JSON value with sorted keys (the same inputs always give the same key)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def safe_name(name: str) -> str:
    """``name`` with every character a file system might mind replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "x"


# Resume granularity: a corpus is split into at least CHECKPOINTS shards (each written whole), so a
# killed encode of a small corpus resumes too; shards stay between MIN and MAX documents.
MAX_SHARD_DOCS = 50_000
MIN_SHARD_DOCS = 256
CHECKPOINTS = 8
LEGACY_SHARD_DOCS = 50_000  # every corpus's shard size before it depended on the corpus size


def auto_shard_size(num_docs: int) -> int:
    """Documents per shard when none is asked for: ``min(MAX, max(MIN, ceil(num_docs / CHECKPOINTS)))``."""
    return min(MAX_SHARD_DOCS, max(MIN_SHARD_DOCS, math.ceil(num_docs / CHECKPOINTS)))


def shard_paths(directory: Path, index: int) -> tuple[Path, Path]:
    """``(vectors .npy, ids+meta .json)`` of shard ``index`` of an embeddings entry."""
    stem = f"shard-{index:05d}"
    return directory / f"{stem}.npy", directory / f"{stem}.json"


def finished_shards(directory: Path, num_shards: int) -> list[int]:
    """Shards whose vectors and ids are both on disk (the ids file is written last)."""
    return [i for i in range(num_shards) if all(path.is_file() for path in shard_paths(directory, i))]


@dataclass(frozen=True)
class CacheLayout:
    """Paths of every cached artifact under one root; nothing is read or written here."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def embeddings_entry(self, dataset: str, model_slug: str, part: str, key: str) -> Path:
        """The folder of one dataset's corpus or queries embeddings under one model and settings."""
        return self.root / EMBEDDINGS_DIR / f"{safe_name(dataset)}__{model_slug}__{part}__{key[:16]}"

    @staticmethod
    def faiss_index(embeddings_entry: Path, factory: str) -> Path:
        """An approximate index over a corpus entry's vectors, stored beside them (cleared with them)."""
        safe = "".join(ch if ch.isalnum() else "_" for ch in factory)
        return Path(embeddings_entry) / f"index-{safe}{FAISS_SUFFIX}"

    def bm25_index(self, key: str) -> Path:
        return self.root / BM25_DIR / key

    def onnx_export(self, model_slug: str, key: str) -> Path:
        return self.root / ONNX_DIR / f"{model_slug}__{key[:16]}"

    def rerank_scores(self, model_slug: str, key: str) -> Path:
        """Cross-encoder scores of one model at one max length and precision (one file per scoring pass)."""
        return self.root / RERANK_DIR / f"{model_slug}__{key[:16]}"

    @staticmethod
    def exact_check(export_folder: Path) -> Path:
        """The recorded exactness check of an ONNX export, kept in its folder (cleared with it)."""
        return Path(export_folder) / EXACT_CHECK

    def judge_folder(self, judge_model: str) -> Path:
        """Every cached reply of one judge model (``harness cache clear`` frees them together)."""
        return self.root / JUDGE_DIR / safe_name(judge_model)

    def judge_reply(self, judge_model: str, key: str) -> Path:
        """One judge call's reply, keyed by the prompt version, the model and every input."""
        return self.judge_folder(judge_model) / f"{key}.json"


@dataclass
class CacheEntry:
    """One cached artifact as ``harness cache list`` shows it; ``key`` is what ``clear`` selects by."""

    kind: str
    key: str
    path: Path
    bytes: int
    complete: bool
    dataset: str | None = None
    model: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path)}


# A listing reads manifests it did not just write: an edited or damaged one is shown for what it is, never
# a traceback, and never a count it would loop over (``num_shards: 1e11``).
MAX_LISTED_SHARDS = 1_000_000


def _whole(value: Any, high: int = 10**12) -> int | None:
    """A manifest's count, or ``None`` unless it is a whole number from 0 to ``high``."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high else None


def _text(value: Any) -> str | None:
    """A manifest's name or key, or ``None`` unless it is text."""
    return value if isinstance(value, str) else None


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


def _is_leftover(path: Path) -> bool:
    return path.name.startswith(".") and path.name.endswith(".tmp")


def _folders(parent: Path) -> list[Path]:
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir() and not _is_leftover(p))


def _embeddings_entries(root: Path) -> list[CacheEntry]:
    found = []
    for directory in _folders(root / EMBEDDINGS_DIR):
        manifest = read_json_or_none(directory / MANIFEST) or {}
        num_shards = _whole(manifest.get("num_shards"), MAX_LISTED_SHARDS)
        indexes = sorted(directory.glob(f"*{FAISS_SUFFIX}"))
        done = len(finished_shards(directory, num_shards or 0))
        seconds = manifest.get("encode_seconds")
        found.append(
            CacheEntry(
                kind="embeddings",
                key=_text(manifest.get("key")) or directory.name.rsplit("__", 1)[-1],
                path=directory,
                bytes=_size(directory) - sum(_size(index) for index in indexes),
                complete=manifest.get("complete") is True and num_shards is not None,
                dataset=_text(manifest.get("dataset")),
                model=_text(manifest.get("model")),
                details={
                    "part": _text(manifest.get("kind")) or "unknown",
                    "split": _text(manifest.get("split")),
                    "count": _whole(manifest.get("num_docs")),
                    "dim": _whole(manifest.get("dim")),
                    "shards_done": done,
                    "num_shards": num_shards if num_shards is not None else "?",
                    "encode_seconds": seconds if isinstance(seconds, (int, float)) else None,
                },
            )
        )
        found.extend(_faiss_entries(directory, manifest, indexes))
    return found


def _faiss_entries(directory: Path, manifest: dict[str, Any], indexes: list[Path]) -> list[CacheEntry]:
    # An index is keyed by the vectors it holds (the embeddings key) and its factory (the file name).
    embeddings_key = _text(manifest.get("key")) or directory.name
    return [
        CacheEntry(
            kind="faiss",
            key=digest_of({"embeddings": embeddings_key, "file": index.name}),
            path=index,
            bytes=_size(index),
            complete=True,
            dataset=_text(manifest.get("dataset")),
            model=_text(manifest.get("model")),
            details={"index": index.stem.removeprefix("index-"), "embeddings_key": embeddings_key},
        )
        for index in indexes
    ]


def _bm25_entries(root: Path) -> list[CacheEntry]:
    found = []
    for directory in _folders(root / BM25_DIR):
        manifest = read_json_or_none(directory / MANIFEST)
        settings = (manifest or {}).get("settings")
        settings = settings if isinstance(settings, dict) else {}
        found.append(
            CacheEntry(
                kind="bm25",
                key=directory.name,
                path=directory,
                bytes=_size(directory),
                complete=manifest is not None,
                dataset=_text((manifest or {}).get("dataset")),
                model=_text((manifest or {}).get("model")),
                details={
                    "count": _whole((manifest or {}).get("num_docs")),
                    "library": _text(settings.get("library")),
                },
            )
        )
    return found


def _onnx_entries(root: Path) -> list[CacheEntry]:
    found = []
    for directory in _folders(root / ONNX_DIR):
        record = read_json_or_none(directory / EXPORT_RECORD)
        found.append(
            CacheEntry(
                kind="onnx",
                key=_text((record or {}).get("key")) or directory.name.rsplit("__", 1)[-1],
                path=directory,
                bytes=_size(directory),
                # A runtime choice kept without its export (torch won) is a complete entry of its own.
                complete=(record is not None and (directory / "model.onnx").is_file())
                or (record is None and (directory / EXACT_CHECK).is_file()),
                model=directory.name.rsplit("__", 1)[0],
                details={"exact_check": (directory / EXACT_CHECK).is_file()},
            )
        )
    return found


def _judge_entries(root: Path) -> list[CacheEntry]:
    found = []
    for directory in _folders(root / JUDGE_DIR):
        replies = [path for path in directory.glob("*.json") if not _is_leftover(path)]
        found.append(
            CacheEntry(
                kind="judge",
                key=digest_of({"judge": directory.name}),
                path=directory,
                bytes=_size(directory),
                complete=True,
                model=directory.name,
                details={"replies": len(replies)},
            )
        )
    return found


def _rerank_entries(root: Path) -> list[CacheEntry]:
    found = []
    for directory in _folders(root / RERANK_DIR):
        manifest = read_json_or_none(directory / MANIFEST)
        score_files = sorted(directory.glob("scores-*.json"))
        found.append(
            CacheEntry(
                kind="rerank",
                key=_text((manifest or {}).get("key")) or directory.name.rsplit("__", 1)[-1],
                path=directory,
                bytes=_size(directory),
                complete=manifest is not None,
                model=_text((manifest or {}).get("model")),
                details={"files": len(score_files), "max_length": _whole((manifest or {}).get("max_length"))},
            )
        )
    return found


def cache_entries(root: str | Path, kind: str | None = None) -> list[CacheEntry]:
    """Every cached artifact under ``root`` (of one ``kind`` when given), in a stable order."""
    root = Path(root)
    readers = {
        "embeddings": _embeddings_entries,
        "bm25": _bm25_entries,
        "onnx": _onnx_entries,
        "judge": _judge_entries,
        "rerank": _rerank_entries,
    }
    found = [entry for read in readers.values() for entry in read(root)]
    return [entry for entry in found if kind is None or entry.kind == kind]


def leftovers(root: str | Path) -> list[Path]:
    """Temporary files and folders that killed writers left behind (never read by any run)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found: list[Path] = []
    for path in sorted(root.rglob(".*.tmp")):
        if not any(parent in found for parent in path.parents):
            found.append(path)
    return found


MIN_KEY_PREFIX = 4  # shorter prefixes select too much by accident (an unset $KEY is "")
_KEY_PREFIX = re.compile(r"[0-9a-f]+")


def check_key_prefixes(prefixes: list[str]) -> None:
    """Refuse key prefixes that are empty, too short or not hex before anything is deleted by them."""
    for prefix in prefixes:
        if len(prefix) < MIN_KEY_PREFIX or not _KEY_PREFIX.fullmatch(prefix):
            shown = "an empty KEY" if not prefix.strip() else f"KEY {prefix!r}"
            raise HarnessError(
                f"{shown} is ambiguous: give at least {MIN_KEY_PREFIX} hex characters of a key from "
                "`harness cache list`, or --all to clear everything"
            )


def entries_by_prefix(entries: list[CacheEntry], prefixes: list[str]) -> list[CacheEntry]:
    """The entries whose key starts with one of ``prefixes``, once each; every prefix must match one."""
    check_key_prefixes(prefixes)
    chosen: list[CacheEntry] = []
    for prefix in prefixes:
        matches = [entry for entry in entries if entry.key.startswith(prefix)]
        if not matches:
            raise HarnessError(
                f"no cache entry has a key starting with {prefix!r} (see `harness cache list`)"
            )
        chosen.extend(entry for entry in matches if entry not in chosen)
    return chosen


def remove_entries(entries: list[CacheEntry]) -> tuple[int, int]:
    """Delete ``entries``; return how many were there to remove and the bytes freed."""
    removed = freed = 0
    # FAISS indexes first: they live inside the embeddings folders the same call may remove.
    for entry in sorted(entries, key=lambda entry: entry.kind != "faiss"):
        if entry.path.exists():
            freed += remove_path(entry.path)
            removed += 1
    return removed, freed


def remove_path(path: Path) -> int:
    """Delete a file or folder; return the bytes freed."""
    freed = _size(path)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    return freed
