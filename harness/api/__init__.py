"""The public Python API: one function and one options record per command.

Every ``harness`` command is a function here taking its options record (or the same options as
keywords) and returning a typed result that prints itself as the command does (``render()``) and
serialises itself (``to_json()``)::

    import harness

    result = harness.evaluate(qrels="qrels.txt", run="run.trec", metrics=["ndcg@10", "recall@100"])
    result.evaluation.aggregate        # {"ndcg@10": 0.6451, "recall@100": 0.925}
"""

from __future__ import annotations

from harness.api.command_result import Command, CommandGroup, CommandResult, StepOutcome
from harness.api.commands import COMMAND_LINE, STEP_KINDS
from harness.api.experiment_commands import RUN, RunOptions, RunResult, run
from harness.api.run_file_commands import (
    CompareOptions,
    CompareResult,
    EvaluateOptions,
    EvaluateResult,
    FuseOptions,
    FuseResult,
    compare,
    evaluate,
    fuse,
)

COMMANDS: tuple[Command | CommandGroup | str, ...] = (*COMMAND_LINE, RUN)

__all__ = [
    "COMMANDS",
    "STEP_KINDS",
    "Command",
    "CommandGroup",
    "CommandResult",
    "CompareOptions",
    "CompareResult",
    "EvaluateOptions",
    "EvaluateResult",
    "FuseOptions",
    "FuseResult",
    "RunOptions",
    "RunResult",
    "StepOutcome",
    "compare",
    "evaluate",
    "fuse",
    "run",
]
