"""File helpers shared by every stage: tolerant text reading, atomic writes, checksums."""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import io
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from harness.core.errors import HarnessError, InputError, OutputError


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


# What to do about an OSError while writing, by errno; the message always names the path first.
_SPACE = "free some space there (or write elsewhere) and rerun; finished work is kept and resumes"
_PERMISSION = "choose a location you can write to, or change its permissions"
_OUTPUT_FIXES = {
    errno.ENOSPC: ("no space left on the device", _SPACE),
    errno.EDQUOT: ("disk quota exceeded", _SPACE),
    errno.EFBIG: ("file too large for the file system", "write it to another file system"),
    errno.EACCES: ("permission denied", _PERMISSION),
    errno.EPERM: ("operation not permitted", _PERMISSION),
    errno.EROFS: ("read-only file system", "choose a writable location"),
    errno.EISDIR: ("is a folder", "give a file name, e.g. a name inside that folder"),
    errno.ENOTDIR: (
        "part of the path is a file, not a folder",
        "move that file away, or choose another path",
    ),
    errno.ENOENT: ("its folder does not exist", "create the folder first, or choose another path"),
    errno.EEXIST: ("already exists and is not a folder", "remove it, or choose another path"),
    errno.ENAMETOOLONG: ("name too long", "choose a shorter path"),
}


def os_error_line(error: OSError) -> str:
    """One line for an ``OSError`` no stage turned into a :class:`HarnessError` (the CLI's last resort)."""
    problem, fix = _OUTPUT_FIXES.get(error.errno, (error.strerror or str(error), "check the path and rerun"))
    where = error.filename if error.filename is not None else "a file or folder"
    return f"{where}: {problem}; {fix}"


def output_error(path: str | Path, error: OSError) -> OutputError:
    """The one error for an ``OSError`` met while writing ``path``: the path, what happened, what to do."""
    problem, fix = _OUTPUT_FIXES.get(error.errno, (error.strerror or str(error), "check the path and rerun"))
    # Name the folder when it is the one at fault (not the file itself, nor its temporary twin).
    culprit = Path(error.filename) if error.filename else None
    own = culprit is None or culprit == Path(path) or culprit.name.startswith(f".{Path(path).name}.")
    where = "" if own else f" ({culprit})"
    return OutputError(f"cannot write {path}: {problem}{where}; {fix}")


def check_output_file(path: str | Path) -> Path:
    """A file the user asked to have written: refuse a folder, a file in the way, or a missing tree.

    Checked before any work, so a typo costs nothing. The file's own folder may be missing (the write
    creates it, as ``mkdir`` would), but not its parent too: a mistyped path must not silently grow a
    tree of folders (``/nonexistent/x/y.json``).
    """
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder; give a file name, e.g. {path / 'out.json'}")
    for folder in (path.parent, path.parent.parent):
        if folder.exists() and not folder.is_dir():
            raise OutputError(f"cannot write {path}: {folder} is a file, not a folder; choose another path")
    if not path.parent.parent.is_dir():
        missing = next(folder for folder in reversed(path.parents) if not folder.exists())
        raise OutputError(
            f"cannot write {path}: folder {missing} does not exist; create it first, or choose another path"
        )
    return path


