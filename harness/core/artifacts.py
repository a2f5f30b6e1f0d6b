"""The one checked way to write and read back a cached artifact's files.

Whoever writes an artifact records, for each file, its size and sha256 (and, for arrays, shape and
dtype) at write time; whoever reads it back goes through ``load_array`` / ``check_files``, which refuse
a file that was truncated, overwritten from outside or written with another shape, with one line
naming the file and the fix. Nothing here decides what an artifact means: ``harness.core.cache`` says
where it lives, the stages say what it holds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write, file_digest

ArrayRecord = dict[str, Any]  # {"sha256", "bytes", "shape", "dtype"}
FileRecord = dict[str, Any]  # {"sha256", "bytes"}


class CorruptArtifact(HarnessError):
    """A cached file is not what was written: the message names it and how to get a good one."""

    def __init__(self, path: str | Path, problem: str, fix: str):
        super().__init__(f"{path}: {problem}; {fix}")
        self.path = Path(path)
        self.problem = problem


def file_record(path: str | Path) -> FileRecord:
    """What a file is now: its size and sha256."""
    return {"sha256": file_digest(path), "bytes": os.path.getsize(path)}


def save_array(path: str | Path, array: np.ndarray) -> ArrayRecord:
    """Write ``array`` as ``.npy`` (no pickle) atomically; return what ``load_array`` checks it against."""
    array = np.ascontiguousarray(array)
    with atomic_write(path, "wb") as handle:
        np.save(handle, array, allow_pickle=False)
    return {**file_record(path), "shape": list(array.shape), "dtype": str(array.dtype)}


def _check_file(path: Path, record: FileRecord | None, fix: str) -> None:
    if not path.is_file():
        raise CorruptArtifact(path, "missing from the cache", fix)
    if record is None:
        return
    size = path.stat().st_size
    if size != record.get("bytes"):
        raise CorruptArtifact(
            path, f"{size} bytes, {record.get('bytes')} were written (truncated or replaced)", fix
        )
    if file_digest(path) != record.get("sha256"):
        raise CorruptArtifact(path, "changed since it was written (sha256 differs)", fix)


def load_array(
    path: str | Path,
    record: ArrayRecord | None,
    *,
    shape: tuple[int | None, ...] | None = None,
    dtype: str = "float32",
    mmap: bool = False,
    fix: str,
) -> np.ndarray:
    """Read back an array written by ``save_array``, refusing anything but exactly that.

    ``record`` is what the writer recorded (``None`` for files written before records existed: then
    only readability, ``shape`` and ``dtype`` are checked). ``shape`` entries of ``None`` match any size.
    """
    path = Path(path)
    _check_file(path, record, fix)
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise CorruptArtifact(
            path, f"unreadable ({str(error).splitlines()[0] if str(error) else error})", fix
        ) from None
    expected_dtype = record["dtype"] if record is not None else dtype
    if str(array.dtype) != expected_dtype:
        raise CorruptArtifact(path, f"dtype {array.dtype}, expected {expected_dtype}", fix)
    for expected in (tuple(record["shape"]) if record is not None else None, shape):
        if expected is not None and not _shape_matches(array.shape, expected):
            raise CorruptArtifact(path, f"shape {array.shape}, expected {expected}", fix)
    return array


def _shape_matches(shape: tuple[int, ...], expected: tuple[int | None, ...]) -> bool:
    return len(shape) == len(expected) and all(
        want is None or got == want for got, want in zip(shape, expected, strict=True)
    )


def record_files(folder: str | Path) -> dict[str, FileRecord]:
    """Size and sha256 of every file below ``folder``, by path relative to it (to check later)."""
    folder = Path(folder)
    return {
        path.relative_to(folder).as_posix(): file_record(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def check_files(folder: str | Path, records: dict[str, FileRecord], *, fix: str) -> None:
    """Refuse the artifact in ``folder`` when any recorded file is missing, truncated or changed."""
    folder = Path(folder)
    for relative, record in records.items():
        _check_file(folder / relative, record, fix)
