"""Checksums and corpus scans remembered beside the data, so big files are hashed and scanned once.

A value is kept under a key with the size and mtime of the files it was computed from; it is reused
while they are unchanged and recomputed otherwise. Values persist in the sidecar ``.harness-checksums.json``
of the dataset folder (format ``{"version": 1, "entries": {key: {"stamp": ..., "value": ...}}}``);
a read-only folder gets no sidecar, and the store then remembers values for its own lifetime only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.fileio import atomic_write_json, file_digest, read_json_or_none

log = logging.getLogger(__name__)

# Remembered checksums and corpus scans, beside the data (skipped when the folder is read-only).
SIDECAR_FILE = ".harness-checksums.json"
SIDECAR_VERSION = 1

Stamp = list[list[int]]


def file_stamp(path: Path) -> list[int]:
    """``[size, mtime_ns]``: what tells a remembered value that its file changed."""
    status = path.stat()
    return [status.st_size, status.st_mtime_ns]


def writable_folder(root: Path) -> bool:
    """Whether the harness may leave its sidecar in ``root``.

    Judged by the folder's mode bits, not ``os.access`` alone: root passes every access check, and a
    shared read-only mirror must stay untouched even then.
    """
    try:
        return bool(root.stat().st_mode & 0o222) and os.access(root, os.W_OK)
    except OSError:
        return False


class ChecksumStore:
    """Values computed from dataset files, remembered while those files keep their size and mtime.

    One store may serve several folders; each folder has its own sidecar. Pass the same store to the
    steps of one run (loading, fingerprinting, verifying) so a read-only folder is hashed only once.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str], tuple[Stamp, Any]] = {}

    def remembered(self, root: Path, key: str, paths: list[Path], compute: Callable[[], Any]) -> Any:
        """``compute()``, or its remembered value while the files in ``paths`` are unchanged."""
        stamp = [file_stamp(path) for path in paths]
        memo_key = (str(root.resolve()), key)
        if memo_key in self._memo and self._memo[memo_key][0] == stamp:
            return self._memo[memo_key][1]
        entries = self._read_sidecar(root)
        entry = entries.get(key)
        if isinstance(entry, dict) and entry.get("stamp") == stamp:
            value = entry.get("value")
        else:
            value = compute()
            entries[key] = {"stamp": stamp, "value": value}
            self._write_sidecar(root, entries, key)
        self._memo[memo_key] = (stamp, value)
        return value

    def sha256(self, root: Path, relative: str) -> str:
        """sha256 of ``root/relative``, remembered across runs while the file is unchanged."""
        path = root / relative
        return self.remembered(root, f"sha256:{relative}", [path], lambda: file_digest(path, "sha256"))

    def forget(self) -> None:
        """Drop the in-memory values (the sidecars stay): what a new process would see."""
        self._memo.clear()

    @staticmethod
    def _read_sidecar(root: Path) -> dict[str, Any]:
        entries = (read_json_or_none(root / SIDECAR_FILE) or {}).get("entries")
        return entries if isinstance(entries, dict) else {}

    @staticmethod
    def _write_sidecar(root: Path, entries: dict[str, Any], key: str) -> None:
        if not writable_folder(root):
            return
        sidecar = root / SIDECAR_FILE
        try:
            atomic_write_json(sidecar, {"version": SIDECAR_VERSION, "entries": entries})
        except OSError as error:
            log.debug("cannot remember %s in %s: %s", key, sidecar, error)
