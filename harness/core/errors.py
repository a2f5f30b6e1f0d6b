"""The one exception type the CLI turns into a single error line and a non-zero exit."""

from __future__ import annotations

from pathlib import Path


class HarnessError(Exception):
    """An expected failure (bad input, bad option, unreachable resource).

    The CLI prints ``error: <message>`` on one line and exits with ``exit_code``;
    anything else is a bug and keeps its traceback.
    """

    exit_code = 2


class InputError(HarnessError):
    """Bad content in a user-supplied file, located by path and line."""

    def __init__(self, path: str | Path, line: int | None, problem: str, fix: str | None = None):
        where = f"{path}:{line}" if line is not None else f"{path}"
        message = f"{where}: {problem}"
        if fix:
            message += f" ({fix})"
        super().__init__(message)
        self.path = str(path)
        self.line = line
        self.problem = problem


class OutputError(HarnessError):
    """A file or folder that cannot be written (disk full, permission, a folder where a file goes...).

    Built by :func:`harness.core.fileio.output_error`, the one place that turns an ``OSError`` on output
    into a line naming the path and what to do.
    """
