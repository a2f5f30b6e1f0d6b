"""Staging folders that say who made them, so the leftovers of killed runs can be told apart and freed.

Every writer that builds something big in a hidden folder and renames it into place (a dataset
install, a BM25 index) names that folder with an owner tag ``@<host>@<pid>@``. At its next start a
writer frees the staging folders that are provably stale: made on this host by a process that no
longer runs, or (another host's, or untagged from an older version) untouched for ``STALE_AFTER``.
A live writer's folder is never touched, whichever process looks.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# Another host's process cannot be asked whether it still runs: only this long an idle folder is stale.
STALE_AFTER = 24 * 3600.0
_OWNER = re.compile(r"@(?P<host>[^@/]+)@(?P<pid>\d+)@")


def owner_tag() -> str:
    """``@<host>@<pid>@``: which process on which machine a staging folder belongs to."""
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"
    return f"@{host}@{os.getpid()}@"


def make_staging(parent: Path, prefix: str, suffix: str = "") -> Path:
    """A new empty hidden folder in ``parent`` named ``<prefix><owner tag><random><suffix>``."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{owner_tag()}", suffix=suffix, dir=parent))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def is_stale(path: Path, *, max_age: float = STALE_AFTER, now: float | None = None) -> bool:
    """True when no running writer can own ``path`` (see the module docstring for the rule)."""
    owner = _OWNER.search(path.name)
    if owner and owner["host"] == owner_tag().split("@")[1]:
        return int(owner["pid"]) != os.getpid() and not _pid_alive(int(owner["pid"]))
    try:
        age = (now if now is not None else time.time()) - path.stat().st_mtime
    except FileNotFoundError:
        return False
    return age > max_age


def clean_stale(parent: Path, pattern: str, *, max_age: float = STALE_AFTER) -> list[Path]:
    """Delete the stale staging folders (or files) of ``parent`` matching ``pattern``; return them."""
    if not parent.is_dir():
        return []
    removed = []
    for path in sorted(parent.glob(pattern)):
        if not is_stale(path, max_age=max_age):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        if not path.exists():
            removed.append(path)
    if removed:
        log.info("freed %d leftover(s) of killed runs in %s", len(removed), parent)
    return removed


def staging_pattern(target: Path) -> str:
    """The glob that matches every staging folder :func:`staged_folder` makes for ``target``."""
    return f".{glob.escape(target.name)}.*.tmp"


@contextlib.contextmanager
def staged_folder(target: Path, *, max_age: float = STALE_AFTER) -> Iterator[Path]:
    """A new owner-tagged hidden folder beside ``target`` to build it in, then rename onto ``target``.

    First frees the stale staging folders earlier writers of ``target`` left (killed runs, see
    :func:`is_stale`), so leftovers never pile up. The new folder is removed when the block ends by an
    exception or without renaming it away; a kill that no handler sees leaves it for the next start.
    """
    clean_stale(target.parent, staging_pattern(target), max_age=max_age)
    staging = make_staging(target.parent, f".{target.name}.", suffix=".tmp")
    try:
        yield staging
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
