"""``harness cache list|clear``: show and free everything the harness caches (harness.core.cache)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.cli.common import folder
from harness.core.cache import KINDS, CacheEntry, cache_entries, check_key_prefixes, leftovers, remove_path
from harness.core.errors import HarnessError
from harness.core.paths import default_cache_dir


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "cache",
        help="show or free cached embeddings, FAISS and BM25 indexes, ONNX exports and judge replies",
        description="Embeddings, FAISS indexes, BM25 indexes, ONNX exports and judge replies are cached by data "
        "checksums, model identity and every setting that changes them, so identical runs never "
        "recompute them. List what is cached, or free it.",
    )
    actions = parser.add_subparsers(title="actions", dest="cache_action", metavar="ACTION", required=True)

    listing = actions.add_parser(
        "list",
        help="one line per cached artifact: key, kind, dataset, model, size, status",
        description="List cached artifacts. KEY is what `harness cache clear` takes (a prefix selects "
        "every entry whose key starts with it).",
    )
    _add_common(listing)
    listing.add_argument("--json", action="store_true", help="print the entries as JSON instead of a table")
    listing.set_defaults(func=run_list)

    clearing = actions.add_parser(
        "clear",
        help="delete cached artifacts by key prefix or kind, or all of them",
        description="Delete cached artifacts. Give key prefixes from `harness cache list`, or --kind, "
        "or --all. Clearing embeddings also clears the FAISS indexes built over them. --leftovers frees "
        "the temporary files of killed runs (run it while no harness command is writing to the cache).",
    )
    _add_common(clearing)
    clearing.add_argument("keys", nargs="*", metavar="KEY", help="key prefix(es) of the entries to delete")
    clearing.add_argument("--all", action="store_true", help="delete every entry (of --kind, if given)")
    clearing.add_argument("--leftovers", action="store_true", help="delete temporary files of killed runs")
    clearing.set_defaults(func=run_clear)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-dir",
        type=folder,
        default=None,
        help="cache folder (default: env HARNESS_CACHE_DIR, else ./cache)",
    )
    parser.add_argument("--kind", choices=KINDS, default=None, help="only entries of this kind")


def _root(args: argparse.Namespace) -> Path:
    return args.cache_dir if args.cache_dir is not None else default_cache_dir()


def _size(num_bytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if num_bytes < 1024 or unit == "GB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.1f} TB"


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


def run_list(args: argparse.Namespace) -> int:
    root = _root(args)
    entries = cache_entries(root, args.kind)
    if args.json:
        print(json.dumps([entry.to_json() for entry in entries], indent=2))
        return 0
    if not entries:
        print(f"nothing cached in {root}" + (f" of kind {args.kind}" if args.kind else ""))
        return 0
    header = ("KEY", "KIND", "DATASET", "MODEL", "WHAT", "SIZE", "STATUS")
    rows = [
        (
            entry.key[:12],
            entry.kind,
            entry.dataset or ("-" if entry.kind in ("onnx", "judge") else "?"),  # serves every dataset
            entry.model or "?",
            _what(entry),
            _size(entry.bytes),
            "complete" if entry.complete else "partial (resumes on next run)",
        )
        for entry in entries
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    total = sum(entry.bytes for entry in entries)
    print(f"{len(entries)} entries, {_size(total)} in {root}")
    stray = leftovers(root)
    if stray:
        print(f"{len(stray)} leftover temporary file(s) of killed runs: `harness cache clear --leftovers`")
    return 0


def _chosen(args: argparse.Namespace, entries: list[CacheEntry]) -> list[CacheEntry]:
    if args.all:
        return entries
    check_key_prefixes(args.keys)
    chosen: list[CacheEntry] = []
    for prefix in args.keys:
        matches = [entry for entry in entries if entry.key.startswith(prefix)]
        if not matches:
            raise HarnessError(
                f"no cache entry has a key starting with {prefix!r} (see `harness cache list`)"
            )
        chosen.extend(entry for entry in matches if entry not in chosen)
    return chosen


def run_clear(args: argparse.Namespace) -> int:
    root = _root(args)
    if args.all and args.keys:
        raise HarnessError("give either KEY prefixes or --all, not both")
    if not (args.all or args.keys or args.leftovers):
        raise HarnessError("say what to clear: KEY prefixes from `harness cache list`, --all or --leftovers")
    freed = removed = 0
    if args.all or args.keys:
        # FAISS indexes first: they live inside the embeddings folders an --all also removes.
        chosen = sorted(_chosen(args, cache_entries(root, args.kind)), key=lambda e: e.kind != "faiss")
        for entry in chosen:
            if entry.path.exists():
                freed += remove_path(entry.path)
                removed += 1
    stray = leftovers(root) if args.leftovers else []
    for path in stray:
        freed += remove_path(path)
    noun = "entry" if removed == 1 else "entries"
    extra = f" and {len(stray)} leftover file(s)" if args.leftovers else ""
    print(f"removed {removed} {noun}{extra}, freed {_size(freed)} from {root}")
    return 0
