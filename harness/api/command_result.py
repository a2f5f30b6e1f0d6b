"""What every public command function returns: a typed result that prints itself and serialises itself.

A command's result knows how the command line shows it (:meth:`CommandResult.render`, the text on
standard output; :attr:`CommandResult.messages`, the ``note:``/``warning:``/``error:`` lines on standard
error) and how it looks as JSON (:meth:`CommandResult.to_json`). The CLI prints exactly these, so a
notebook and a terminal see the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.fileio import atomic_write_json
from harness.core.options import OptionsRecord, options_doc
from harness.core.output_guard import check_output


@dataclass
class CommandResult:
    """The outcome of one command: the files it wrote, its standard-error lines and its exit code."""

    paths: list[Path] = field(default_factory=list, kw_only=True)
    messages: list[str] = field(default_factory=list, kw_only=True)
    exit_code: int = field(default=0, kw_only=True)

    def render(self) -> str:
        """The text the command prints on standard output (no trailing newline; empty: nothing)."""
        return ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary: what was computed, the files written, the messages, the exit code."""
        return {
            **self.payload(),
            "paths": [str(path) for path in self.paths],
            "messages": list(self.messages),
            "exit_code": self.exit_code,
        }

    def payload(self) -> dict[str, Any]:
        """The command's own JSON (what ``--output`` writes, where the command has it)."""
        return {}

    def write_payload(self, path: Path, *, parents: bool = False) -> None:
        """Write :meth:`payload` to ``path`` atomically and list it among the files written.

        ``parents``: create a missing folder (steps' folders) rather than refuse it (a checked ``--output``).
        The output guard runs again here, a backstop for a path no record checked: never a harness result.
        """
        check_output(path)
        atomic_write_json(path, self.payload(), parents=parents)
        self.paths.append(path)


@dataclass
class StepOutcome:
    """What an experiment step made of a command's result: its files, console lines, reuse and exit code."""

    outputs: list[Path]
    summary: list[str] = field(default_factory=list)
    reused: bool = False
    exit_code: int = 0


@dataclass(frozen=True)
class Command:
    """One command: its options record, its public function, its help, and how it runs as a step.

    The command line's parser is generated from ``options``; an experiment step of kind ``name`` is the
    same record, run by ``step`` into the step's folder (``None``: not a step kind). ``step_inputs``
    names the files a step reads, so it is reused while their checksums and its options are unchanged
    (``None``: the stage's own result cache decides).
    """

    name: str
    options: type[OptionsRecord]
    function: Callable[..., CommandResult]
    help: str
    description: str
    step: Callable[[Any, Path], StepOutcome] | None = None
    step_inputs: Callable[[Any], dict[str, str | Path]] | None = None
    echo: bool = False  # ``function`` takes ``echo=`` for lines shown while it runs (the CLI passes print)
    # ``function`` takes ``notify=`` for stderr lines as they come (before a later error, among a long run's
    # log lines); lines handed to ``notify`` are not repeated in the result's ``messages``.
    notify: bool = False

    def __post_init__(self) -> None:
        # ``help(harness.eval)`` shows the command's options under the function's own text.
        doc = self.function.__doc__ or ""
        if "Options:" not in doc:
            self.function.__doc__ = f"{doc.rstrip()}\n\n{options_doc(self.options)}"

    @property
    def command_name(self) -> str:
        """The command line's name for it (a step kind is named as its command)."""
        return self.name


@dataclass(frozen=True)
class CommandGroup:
    """A command with actions (``harness data list``): its help and its action commands."""

    name: str
    help: str
    description: str
    title: str
    commands: tuple[Command, ...]
    required: bool = False  # a missing action is an error (True) or prints the group's help (False)
