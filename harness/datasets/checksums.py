"""Checksums and corpus scans remembered in the harness's cache, so big files are hashed and scanned once.

A value is kept under a key with the size and mtime of the files it was computed from; it is reused
while they are unchanged and recomputed otherwise. The values of one dataset folder persist in one file
of the cache, ``<cache>/checksums/<folder name>-<digest of its resolved path>.json`` (format
``{"version": 2, "folder": <resolved path>, "entries": {key: {"stamp": ..., "value": ...}}}``). Nothing is
ever written into a dataset folder: it may be a user's own folder or a shared, read-only mirror.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.cache import safe_name
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, file_digest, read_json_or_none
from harness.core.paths import checksums_dir

log = logging.getLogger(__name__)

# The sidecar older versions left inside dataset folders: never written, never trusted now.
SIDECAR_FILE = ".harness-checksums.json"
STORE_VERSION = 2

Stamp = list[list[int]]


def file_stamp(path: Path) -> list[int]:
    """``[size, mtime_ns]``: what tells a remembered value that its file changed."""
    status = path.stat()
    return [status.st_size, status.st_mtime_ns]


def store_file(root: Path, directory: Path) -> Path:
    """The file in ``directory`` that remembers the values of dataset folder ``root`` (by its resolved path)."""
    resolved = str(root.resolve())
    digest = hashlib.sha256(resolved.encode("utf-8")).hexdigest()[:16]
    return directory / f"{safe_name(root.resolve().name)}-{digest}.json"


class ChecksumStore:
    """Values computed from dataset files, remembered while those files keep their size and mtime.

    ``directory`` is where the values persist (default: ``<cache>/checksums``, the cache root as
    ``--cache-dir`` / ``HARNESS_CACHE_DIR`` give it, read when first needed); ``persist=False`` keeps them
    for the store's own lifetime only (copies about to be moved, which no later run will see at that path).
    One store may serve several folders; pass the same store to the steps of one run (loading,
    fingerprinting, verifying) so each file is hashed at most once.
    """

    def __init__(self, directory: str | Path | None = None, *, persist: bool = True) -> None:
        self._directory = Path(directory) if directory is not None else None
        self.persist = persist
        self._memo: dict[tuple[str, str], tuple[Stamp, Any]] = {}

    @property
    def directory(self) -> Path:
        return self._directory if self._directory is not None else checksums_dir()

    def path_for(self, root: Path) -> Path:
        """The file that remembers ``root``'s values."""
        return store_file(root, self.directory)

    def remembered(self, root: Path, key: str, paths: list[Path], compute: Callable[[], Any]) -> Any:
        """``compute()``, or its remembered value while the files in ``paths`` are unchanged."""
        stamp = [file_stamp(path) for path in paths]
        memo_key = (str(root.resolve()), key)
        if memo_key in self._memo and self._memo[memo_key][0] == stamp:
            return self._memo[memo_key][1]
        entries = self._read(root)
        entry = entries.get(key)
        if isinstance(entry, dict) and entry.get("stamp") == stamp:
            value = entry.get("value")
        else:
            value = compute()
            entries[key] = {"stamp": stamp, "value": value}
            self._write(root, entries, key)
        self._memo[memo_key] = (stamp, value)
        return value

    def sha256(self, root: Path, relative: str) -> str:
        """sha256 of ``root/relative``, remembered across runs while the file is unchanged."""
        path = root / relative
        return self.remembered(root, f"sha256:{relative}", [path], lambda: file_digest(path, "sha256"))

    def forget(self) -> None:
        """Drop the in-memory values (the stored ones stay): what a new process would see."""
        self._memo.clear()

    def _read(self, root: Path) -> dict[str, Any]:
        if not self.persist:
            return {}
        stored = read_json_or_none(self.path_for(root)) or {}
        entries = stored.get("entries")
        # Another folder whose path digest collides, or another format: start afresh.
        if stored.get("folder") != str(root.resolve()) or stored.get("version") != STORE_VERSION:
            return {}
        return entries if isinstance(entries, dict) else {}

    def _write(self, root: Path, entries: dict[str, Any], key: str) -> None:
        if not self.persist:
            return
        path = self.path_for(root)
        try:
            atomic_write_json(
                path, {"version": STORE_VERSION, "folder": str(root.resolve()), "entries": entries}
            )
        except HarnessError as error:  # an unwritable cache costs a re-hash next time, nothing more
            log.debug("cannot remember %s of %s in %s: %s", key, root, path, error)
