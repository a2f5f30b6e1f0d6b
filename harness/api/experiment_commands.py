"""``run``: an experiment file (or an UltraRAG parameter file), each step one command of the api."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.api.command_result import Command, CommandResult
from harness.api.commands import STEP_KINDS
from harness.core.options import OptionsRecord, option
from harness.experiments.document import load_experiment
from harness.experiments.runner import RESOLVED_FILE, SUMMARY_FILE, StepRun, plan, run_experiment


class RunOptions(OptionsRecord):
    """``harness run EXPERIMENT.yaml [--set K=V] [--dry-run]``."""

    experiment: Path = option(
        positional=True, parse=Path, metavar="EXPERIMENT.yaml", help="experiment or UltraRAG parameter file"
    )
    overrides: list[str] = option(
        default_factory=list,
        flags=("--set",),
        action="append",
        metavar="KEY=VALUE",
        help="override parameter KEY, `output`, or STEP.OPTION (VALUE read as YAML); repeatable",
    )
    dry_run: bool = option(
        False, action="store_true", help="print the plan (what runs, what is reused) and stop"
    )


@dataclass
class RunResult(CommandResult):
    """The steps of one experiment run (or, with ``dry_run``, its plan), and where they were recorded."""

    steps: list[StepRun] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # what the steps said, when nobody echoed it live
    recorded: tuple[Path, Path] | None = None

    def payload(self) -> dict[str, Any]:
        if self.plan:
            return {"plan": self.plan}
        return {"steps": [run.to_json() for run in self.steps]}

    def render(self) -> str:
        if self.plan:
            return "\n".join(self.plan)
        ran = sum(run.status == "ran" for run in self.steps)
        resolved, summary = self.recorded or ("", "")
        closing = f"{len(self.steps)} steps: {ran} ran, {len(self.steps) - ran} reused; {resolved}, {summary}"
        return "\n".join([*self.lines, closing])


def run(
    options: RunOptions | None = None,
    /,
    *,
    echo: Callable[[str], None] | None = None,
    notify: Callable[[str], None] | None = None,
    **values: Any,
) -> RunResult:
    """Run an experiment file's steps in order, reusing every step whose options and inputs are unchanged.

    Each step is a command of this api (``eval``, ``evaluate``, ``compare``, ``qa-eval``, ``rag-eval``,
    ``table``, ``report``, ``reproduce``) with that command's options. ``echo`` receives each step's
    lines as it finishes (the CLI passes ``print``); without it they are kept in the result. ``notify``
    receives the ``warning:``/``note:`` lines (a step output that changed since it was written is recomputed)
    as they come; without it they are the result's ``messages``.
    Example: ``run(experiment="configs/experiments/answers.yaml")``.
    """
    options = RunOptions.coerce(options, values)
    experiment = load_experiment(options.experiment, options.overrides, STEP_KINDS)
    if options.dry_run:
        return RunResult(plan=plan(experiment))
    result = RunResult()
    steps = run_experiment(
        experiment, echo=echo or result.lines.append, notify=notify or result.messages.append
    )
    result.steps = steps
    result.recorded = (experiment.output / RESOLVED_FILE, experiment.output / SUMMARY_FILE)
    result.paths = [*result.recorded, *(path for step in steps for path in step.outputs)]
    result.exit_code = max((step.exit_code for step in steps), default=0)
    return result


RUN = Command(
    "run",
    RunOptions,
    run,
    help="run an experiment file: eval, evaluate, compare, qa-eval, table, report, reproduce steps",
    description="Run the steps of an experiment YAML in order, each with the options of its command "
    f"({', '.join(STEP_KINDS)}). Shared parameters live under `params` and are referred to as ${{name}}. "
    "A step whose options and input files are unchanged is reused (eval and reproduce: per dataset x "
    "model, by the result cache). Writes the resolved experiment and every step's output to the "
    "experiment's output folder. An UltraRAG parameter file (its `evaluation` section) runs as the "
    "matching steps with UltraRAG's metric definitions and result file.",
    echo=True,
    notify=True,
)
