"""``harness cache list|clear``: show and free the embedding cache."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.paths import default_cache_dir


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "cache",
        help="show or free cached corpus and query embeddings",
        description="Corpus and query embeddings are cached by data checksums, model identity and every "
        "vector-affecting setting, so identical runs never re-encode. List what is cached, or free it.",
    )
    actions = parser.add_subparsers(title="actions", dest="cache_action", metavar="ACTION", required=True)

    listing = actions.add_parser(
        "list",
        help="one line per cache entry: key, dataset, model, kind, size",
        description="List cache entries. KEY is what `harness cache clear` takes (a prefix selects every entry whose key starts with it).",
    )
    _add_cache_dir(listing)
    listing.add_argument("--json", action="store_true", help="print the entries as JSON instead of a table")
    listing.set_defaults(func=run_list)

    clearing = actions.add_parser(
        "clear",
        help="delete cache entries by key prefix, or all of them",
        description="Delete cache entries (embeddings and any FAISS index saved beside them). "
        "Give key prefixes from `harness cache list`, or --all.",
    )
    _add_cache_dir(clearing)
    clearing.add_argument("keys", nargs="*", metavar="KEY", help="key prefix(es) of the entries to delete")
    clearing.add_argument("--all", action="store_true", help="delete every entry in the cache")
    clearing.set_defaults(func=run_clear)


def _add_cache_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="cache folder (default: env HARNESS_CACHE_DIR, else ./cache)",
    )


def _cache(args: argparse.Namespace):
    from harness.encoding.store import EmbeddingCache

    return EmbeddingCache(args.cache_dir if args.cache_dir is not None else default_cache_dir())


def _size(num_bytes: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if num_bytes < 1024 or unit == "GB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.1f} TB"


def run_list(args: argparse.Namespace) -> int:
    cache = _cache(args)
    entries = cache.entries()
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    if not entries:
        print(f"no cached embeddings in {cache.root}")
        return 0
    header = ("KEY", "KIND", "DATASET", "MODEL", "ITEMS", "DIM", "SHARDS", "SIZE", "STATUS")
    rows = [
        (
            entry["key"][:12],
            entry["kind"],
            entry["dataset"] or "?",
            entry["model"] or "?",
            str(entry["count"] if entry["count"] is not None else "?"),
            str(entry["dim"] if entry["dim"] is not None else "?"),
            f"{entry['shards_done']}/{entry['num_shards']}",
            _size(entry["bytes"]),
            "complete" if entry["complete"] else "partial (resumes on next run)",
        )
        for entry in entries
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    total = sum(entry["bytes"] for entry in entries)
    print(f"{len(entries)} entries, {_size(total)} in {cache.root}")
    return 0


def run_clear(args: argparse.Namespace) -> int:
    cache = _cache(args)
    if args.all and args.keys:
        raise HarnessError("give either KEY prefixes or --all, not both")
    if not args.all and not args.keys:
        raise HarnessError("say what to clear: KEY prefixes from `harness cache list`, or --all")
    entries = cache.entries()
    if args.all:
        chosen = entries
    else:
        chosen = []
        for prefix in args.keys:
            matches = [entry for entry in entries if entry["key"].startswith(prefix)]
            if not matches:
                raise HarnessError(
                    f"no cache entry has a key starting with {prefix!r} (see `harness cache list`)"
                )
            chosen.extend(entry for entry in matches if entry not in chosen)
    freed = sum(entry["bytes"] for entry in chosen)
    removed = sum(cache.clear(entry["key"]) for entry in chosen)
    print(f"removed {removed} entr{'y' if removed == 1 else 'ies'}, freed {_size(freed)} from {cache.root}")
    return 0
