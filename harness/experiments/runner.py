"""Plan and run an experiment's steps, reusing every step whose inputs are unchanged.

A step with declared inputs (evaluate, compare, qa-eval, table, report) is keyed by a digest of its kind,
its resolved options, the checksums of the files it reads and the harness version; its folder's
``step.json`` (written last) holds that key and the files it wrote. When the key matches and every output
is still there, the step is reused without running. ``eval`` and ``reproduce`` hand every (dataset, model)
pair to the pipeline, whose result cache reuses unchanged pairs. The experiment's folder receives the
resolved experiment (``experiment.yaml``) and what each step did (``steps.json``).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness import __version__
from harness.core.cache import digest_of
from harness.core.fileio import atomic_write, atomic_write_json, describe_inputs, read_json_or_none
from harness.experiments.document import Experiment, Step

STEP_RECORD = "step.json"
RESOLVED_FILE = "experiment.yaml"
SUMMARY_FILE = "steps.json"


@dataclass
class StepRun:
    """One step of a run: ``ran`` or ``reused``, what it wrote and said, how long it took."""

    step: Step
    status: str
    outputs: list[Path]
    summary: list[str]
    seconds: float
    exit_code: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.step.id,
            "kind": self.step.kind.name,
            "status": self.status,
            "outputs": [str(path) for path in self.outputs],
            "seconds": round(self.seconds, 3),
            "exit_code": self.exit_code,
        }


def step_key(step: Step) -> tuple[str | None, str]:
    """``(key, why)``: the digest of what a cached step depends on, or ``None`` and why there is none."""
    if step.kind.step_inputs is None:
        return None, "the pipeline's result cache reuses each unchanged dataset x model pair"
    files = step.kind.step_inputs(step.options)
    absent = [str(path) for path in files.values() if not Path(path).is_file()]
    if absent:
        return None, f"input {absent[0]} is not there yet"
    payload = {
        "kind": step.kind.name,
        "options": step.options_json(),
        "inputs": {role: info["sha256"] for role, info in describe_inputs(files).items()},
        "harness": __version__,
    }
    return digest_of(payload), "inputs unchanged"


def reusable(step: Step, key: str | None) -> list[Path] | None:
    """The outputs a previous run of this very step left, or ``None`` when it must run."""
    if key is None:
        return None
    record = read_json_or_none(step.directory / STEP_RECORD)
    if not record or record.get("key") != key:
        return None
    outputs = [Path(path) for path in record.get("outputs", [])]
    return outputs if all(path.exists() for path in outputs) else None


def plan(experiment: Experiment) -> list[str]:
    """What ``--dry-run`` prints: each step, its non-default options, and whether it would run."""
    lines = [
        f"experiment {experiment.name} ({experiment.origin}: {experiment.source}) -> {experiment.output}/",
    ]
    if experiment.params:
        lines.append("parameters: " + ", ".join(f"{k}={_short(v)}" for k, v in experiment.params.items()))
    for number, step in enumerate(experiment.steps, start=1):
        key, why = step_key(step)
        if step.kind.step_inputs is None:
            verdict = f"runs; {why}"
        elif reusable(step, key) is not None:
            verdict = "reused (options and inputs unchanged)"
        else:
            verdict = f"runs ({why if key is None else 'no earlier run with these options and inputs'})"
        lines.append(f"{number}. {step.id} [{step.kind.name}] -> {step.directory}/: {verdict}")
        for name, value in step.options_json(exclude_defaults=True).items():
            lines.append(f"     {name}: {_short(value)}")
    return lines


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def run_experiment(
    experiment: Experiment, echo: Callable[[str], None] = lambda line: None
) -> list[StepRun]:
    """Run (or reuse) every step in order; a failing step stops the experiment with its error."""
    experiment.output.mkdir(parents=True, exist_ok=True)
    with atomic_write(experiment.output / RESOLVED_FILE) as handle:
        yaml.safe_dump(experiment.resolved(), handle, sort_keys=False, allow_unicode=True)
    outcomes: list[StepRun] = []
    try:
        for step in experiment.steps:
            outcome = _run_step(step)
            outcomes.append(outcome)
            echo(f"{step.id} [{step.kind.name}]: {outcome.status} ({outcome.seconds:.1f} s)")
            for line in outcome.summary:
                echo(f"  {line}")
    finally:
        atomic_write_json(
            experiment.output / SUMMARY_FILE,
            {"experiment": experiment.name, "steps": [outcome.to_json() for outcome in outcomes]},
        )
    return outcomes


def _run_step(step: Step) -> StepRun:
    started = time.perf_counter()
    key, _ = step_key(step)
    previous = reusable(step, key)
    if previous is not None:
        return StepRun(step, "reused", previous, [], time.perf_counter() - started)
    step.directory.mkdir(parents=True, exist_ok=True)
    result = step.kind.step(step.options, step.directory)
    if key is None and step.kind.step_inputs is not None:
        key, _ = step_key(step)  # inputs made by an earlier step of this run exist now
    if key is not None:
        atomic_write_json(
            step.directory / STEP_RECORD,
            {
                "kind": step.kind.name,
                "key": key,
                "options": step.options_json(),
                "outputs": [str(path) for path in result.outputs],
                "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            },
        )
    status = "reused" if result.reused else "ran"
    return StepRun(
        step, status, result.outputs, result.summary, time.perf_counter() - started, result.exit_code
    )
