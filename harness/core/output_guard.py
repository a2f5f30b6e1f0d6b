"""One guard for every file a command writes where the user said: never over an input or a harness result.

A command's output path (``--output``, an UltraRAG ``save_path``, a fused run) is refused before anything is
computed when it

* is one of the files the same command reads (the same file: compared by device and inode, so a symlink
  or a hard link to the input is caught as well as the input's own path);
* is, or lies inside, a harness result folder (``results/<dataset>/<model>/``: the folder holding the
  result's ``metrics.json`` and ``provenance.json``), which only the pipeline writes, whole;
* names the same file as another output of the same command.

Records mark their path options ``role="input"`` or ``role="output"`` (:func:`harness.core.options.option`),
so the check runs whenever a record is built: from the command line, from an experiment step, from Python.
:func:`check_output` is also the write path's backstop for files no option names (a default output).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.core.errors import OutputError

# What marks a harness result folder: the two files only the pipeline's result writer puts together
# (harness.results.result_store takes its METRICS_FILE, PROVENANCE_FILE from here). A user's own folder
# with a metrics.json (``evaluate -o out/metrics.json``) is not one.
RESULT_MARKERS = ("metrics.json", "provenance.json")

Inputs = Mapping[str, Path | str | Iterable[Path | str] | None]


def result_folder_holding(path: str | Path) -> Path | None:
    """The harness result folder that ``path`` is or lies inside (symlinks followed), or None."""
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop or a name the OS refuses: the write says so
        return None
    for folder in (resolved, *resolved.parents):
        if all((folder / name).is_file() for name in RESULT_MARKERS):
            return folder
    return None


def same_file(first: str | Path, second: str | Path) -> bool:
    """Whether two paths name one existing file (its own path, a symlink to it or a hard link)."""
    try:
        return os.path.samefile(first, second)
    except (OSError, ValueError):  # either missing, unreadable, or a name the OS refuses
        return False


def _paths(value: Path | str | Iterable[Path | str] | None) -> list[Path]:
    if value is None:
        return []
    if isinstance(value, str | Path):
        return [Path(value)]
    return [Path(item) for item in value]


def check_output(path: str | Path, label: str = "output", inputs: Inputs | None = None) -> Path:
    """``path`` if a command may write it; else one :class:`OutputError` naming it, the option and the fix.

    ``label``: how the user named the output (``--output``, ``save_path``); ``inputs``: what the command
    reads, by label (``RUN`` -> a path, ``RUN_B`` -> several).
    """
    path = Path(path)
    for input_label, value in (inputs or {}).items():
        for source in _paths(value):
            if not source.is_dir() and same_file(path, source):
                shown = "" if str(source) == str(path) else f" ({source})"
                raise OutputError(
                    f"cannot write {path} ({label}): it is {input_label}{shown}, an input of this command; "
                    "write the output to another file"
                )
    folder = result_folder_holding(path)
    if folder is not None:
        where = "is the harness result" if folder == path.resolve() else "lies inside the harness result"
        raise OutputError(
            f"cannot write {path} ({label}): it {where} {folder}, which only `harness eval` rewrites; "
            "write the output outside the result folders"
        )
    return path


def check_outputs(outputs: Mapping[str, Path | str | None], inputs: Inputs | None = None) -> None:
    """:func:`check_output` for each of a command's outputs, and no two outputs naming one file."""
    given = {label: Path(path) for label, path in outputs.items() if path is not None}
    for label, path in given.items():
        check_output(path, label, inputs)
    labels = list(given)
    for number, label in enumerate(labels):
        for other in labels[number + 1 :]:
            if given[label] == given[other] or same_file(given[label], given[other]):
                raise OutputError(
                    f"cannot write {given[label]} twice: {label} and {other} name the same file; "
                    "give them different paths"
                )
