"""Snapshot the sha256 of every file under some folders, to prove a refused run wrote nothing.

Usage in a fault test::

    from fault_snapshot import assert_unchanged, snapshot

    before = snapshot(results_dir, cache_dir, data_dir, inputs_dir)
    code, out, err = run_cli([...])          # the hostile case
    assert code == 2
    assert_unchanged(before, results_dir, cache_dir, data_dir, inputs_dir)

A folder (or a single file) that does not exist snapshots as nothing, so a run that
creates it is caught as an added path. ``assert_unchanged`` names every added,
removed and changed file in its failure message.

``refused_by_cli`` does the whole check for one command line run in-process::

    line = refused_by_cli(capsys, ["run", "x.yaml"], "x.yaml:3", "duplicate key", folders=[tmp_path])

It asserts exit code 2, exactly one ``error:`` line holding every needle (other
``warning:``/``note:`` lines allowed before it), no traceback, and nothing changed
under ``folders``; it returns the error line.
"""

from __future__ import annotations

import hashlib
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def snapshot(*folders: str | Path) -> dict[str, str]:
    """Map the path of every file under *folders* (files allowed too) to its sha256.

    Folders are listed as entries too (value ``"<dir>"``), so a run that leaves an empty
    staging folder behind is caught as well.
    """
    hashes: dict[str, str] = {}
    for folder in folders:
        root = Path(folder)
        if root.is_file():
            hashes[str(root)] = _sha256(root)
            continue
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if path.is_symlink():
                hashes[str(path)] = f"<link {path.readlink()}>"
            elif path.is_file():
                hashes[str(path)] = _sha256(path)
            elif path.is_dir():
                hashes[str(path)] = "<dir>"
    return hashes


def assert_unchanged(before: dict[str, str], *folders: str | Path) -> None:
    """Fail naming every file added, removed or changed under *folders* since *before*."""
    after = snapshot(*folders)
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(path for path in set(before) & set(after) if before[path] != after[path])
    problems = [f"added {p}" for p in added]
    problems += [f"removed {p}" for p in removed]
    problems += [f"changed {p}" for p in changed]
    assert not problems, "files changed by a refused run:\n" + "\n".join(problems)


def refused_by_cli(
    capsys: pytest.CaptureFixture[str],
    argv: Sequence[str | Path],
    *needles: str,
    folders: Iterable[str | Path] = (),
    exit_code: int = 2,
) -> str:
    """Run ``harness ARGV`` in-process and assert it was refused cleanly (see the module's docstring)."""
    from harness.cli import main

    folders = list(folders)
    before = snapshot(*folders)
    capsys.readouterr()
    try:
        code = main([str(arg) for arg in argv])
    except BaseException as error:  # a traceback: print it in the failure, it is the bug
        if isinstance(error, KeyboardInterrupt):
            raise
        pytest.fail(
            f"harness {' '.join(map(str, argv))} raised instead of refusing:\n{traceback.format_exc()}"
        )
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == exit_code, f"exit {code}, stderr:\n{err}"
    assert len(errors) == 1, f"expected one error line, stderr:\n{err}"
    assert err.rstrip("\n").splitlines()[-1] == errors[0], f"the error line must come last:\n{err}"
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    assert_unchanged(before, *folders)
    return errors[0]
