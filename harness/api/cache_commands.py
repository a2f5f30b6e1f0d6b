"""``harness cache list | clear``: show and free everything the harness caches (:mod:`harness.core.cache`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.api.command_result import Command, CommandGroup, CommandResult
from harness.core.cache import (
    KINDS,
    CacheEntry,
    cache_entries,
    entries_by_prefix,
    leftovers,
    remove_entries,
    remove_path,
)
from harness.core.errors import HarnessError
from harness.core.options import OptionsRecord, folder, option
from harness.core.paths import default_cache_dir
from harness.core.text_table import text_table


def cache_dir_option() -> Any:
    """``--cache-dir DIR`` (None: env HARNESS_CACHE_DIR, else ./cache)."""
    return option(None, parse=folder, help="cache folder (default: env HARNESS_CACHE_DIR, else ./cache)")


def kind_option() -> Any:
    """``--kind KIND``: only the entries of one kind."""
    return option(None, choices=KINDS, help="only entries of this kind")


def _root(cache_dir: Path | None) -> Path:
    return cache_dir if cache_dir is not None else default_cache_dir()


def cache_size(num_bytes: float) -> str:
    """A size on disk in binary units (``1.5 MB`` is 1.5 x 1024 x 1024 bytes)."""
    for unit in ("B", "KB", "MB"):
        if num_bytes < 1024:
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.1f} GB"


# ---------------------------------------------------------------------------------------- list


class CacheListOptions(OptionsRecord):
    """``harness cache list``: the cached artifacts, one line each."""

    cache_dir: Path | None = cache_dir_option()
    kind: str | None = kind_option()
    as_json: bool = option(
        False, flags=("--json",), action="store_true", help="print the entries as JSON instead of a table"
    )


@dataclass
class CacheListResult(CommandResult):
    """The cached artifacts under ``root`` (of ``kind``, when given) and the leftovers of killed runs."""

    root: Path
    kind: str | None
    entries: list[CacheEntry]
    leftovers: list[Path] = field(default_factory=list)
    as_json: bool = False

    def payload(self) -> dict[str, Any]:
        return {
            "cache_dir": str(self.root),
            "kind": self.kind,
            "entries": [entry.to_json() for entry in self.entries],
            "bytes": sum(entry.bytes for entry in self.entries),
            "leftovers": [str(path) for path in self.leftovers],
        }

    def render(self) -> str:
        """The table with a total line, or with ``as_json`` the entries as a JSON list."""
        if self.as_json:
            return json.dumps([entry.to_json() for entry in self.entries], indent=2)
        if not self.entries:
            return f"nothing cached in {self.root}" + (f" of kind {self.kind}" if self.kind else "")
        header = ("KEY", "KIND", "DATASET", "MODEL", "WHAT", "SIZE", "STATUS")
        lines = text_table([header, *(_row(entry) for entry in self.entries)])
        total = sum(entry.bytes for entry in self.entries)
        lines.append(f"{len(self.entries)} entries, {cache_size(total)} in {self.root}")
        if self.leftovers:
            lines.append(
                f"{len(self.leftovers)} leftover temporary file(s) of killed runs: `harness cache clear --leftovers`"
            )
        return "\n".join(lines)


def _row(entry: CacheEntry) -> tuple[str, ...]:
    return (
        entry.key[:12],
        entry.kind,
        entry.dataset or ("-" if entry.kind in ("onnx", "judge") else "?"),  # these serve every dataset
        entry.model or "?",
        _what(entry),
        cache_size(entry.bytes),
        "complete" if entry.complete else "partial (resumes on next run)",
    )


def _what(entry: CacheEntry) -> str:
    """The entry's own detail column: which part, how far along, which index."""
    details = entry.details
    if entry.kind == "embeddings":
        return (
            f"{details['part']} {details['shards_done']}/{details['num_shards']} shards, dim {details['dim']}"
        )
    if entry.kind == "faiss":
        return f"index {details['index']}"
    if entry.kind == "bm25":
        return f"{details['count']} docs"
    if entry.kind == "judge":
        return f"{details['replies']} replies"
    if entry.kind == "rerank":
        return f"{details['files']} score files, max length {details['max_length']}"
    return "exact check recorded" if details.get("exact_check") else ""


