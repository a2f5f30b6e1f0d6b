"""Every stage command, in the order ``harness --help`` lists them: the table the CLI and experiments read.

``run`` (an experiment file) comes last and runs these as its steps: it is in
:mod:`harness.api.experiment_commands`, which reads :data:`STEP_KINDS` from here.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.api import (
    cache_commands,
    check_model_commands,
    data_commands,
    diff_commands,
    eval_commands,
    export_commands,
    qa_commands,
    rescore_commands,
    run_file_commands,
    view_commands,
)
from harness.api.command_result import Command, CommandGroup

COMMAND_LINE: tuple[Command | CommandGroup, ...] = (
    *data_commands.COMMANDS,
    *eval_commands.COMMANDS,
    *run_file_commands.COMMANDS,
    *rescore_commands.COMMANDS,
    *qa_commands.COMMANDS,
    *cache_commands.COMMANDS,
    *view_commands.COMMANDS,
    eval_commands.REPRODUCE,
    *diff_commands.COMMANDS,
    *check_model_commands.COMMANDS,
    *export_commands.COMMANDS,
)


def all_commands(entries: Iterable[Command | CommandGroup] = COMMAND_LINE) -> dict[str, Command]:
    """Every command of ``entries`` by its full name (``evaluate``, ``data list``)."""
    found: dict[str, Command] = {}
    for entry in entries:
        if isinstance(entry, Command):
            found[entry.name] = entry
        elif isinstance(entry, CommandGroup):
            found.update({f"{entry.name} {command.name}": command for command in entry.commands})
    return found


def _step_kinds() -> dict[str, Command]:
    """The commands an experiment file can run as steps, by step kind."""
    return {name: command for name, command in all_commands().items() if command.step is not None}


STEP_KINDS: dict[str, Command] = _step_kinds()
