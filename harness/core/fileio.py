"""File helpers shared by every stage: tolerant text reading, atomic writes, checksums."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from harness.core.errors import HarnessError, InputError


def open_text(path: str | Path) -> IO[str]:
    """Open a text file for reading: ``.gz`` transparently, UTF-8 with or without BOM, any newline."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline=None)
    return open(path, encoding="utf-8-sig", newline=None)


def iter_lines(path: str | Path, offset: int = 0, first_line: int = 1) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` with 1-based numbers and the line ending removed.

    ``offset`` (a byte offset at a line start, plain files only: gzip cannot seek cheaply) and
    ``first_line`` (that line's number) start the reading part-way. Text that is not UTF-8 and files
    that cannot be read end in one ``HarnessError`` naming the file (and the line), for every reader.
    """
    path = Path(path)
    number = first_line - 1
    try:
        if offset:
            raw = open(path, "rb")  # noqa: SIM115 (closed by the TextIOWrapper below)
            raw.seek(offset)
            handle = io.TextIOWrapper(raw, encoding="utf-8", newline=None)
        else:
            handle = open_text(path)
        with handle:
            for number, line in enumerate(handle, start=first_line):
                yield number, line.rstrip("\r\n")
    except UnicodeDecodeError as error:
        # Text is decoded in blocks, so the error may surface before the bad line: find it exactly.
        line, reason = _first_undecodable_line(path) or (number + 1, error.reason)
        raise InputError(path, line, f"not UTF-8 text ({reason})", "save the file as UTF-8") from None
    except (OSError, EOFError) as error:  # unreadable, or a truncated/corrupt .gz
        raise HarnessError(f"cannot read {path}: {error}") from None


def _first_undecodable_line(path: Path) -> tuple[int, str] | None:
    """``(line number, reason)`` of the first line that is not UTF-8 (only called once decoding failed)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as raw:
            for number, line in enumerate(raw, start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as error:
                    return number, error.reason
    except (OSError, EOFError):
        return None
    return None


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Write to a temporary file beside ``path`` and rename it into place only on success.

    Readers never see a half-written file, and a crash leaves the previous version intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # mkstemp creates 0600; give the final file the usual permissions (0666 less the umask).
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_name, 0o666 & ~umask)
    try:
        kwargs = {"encoding": encoding} if "b" not in mode else {}
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def atomic_write_json(path: str | Path, payload: Any) -> None:
    """Write ``payload`` as indented JSON, atomically."""
    with atomic_write(path) as handle:
        json.dump(payload, handle, indent=2, sort_keys=False, ensure_ascii=False)
        handle.write("\n")


def file_digest(path: str | Path, algorithm: str = "sha256", chunk_size: int = 1 << 20) -> str:
    """Hex digest of a file, read in chunks so large files stay out of memory."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def describe_inputs(paths: dict[str, str | Path]) -> dict[str, dict[str, str]]:
    """``role -> {path, sha256}`` of the input files an output was computed from (recorded beside it)."""
    return {role: {"path": str(path), "sha256": file_digest(path)} for role, path in paths.items()}


def read_json_object(path: str | Path, *, fix: str | None = None) -> dict[str, Any]:
    """A JSON file holding one object; a missing, unreadable or malformed file is one ``InputError``."""
    try:
        with open_text(path) as handle:
            payload = json.load(handle)
    except FileNotFoundError:
        raise InputError(path, None, "missing file", fix) from None
    except json.JSONDecodeError as error:
        raise InputError(path, error.lineno, f"not valid JSON: {error.msg}", fix) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(path, None, f"unreadable ({error})", fix) from None
    if not isinstance(payload, dict):
        raise InputError(path, 1, "expected a JSON object", fix)
    return payload


def read_json_or_none(path: str | Path) -> dict[str, Any] | None:
    """A JSON object file, or ``None`` when it is absent, half-written or not an object (caches redo it)."""
    try:
        return read_json_object(path)
    except InputError:
        return None