def check_output_folder(path: str | Path) -> Path:
    """A folder the user asked to have files written into: may be new, but its parent must exist."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"cannot write into {path}: it is a file, not a folder; give a folder path")
    if not path.parent.is_dir():
        what = "is a file, not a folder" if path.parent.exists() else "does not exist"
        raise OutputError(f"cannot write into {path}: {path.parent} {what}; choose another path")
    return path


def _discard(tmp_name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp_name)


@contextlib.contextmanager
def atomic_write(
    path: str | Path, mode: str = "w", encoding: str | None = "utf-8", *, parents: bool = True
) -> Iterator[IO[Any]]:
    """Write to a temporary file beside ``path`` and rename it into place only on success.

    Readers never see a half-written file, and a crash or a full disk leaves the previous version
    intact. Any ``OSError`` while writing (disk full, permission, a folder in the way) becomes one
    :class:`OutputError` naming the path and the fix. ``parents=False`` (files the user named) creates
    at most the file's own folder and refuses a deeper missing path (:func:`check_output_file`).
    """
    path = Path(path)
    if not parents:
        check_output_file(path)
    try:
        path.parent.mkdir(parents=parents, exist_ok=True)
    except OSError as error:
        raise output_error(path, error) from None
    if path.is_dir():
        check_output_file(path)  # raises: a folder where the file goes
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise output_error(path, error) from None
    try:
        # mkstemp creates 0600; give the final file the usual permissions (0666 less the umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_name, 0o666 & ~umask)
        kwargs = {"encoding": encoding} if "b" not in mode else {}
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except OSError as error:
        _discard(tmp_name)
        if error.filename is not None and str(error.filename) not in (tmp_name, str(path)):
            raise  # about another file the caller touched inside the block: not this write's error
        raise output_error(path, error) from None
    except BaseException:
        _discard(tmp_name)
        raise


def atomic_write_json(path: str | Path, payload: Any, *, parents: bool = True) -> None:
    """Write ``payload`` as indented JSON, atomically (``parents`` as in :func:`atomic_write`)."""
    with atomic_write(path, parents=parents) as handle:
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


# Deeper JSON is refused: no file the harness reads nests past a few levels, and deeper values would
# exhaust the recursion of the readers (the C parser stops near 1000 with a RecursionError).
MAX_JSON_DEPTH = 200


def read_text(path: str | Path, *, fix: str | None = None) -> str:
    """A whole text file (UTF-8, BOM or not, ``.gz`` too); a missing, unreadable or non-UTF-8 file is one
    ``InputError`` naming the file (and the first bad line)."""
    path = Path(path)
    try:
        with open_text(path) as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError(path, None, "missing file", fix) from None
    except UnicodeDecodeError as error:
        line, reason = _first_undecodable_line(path) or (None, error.reason)
        raise InputError(path, line, f"not UTF-8 text ({reason})", "save the file as UTF-8") from None
    except (OSError, EOFError) as error:
        raise InputError(
            path, None, f"unreadable ({getattr(error, 'strerror', None) or error})", fix
        ) from None


def parse_json(
    text: str,
    path: str | Path,
    line: int | None = None,
    *,
    invalid: str = "not valid JSON",
    fix: str | None = None,
) -> Any:
    """The one JSON parser: ``text`` (a file's content, or line ``line`` of a JSON-lines file) as a value.

    Malformed JSON, a number too long to convert, and nesting deeper than :data:`MAX_JSON_DEPTH` are one
    ``InputError`` naming ``path`` and the line (``invalid`` words the first). ``NaN`` and ``Infinity`` parse
    as floats, as Python's ``json`` does: where a value must be text or an id, :func:`json_text` refuses them.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        where = line if line is not None else error.lineno
        raise InputError(path, where, f"{invalid} ({error.msg} at column {error.colno})", fix) from None
    except RecursionError:
        raise InputError(path, line, f"JSON nested deeper than {MAX_JSON_DEPTH} levels", fix) from None
    except ValueError:  # an integer past Python's conversion limit (4300 digits by default)
        raise InputError(path, line, f"{invalid} (a number with too many digits)", fix) from None
    # Counting brackets is cheap and bounds the depth: only text with many of them is walked.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth(value) > MAX_JSON_DEPTH:
        raise InputError(path, line, f"JSON nested deeper than {MAX_JSON_DEPTH} levels", fix)
    return value


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (a scalar: 0), walked without recursion."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        node, depth = pending.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in children)
    return deepest


def json_text(value: Any) -> str | None:
    """A JSON scalar where text is expected (an answer, an id): strings as they are, finite numbers as
    written; ``None`` for anything else, including ``NaN``/``Infinity`` (never the text "nan")."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    # bool is an int subclass, but ``true`` is never a meaningful answer or id.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def json_kind(value: Any) -> str:
    """What a JSON value is, for an error line: ``NaN``/``Infinity`` as written, else its Python type."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("-Infinity" if value < 0 else "Infinity")
    return type(value).__name__


def read_json(path: str | Path, *, fix: str | None = None) -> Any:
    """A JSON file's value through :func:`parse_json`; any problem is one ``InputError`` naming the file."""
    return parse_json(read_text(path, fix=fix), path, fix=fix)


def read_json_object(path: str | Path, *, fix: str | None = None) -> dict[str, Any]:
    """A JSON file holding one object; a missing, unreadable, malformed or too deep file is one ``InputError``."""
    payload = read_json(path, fix=fix)
    if not isinstance(payload, dict):
        raise InputError(path, 1, "expected a JSON object", fix)
    return payload


def read_json_or_none(path: str | Path) -> dict[str, Any] | None:
    """A JSON object file, or ``None`` when it is absent, damaged or not an object (caches redo it)."""
    try:
        return read_json_object(path)
    except InputError:
        return None