def cache_list(options: CacheListOptions | None = None, /, **values: Any) -> CacheListResult:
    """List the cached embeddings, FAISS and BM25 indexes, ONNX exports, judge replies and rerank scores.

    E.g. ``cache_list(cache_dir="cache", kind="embeddings").entries``; each entry's ``key`` is what
    :func:`cache_clear` selects by (a prefix of it). ``as_json`` makes ``render()`` the entries as JSON.
    """
    options = CacheListOptions.coerce(options, values)
    root = _root(options.cache_dir)
    entries = cache_entries(root, options.kind)
    return CacheListResult(
        root=root, kind=options.kind, entries=entries, leftovers=leftovers(root), as_json=options.as_json
    )


# --------------------------------------------------------------------------------------- clear


class CacheClearOptions(OptionsRecord):
    """``harness cache clear KEY.. | --all | --leftovers``: delete cached artifacts."""

    cache_dir: Path | None = cache_dir_option()
    kind: str | None = kind_option()
    keys: list[str] = option(
        default_factory=list,
        positional=True,
        nargs="*",
        metavar="KEY",
        help="key prefix(es) of the entries to delete",
    )
    all: bool = option(False, action="store_true", help="delete every entry (of --kind, if given)")
    leftovers: bool = option(False, action="store_true", help="delete temporary files of killed runs")


@dataclass
class CacheClearResult(CommandResult):
    """How many entries (and, with ``leftovers``, leftover files) were deleted, and the bytes freed."""

    root: Path
    removed: int
    freed: int
    leftovers_removed: int | None = None  # None: leftovers were not asked for

    def payload(self) -> dict[str, Any]:
        return {
            "cache_dir": str(self.root),
            "removed": self.removed,
            "leftovers_removed": self.leftovers_removed,
            "bytes_freed": self.freed,
        }

    def render(self) -> str:
        noun = "entry" if self.removed == 1 else "entries"
        extra = (
            f" and {self.leftovers_removed} leftover file(s)" if self.leftovers_removed is not None else ""
        )
        return f"removed {self.removed} {noun}{extra}, freed {cache_size(self.freed)} from {self.root}"


def cache_clear(options: CacheClearOptions | None = None, /, **values: Any) -> CacheClearResult:
    """Delete cached artifacts, as ``harness cache clear``.

    Selects by key prefix (``keys``) or everything (``all``, of ``kind`` if given); ``leftovers`` also
    frees the temporary files of killed runs. Clearing embeddings also clears the FAISS indexes built over them. E.g.
    ``cache_clear(keys=["3f2a9c"])`` or ``cache_clear(all=True, kind="onnx")``; the result counts what
    was removed and freed. Nothing to clear, or both keys and ``all``, raises ``HarnessError``.
    """
    options = CacheClearOptions.coerce(options, values)
    if options.all and options.keys:
        raise HarnessError("give either KEY prefixes or --all, not both")
    if not (options.all or options.keys or options.leftovers):
        raise HarnessError("say what to clear: KEY prefixes from `harness cache list`, --all or --leftovers")
    root = _root(options.cache_dir)
    removed = freed = 0
    if options.all or options.keys:
        entries = cache_entries(root, options.kind)
        removed, freed = remove_entries(entries if options.all else entries_by_prefix(entries, options.keys))
    result = CacheClearResult(root=root, removed=removed, freed=freed)
    if options.leftovers:
        stray = leftovers(root)
        result.freed += sum(remove_path(path) for path in stray)
        result.leftovers_removed = len(stray)
    return result


CACHE = CommandGroup(
    "cache",
    help="show or free cached embeddings, FAISS and BM25 indexes, ONNX exports and judge replies",
    description="Embeddings, FAISS indexes, BM25 indexes, ONNX exports and judge replies are cached by data "
    "checksums, model identity and every setting that changes them, so identical runs never "
    "recompute them. List what is cached, or free it.",
    title="actions",
    required=True,  # ``harness cache`` alone is an error, not its help
    commands=(
        Command(
            "list",
            CacheListOptions,
            cache_list,
            help="one line per cached artifact: key, kind, dataset, model, size, status",
            description="List cached artifacts. KEY is what `harness cache clear` takes (a prefix selects "
            "every entry whose key starts with it).",
        ),
        Command(
            "clear",
            CacheClearOptions,
            cache_clear,
            help="delete cached artifacts by key prefix or kind, or all of them",
            description="Delete cached artifacts. Give key prefixes from `harness cache list`, or --kind, "
            "or --all. Clearing embeddings also clears the FAISS indexes built over them. --leftovers frees "
            "the temporary files of killed runs (run it while no harness command is writing to the cache).",
        ),
    ),
)

COMMANDS = (CACHE,)
