"""Plan and run an experiment's steps, reusing every step whose inputs and outputs are unchanged.

A step with declared inputs (evaluate, compare, qa-eval, table, report) is keyed by a digest of its kind,
its resolved options, the checksums of the files it reads and the harness version; its folder's
``step.json`` (written last) holds that key, the files it wrote and their checksums. When the key matches
and every output still has its checksum, the step is reused without running; an output that changed or
was cut short is recomputed with a warning, never reused. ``eval`` and ``reproduce`` hand every (dataset,
model) pair to the pipeline, whose result cache reuses unchanged pairs.

The experiment's folder receives the resolved experiment (``experiment.yaml``) and what each step did
(``steps.json``) once the run has changed something: a run refused before any step ran leaves the previous
run's records, and every file, as they were.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness import __version__
from harness.core.cache import digest_of
from harness.core.credentials import redacted
from harness.core.fileio import (
    atomic_write,
    atomic_write_json,
    describe_inputs,
    file_digest,
    output_error,
    read_json_or_none,
)
from harness.core.output_guard import check_output
from harness.experiments.document import RESOLVED_FILE, SUMMARY_FILE, Experiment, Step

STEP_RECORD = "step.json"
__all__ = ["RESOLVED_FILE", "STEP_RECORD", "SUMMARY_FILE", "StepRun", "plan", "run_experiment"]


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


def output_checksum(path: Path, step: Step) -> str | None:
    """sha256 of an output file, or of an output folder inside the step's folder (every file's name and
    checksum); ``None`` when it is not there (or is neither: a device, a folder outside the step's)."""
    if path.is_file():
        return file_digest(path)
    if path.is_dir() and path.resolve().is_relative_to(step.directory.resolve()):
        files = sorted(item for item in path.rglob("*") if item.is_file())
        return digest_of({str(item.relative_to(path)): file_digest(item) for item in files})
    return None


def reusable(step: Step, key: str | None) -> tuple[list[Path] | None, str | None]:
    """``(outputs, why not)``: the outputs a previous run of this very step left, intact, or ``None`` and
    the line to show when a previous run's output can no longer be trusted (``None``: nothing to say)."""
    if key is None:
        return None, None
    record_path = step.directory / STEP_RECORD
    record = read_json_or_none(record_path)
    if record is None:
        return (
            None,
            f"warning: step {step.id!r}: {record_path} is damaged; recomputing"
            if record_path.exists()
            else None,
        )
    if record.get("key") != key:
        return None, None
    outputs, checksums = record.get("outputs"), record.get("checksums")
    if not isinstance(outputs, list) or not all(isinstance(item, str) for item in outputs):
        return None, f"warning: step {step.id!r}: {record_path} is damaged; recomputing"
    if not isinstance(checksums, dict):
        return (
            None,
            f"note: step {step.id!r}: {record_path} has no output checksums (an older run); recomputing",
        )
    for output in outputs:
        found = output_checksum(Path(output), step)
        if found is None:
            return None, f"note: step {step.id!r}: its output {output} is gone; recomputing"
        if found != checksums.get(output):
            return None, (
                f"warning: step {step.id!r}: its output {output} changed since the step wrote it "
                "(checksum differs); recomputing"
            )
    return [Path(output) for output in outputs], None


def plan(experiment: Experiment) -> list[str]:
    """What ``--dry-run`` prints: each step, its non-default options, and whether it would run."""
    lines = [
        f"experiment {experiment.name} ({experiment.origin}: {experiment.source}) -> {experiment.output}/",
    ]
    if experiment.params:
        lines.append(
            "parameters: " + ", ".join(f"{k}={_short(v)}" for k, v in redacted(experiment.params).items())
        )
    for number, step in enumerate(experiment.steps, start=1):
        key, why = step_key(step)
        previous, distrust = reusable(step, key)
        if step.kind.step_inputs is None:
            verdict = f"runs; {why}"
        elif previous is not None:
            verdict = "reused (options, inputs and outputs unchanged)"
        elif distrust is not None:
            verdict = f"runs ({distrust.split(': ', 2)[-1].removesuffix('; recomputing')})"
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
    experiment: Experiment,
    echo: Callable[[str], None] = lambda line: None,
    notify: Callable[[str], None] = lambda line: None,
) -> list[StepRun]:
    """Run (or reuse) every step in order; a failing step stops the experiment with its error.

    ``echo`` receives what each step did, ``notify`` the ``warning:``/``note:`` lines about outputs that
    are recomputed. The records are written when the run succeeds or a step ran before the failure; a run
    refused before any step ran writes nothing (and removes the empty folders it made).
    """
    for name in (RESOLVED_FILE, SUMMARY_FILE):
        check_output(experiment.output / name, "output")
    new_folders = _missing_folders(experiment.output)
    outcomes: list[StepRun] = []
    failure: BaseException | None = None
    try:
        _make_folder(experiment.output)
        for step in experiment.steps:
            outcome = _run_step(step, notify)
            outcomes.append(outcome)
            echo(f"{step.id} [{step.kind.name}]: {outcome.status} ({outcome.seconds:.1f} s)")
            for line in outcome.summary:
                echo(f"  {line}")
    except BaseException as error:
        failure = error
        raise
    finally:
        if failure is None or any(outcome.status == "ran" for outcome in outcomes):
            _write_records(experiment, outcomes, failure)
        else:
            _remove_empty(new_folders)
    return outcomes


def _write_records(experiment: Experiment, outcomes: list[StepRun], failure: BaseException | None) -> None:
    with atomic_write(experiment.output / RESOLVED_FILE) as handle:
        yaml.safe_dump(experiment.resolved(), handle, sort_keys=False, allow_unicode=True)
    summary: dict[str, Any] = {
        "experiment": experiment.name,
        "steps": [outcome.to_json() for outcome in outcomes],
    }
    if failure is not None:
        stopped = experiment.steps[len(outcomes)] if len(outcomes) < len(experiment.steps) else None
        summary["stopped"] = {
            "id": stopped.id if stopped else None,
            "error": str(failure) or type(failure).__name__,
        }
    atomic_write_json(experiment.output / SUMMARY_FILE, summary)


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    return [path for path in (folder, *folder.parents) if not path.exists()]


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise output_error(folder, error) from None


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a refused run made, deepest first, as long as they are empty."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _run_step(step: Step, notify: Callable[[str], None]) -> StepRun:
    started = time.perf_counter()
    key, _ = step_key(step)
    previous, distrust = reusable(step, key)
    if previous is not None:
        return StepRun(step, "reused", previous, [], time.perf_counter() - started)
    if distrust is not None:
        notify(distrust)
    new_folders = _missing_folders(step.directory)
    _make_folder(step.directory)
    try:
        result = step.kind.step(step.options, step.directory)
    except BaseException:
        _remove_empty(new_folders)  # a refused step leaves no empty folder behind
        raise
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
                "checksums": {str(path): output_checksum(path, step) for path in result.outputs},
                "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            },
        )
    status = "reused" if result.reused else "ran"
    return StepRun(
        step, status, result.outputs, result.summary, time.perf_counter() - started, result.exit_code
    )
