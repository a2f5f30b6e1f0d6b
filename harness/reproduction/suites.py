"""``harness reproduce SUITE``: run a list of model x dataset conditions and check them against published numbers.

A suite (``records/suites/<name>.yaml``, or ``HARNESS_CONFIG_DIR/suites/<name>.yaml``, which adds
suites and replaces a shipped one of the same name) lists conditions, each with the numbers it must reproduce
(inline, or taken from ``references.yaml``) and a tolerance (default 0.0005 absolute, as
pyserini's two-click reproductions use). Every condition is run through the normal pipeline, which
reuses an unchanged result folder and cached embeddings, so a second run only re-checks. A condition
whose model or data cannot be obtained here is SKIPPED with the reason, never counted as OK.

Suite format::

    name: offline-smoke
    description: ...
    tolerance: 0.0005          # optional, absolute
    fail_on_skip: true         # optional: a SKIPPED condition fails the suite too
    options: {top_k: 1000}     # optional EvalOptions for every condition
    conditions:
      - model: sentence-transformers/all-MiniLM-L6-v2
        dataset: scifact
        reference: mteb-results          # expected values from references.yaml (this source)
        metrics: [ndcg@10, recall@100]   # optional subset of the reference's metrics
      - model: my-model
        dataset: nfcorpus
        expected: {ndcg@10: 0.3312}      # inline expected values ...
        source: "my paper, table 2"      # ... must say where they come from
        tolerance: 0.001
        options: {complete: true}
      - model: sentence-transformers/all-MiniLM-L6-v2
        dataset: scifact
        reference: ../mteb-results      # a folder of MTEB results (relative to the suite file)

``--references`` replaces references.yaml by another references file or by a folder of MTEB results
(:mod:`harness.reproduction.mteb_results`), whose cells are source ``mteb-results``.

A pyserini two-click reproduction file (``pyserini/2cr/beir.yaml``: ``conditions`` with ``datasets`` or
``topics`` and their ``scores``) is read as a suite too (:mod:`harness.reproduction.pyserini_2cr`): each
condition x dataset runs the harness model or system mapped to it, under 2CR's evaluation options, and
one with no harness equivalent is SKIPPED with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import StrictFloat, field_validator, model_validator

from harness import pipeline
from harness.core.config import Record, read_yaml, record_folder_files, validate
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write
from harness.core.text_table import text_table
from harness.evaluation.metrics import parse_metrics, pretty_metric
from harness.pipeline import EvalOptions
from harness.reproduction.pyserini_2cr import is_2cr, read_2cr
from harness.reproduction.references import (
    Reference,
    ReferenceSet,
    display_path,
    find_references,
    model_aliases,
    read_references,
)
from harness.results.result_store import StoredResult
from harness.retrieval.dense import parse_index_spec

log = logging.getLogger(__name__)

DEFAULT_TOLERANCE = 0.0005
OK, MISS, SKIPPED = "OK", "MISS", "SKIPPED"
# Options a suite may set per condition (the rest -- folders, device -- come from the command line).
SUITE_OPTIONS = {
    "split",
    "top_k",
    "index",
    "drop_identical_ids",
    "metrics",
    "ks",
    "relevance_level",
    "complete",
    "strict",
    "batch_size",
    "trust_remote_code",
}
# Float round-off in a difference must not turn a cell at exactly the tolerance into a MISS.
_EPSILON = 1e-9

RunEval = Callable[[str, str, EvalOptions], StoredResult]


def _checked_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - SUITE_OPTIONS)
    if unknown:
        allowed = ", ".join(sorted(SUITE_OPTIONS))
        raise ValueError(f"unknown option(s) {', '.join(unknown)} (allowed: {allowed})")
    return options


def _checked_tolerance(value: float | None) -> float | None:
    if value is not None and value < 0:
        raise ValueError(f"tolerance must be a non-negative number, got {value!r}")
    return value


class ConditionRecord(Record):
    """One ``conditions:`` item: a model x dataset pair and where its expected numbers come from."""

    model: str
    dataset: str
    # a references.yaml source id, "preferred" (the default), or a folder of MTEB results
    reference: str | None = None
    expected: dict[str, StrictFloat] | None = None
    source: str | None = None
    metrics: list[str] | None = None
    tolerance: StrictFloat | None = None
    options: dict[str, Any] = {}
    skip: str | None = None  # why the cell cannot run in the harness (no record for its system, licensed data)
    verified: bool = True  # False: the inline value could not be read back from its source

    _tolerance = field_validator("tolerance")(_checked_tolerance)
    _options = field_validator("options")(_checked_options)

    @model_validator(mode="after")
    def _inline_values_name_a_source(self) -> ConditionRecord:
        if not self.model.strip() or not self.dataset.strip():
            raise ValueError("a condition needs 'model' and 'dataset'")
        if self.expected is not None and not self.expected:
            raise ValueError("'expected' must map metric names to numbers")
        if self.expected and not self.source:
            raise ValueError("inline 'expected' values need a 'source' saying where they come from")
        return self


class SuiteRecord(Record):
    """A whole suite file."""

    name: str | None = None
    description: str = ""
    tolerance: StrictFloat = DEFAULT_TOLERANCE
    fail_on_skip: bool = False
    options: dict[str, Any] = {}
    conditions: list[ConditionRecord]

    _tolerance = field_validator("tolerance")(_checked_tolerance)
    _options = field_validator("options")(_checked_options)

    @field_validator("conditions")
    @classmethod
    def _not_empty(cls, value: list[ConditionRecord]) -> list[ConditionRecord]:
        if not value:
            raise ValueError("a suite needs a non-empty 'conditions' list")
        return value


@dataclass
class Condition:
    model: str
    dataset: str
    expected: dict[str, float]
    source: str  # what the expected values are, printed beside them
    tolerance: float
    options: dict[str, Any] = field(default_factory=dict)
    also: list[str] = field(default_factory=list)  # other published values for the same cells
    skip: str = ""  # why the condition cannot run here (a 2CR condition with no harness model)
    verified: bool = True  # False: the published number could not be read back from its source


@dataclass
class Suite:
    name: str
    path: Path
    description: str
    conditions: list[Condition]
    fail_on_skip: bool = False
    notes: list[str] = field(default_factory=list)  # what reading the suite or its references left out


@dataclass
class Check:
    condition: Condition
    metric: str
    status: str
    ours: float | None = None
    expected: float | None = None
    reason: str = ""
    result_dir: Path | None = None

    @property
    def diff(self) -> float | None:
        return None if self.ours is None or self.expected is None else self.ours - self.expected


@dataclass
class ReproduceReport:
    suite: Suite
    checks: list[Check]
    # SKIPPED conditions never fail the run, not even when none could run or the suite sets fail_on_skip.
    allow_skipped: bool = False

    def count(self, status: str) -> int:
        return sum(1 for check in self.checks if check.status == status)

    @property
    def nothing_reproduced(self) -> bool:
        """No cell was compared at all: a run that checked nothing must not read as a pass."""
        return not self.count(OK) and not self.count(MISS)

    @property
    def exit_code(self) -> int:
        if self.count(MISS):
            return 1
        if self.allow_skipped:
            return 0
        if self.nothing_reproduced or (self.suite.fail_on_skip and self.count(SKIPPED)):
            return 1
        return 0


# --------------------------------------------------------------------------------------------- loading


def suite_path(name_or_path: str) -> Path:
    """``offline-smoke`` -> the user's or the shipped ``suites/offline-smoke.yaml``; a YAML file as is."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    suites = record_folder_files("suites")
    if name_or_path in suites:
        return suites[name_or_path]
    raise HarnessError(f"unknown suite {name_or_path!r}; known suites: {', '.join(sorted(suites)) or 'none'}")


def _from_references(
    path: Path, where: str, model: str, dataset: str, source_id: str | None, references: list[Reference]
) -> tuple[dict[str, float], str, list[str], bool]:
    found = find_references(references, model_aliases(model), dataset)
    if not found:
        raise InputError(path, None, f"{where}: references.yaml has no entry for {model} on {dataset}")
    chosen = (
        found[0]
        if source_id in (None, "preferred")
        else next((r for r in found if r.source.id == source_id), None)
    )
    if chosen is None:
        sources = ", ".join(sorted({r.source.id for r in found}))
        raise InputError(
            path, None, f"{where}: no {source_id!r} reference for {model} on {dataset} (have: {sources})"
        )
    others = [
        f"{ref.source.id}: "
        + ", ".join(f"{pretty_metric(m)} {v:.5g}" for m, v in sorted(ref.metrics.items()))
        for ref in found
        if ref is not chosen
    ]
    return dict(chosen.metrics), chosen.describe(), others, chosen.verified


class _References:
    """The references a suite's conditions draw on, each read once: the default set and any MTEB folders."""

    def __init__(self, suite: Path, default: str | Path | None):
        self.suite = suite
        self.default = default
        self.read: dict[str, ReferenceSet] = {}

    def folder(self, reference: str | None) -> Path | None:
        """The folder a condition's ``reference:`` names (relative to the suite file), if it names one."""
        if not reference or reference == "preferred":
            return None
        path = Path(reference).expanduser()
        path = path if path.is_absolute() else self.suite.parent / path
        return path if path.is_dir() else None

    def get(self, folder: Path | None) -> list[Reference]:
        key = str(folder if folder is not None else self.default)
        if key not in self.read:
            self.read[key] = read_references(folder if folder is not None else self.default)
        return self.read[key].references

    @property
    def notes(self) -> list[str]:
        return [note for references in self.read.values() for note in references.notes]


def _expected_values(
    path: Path, where: str, entry: ConditionRecord, references: _References
) -> tuple[dict[str, float], str, list[str], bool]:
    """The expected values, their source, the other sources' values and whether the source was read back
    (an inline value is the suite author's word for it)."""
    if entry.expected is not None:
        expected = {key.lower(): float(value) for key, value in entry.expected.items()}
        return expected, str(entry.source), [], True
    folder = references.folder(entry.reference)
    source_id = None if folder is not None else entry.reference
    return _from_references(path, where, entry.model, entry.dataset, source_id, references.get(folder))


def load_suite(name_or_path: str, references_file: str | Path | None = None) -> Suite:
    """Read and validate a suite; every condition ends up with expected values and a named source.

    ``references_file``: a references YAML or a folder of MTEB results, in place of references.yaml.
    A pyserini 2CR file is read as a suite (:func:`load_2cr_suite`).
    """
    path = suite_path(name_or_path)
    content = read_yaml(path) or {}
    if is_2cr(content):
        return load_2cr_suite(path, content)
    document = validate(SuiteRecord, content, path)
    references = _References(path, references_file)
    conditions = []
    for number, entry in enumerate(document.conditions, start=1):
        where = f"condition {number}"
        expected, source, also, verified = _expected_values(path, where, entry, references)
        if entry.metrics:
            wanted = [metric.lower() for metric in entry.metrics]
            unknown = [metric for metric in wanted if metric not in expected]
            if unknown:
                raise InputError(path, None, f"{where}: no expected value for {', '.join(unknown)}")
            expected = {metric: expected[metric] for metric in wanted}
        conditions.append(
            Condition(
                model=entry.model,
                dataset=entry.dataset,
                expected=expected,
                source=source,
                tolerance=document.tolerance if entry.tolerance is None else entry.tolerance,
                options={**document.options, **entry.options},
                also=also,
                verified=verified and entry.verified,
                skip=entry.skip or "",
            )
        )
    return Suite(
        name=document.name or path.stem,
        path=path,
        description=document.description.strip(),
        conditions=conditions,
        fail_on_skip=document.fail_on_skip,
        notes=references.notes,
    )


def load_2cr_suite(path: Path, document: Any) -> Suite:
    """A pyserini 2CR file as a suite: one condition per 2CR condition x dataset, at 2CR's 4-decimal
    tolerance (:data:`DEFAULT_TOLERANCE`); those with no harness model, system or dataset are skipped."""
    published, notes = read_2cr(path, document)
    conditions = [
        Condition(
            model=item.model,
            dataset=item.dataset,
            expected=item.expected,
            source=item.source,
            tolerance=DEFAULT_TOLERANCE,
            options=_checked_2cr_options(path, item.options),
            skip=item.skip,
        )
        for item in published
    ]
    return Suite(
        name=path.stem,
        path=path,
        description=f"pyserini two-click reproduction file {path.name}",
        conditions=conditions,
        notes=notes,
    )


def _checked_2cr_options(path: Path, options: dict[str, Any]) -> dict[str, Any]:
    try:
        return _checked_options(options)
    except ValueError as error:
        raise InputError(path, None, f"options of the pyserini_2cr.yaml record: {error}") from None


# ------------------------------------------------------------------------------------------- selecting


def _names(values: Sequence[str]) -> str:
    return ", ".join(sorted(dict.fromkeys(values)))


def select_conditions(
    suite: Suite, models: Sequence[str] | None = None, datasets: Sequence[str] | None = None
) -> Suite:
    """The suite with only the conditions of ``models`` (by name or alias) and ``datasets``; a model or
    dataset that no condition names is an error listing the suite's own."""
    if not models and not datasets:
        return suite
    kept = suite.conditions
    if models:
        aliases = {model: {name.lower() for name in model_aliases(model)} for model in models}
        for model, names in aliases.items():
            if not any(condition.model.lower() in names for condition in suite.conditions):
                raise HarnessError(
                    f"suite {suite.name} has no condition for model {model!r} (--models); its models: "
                    + _names(condition.model for condition in suite.conditions)
                )
        wanted = set().union(*aliases.values())
        kept = [condition for condition in kept if condition.model.lower() in wanted]
    if datasets:
        for dataset in datasets:
            if not any(condition.dataset == dataset for condition in suite.conditions):
                raise HarnessError(
                    f"suite {suite.name} has no condition for dataset {dataset!r} (--datasets); its "
                    "datasets: " + _names(condition.dataset for condition in suite.conditions)
                )
        kept = [condition for condition in kept if condition.dataset in datasets]
    if not kept:
        raise HarnessError(
            f"suite {suite.name} has no condition for both --models {' '.join(models or [])} and "
            f"--datasets {' '.join(datasets or [])}; `harness reproduce --list` shows each suite's cells"
        )
    return replace(suite, conditions=kept)


@dataclass
class SuiteSummary:
    """One line of ``harness reproduce --list``: a suite, its description and how many cells it checks."""

    name: str
    path: Path
    description: str = ""
    conditions: int = 0
    cells: int = 0  # metric checks: conditions x their expected metrics
    problem: str = ""  # why the suite could not be read (it is listed all the same)


def list_suites(references_file: str | Path | None = None) -> list[SuiteSummary]:
    """Every suite ``harness reproduce NAME`` finds (shipped, then the user's), each read and counted."""
    summaries = []
    for name, path in sorted(record_folder_files("suites").items()):
        try:
            suite = load_suite(str(path), references_file)
        except HarnessError as error:
            summaries.append(SuiteSummary(name, path, problem=str(error)))
            continue
        summaries.append(
            SuiteSummary(
                name,
                path,
                " ".join(suite.description.split()),
                len(suite.conditions),
                sum(len(condition.expected) for condition in suite.conditions),
            )
        )
    return summaries


def format_suite_list(summaries: list[SuiteSummary]) -> str:
    """The ``--list`` table: name, conditions, cells and description (or why the suite cannot be read)."""
    rows = [["suite", "conditions", "cells", "description"]]
    for summary in summaries:
        about = f"cannot be read: {summary.problem}" if summary.problem else summary.description
        counts = ["", ""] if summary.problem else [str(summary.conditions), str(summary.cells)]
        rows.append([summary.name, *counts, about])
    return "\n".join(text_table(rows, rule=True, right=(1, 2), last_unpadded=True))


# --------------------------------------------------------------------------------------------- running


def _condition_options(base: EvalOptions, condition: Condition, path: Path) -> EvalOptions:
    """The command line's options with the suite's settings applied and the checked metrics added."""
    # Checked as the command line's are: a suite's ``top_k: 0`` is one error line naming the suite file.
    options = validate(type(base), {**base.model_dump(), **condition.options}, path)
    computed = set(parse_metrics(options.metrics, options.ks))
    missing = [metric for metric in condition.expected if metric not in computed]
    if missing:
        options = options.replace(metrics=[*options.metrics, *missing])
    return options


def _skipped(condition: Condition, reason: str) -> list[Check]:
    return [
        Check(condition, metric, SKIPPED, expected=value, reason=reason)
        for metric, value in condition.expected.items()
    ]


def run_suite(
    suite: Suite,
    base_options: EvalOptions,
    run_eval: RunEval | None = None,
    *,
    allow_skipped: bool = False,
) -> ReproduceReport:
    """Run (or reuse) every condition and compare each expected metric; model/data failures are SKIPPED.

    ``allow_skipped``: SKIPPED conditions never fail the report (see :attr:`ReproduceReport.exit_code`).
    """
    # Looked up at call time so the pipeline can be stood in for (tests, dry runs).
    run_eval = pipeline.run_eval if run_eval is None else run_eval
    prepared = [
        (condition, None if condition.skip else _condition_options(base_options, condition, suite.path))
        for condition in suite.conditions
    ]
    for _, options in prepared:
        # A bad index in the suite (or on the command line) is an error, not a skipped condition.
        parse_index_spec(options.index if options is not None else base_options.index)
    checks: list[Check] = []
    for condition, options in prepared:
        if options is None:
            checks += _skipped(condition, condition.skip)
            continue
        log.info("reproduce %s: %s on %s", suite.name, condition.model, condition.dataset)
        try:
            result = run_eval(condition.dataset, condition.model, options)
        except HarnessError as error:
            checks += _skipped(condition, str(error))
            continue
        for metric, value in condition.expected.items():
            ours = result.metrics.get(metric)
            if ours is None:
                checks.append(
                    Check(
                        condition,
                        metric,
                        MISS,
                        expected=value,
                        reason="metric not computed by this run",
                        result_dir=result.directory,
                    )
                )
                continue
            status = OK if abs(ours - value) <= condition.tolerance + _EPSILON else MISS
            checks.append(
                Check(condition, metric, status, ours=ours, expected=value, result_dir=result.directory)
            )
    return ReproduceReport(suite=suite, checks=checks, allow_skipped=allow_skipped)


# ------------------------------------------------------------------------------------------- reporting


def _rows(report: ReproduceReport, *, with_reasons: bool) -> list[list[str]]:
    rows = []
    for check in report.checks:
        condition = check.condition
        ours = "" if check.ours is None else f"{check.ours:.5f}"
        diff = "" if check.diff is None else f"{check.diff:+.5f}"
        status = f"{check.status} ({check.reason})" if check.reason and with_reasons else check.status
        rows.append(
            [
                condition.dataset,
                condition.model,
                pretty_metric(check.metric),
                ours,
                f"{check.expected:.5f}",
                diff,
                f"±{condition.tolerance:g}",
                status,
                condition.source,
            ]
        )
    return rows


_HEADER = [
    "dataset",
    "model",
    "metric",
    "ours",
    "published",
    "diff",
    "tolerance",
    "status",
    "compared against",
]


def format_text(report: ReproduceReport) -> str:
    """Aligned plain-text table for the terminal, then the verdict."""
    lines = text_table([_HEADER, *_rows(report, with_reasons=False)], rule=True, last_unpadded=True)
    lines += _reason_lines(report)
    lines += _also_lines(report)
    lines += _unverified_lines(report)
    lines.append(verdict(report))
    return "\n".join(lines) + "\n"


def _reason_lines(report: ReproduceReport) -> list[str]:
    """One line per condition that was skipped or could not be compared, with why."""
    lines, seen = [], set()
    for check in report.checks:
        key = (check.condition.dataset, check.condition.model, check.reason)
        if check.reason and key not in seen:
            seen.add(key)
            lines.append(
                f"{check.status.lower()}: {check.condition.model} on {check.condition.dataset}: {check.reason}"
            )
    return lines


def _also_lines(report: ReproduceReport) -> list[str]:
    lines = []
    for condition in report.suite.conditions:
        for other in condition.also:
            lines.append(f"note: {condition.model} on {condition.dataset} is also published by {other}")
    return lines


def _unverified_lines(report: ReproduceReport) -> list[str]:
    """Which published numbers could not be read back from their source: an OK against one is weaker."""
    unverified = [condition for condition in report.suite.conditions if not condition.verified]
    return [
        f"note: {condition.model} on {condition.dataset} is compared against an unverified number "
        f"(not read back from its source): {condition.source}"
        for condition in unverified
    ]


def verdict(report: ReproduceReport) -> str:
    counts = f"{report.count(OK)} OK, {report.count(MISS)} MISS, {report.count(SKIPPED)} SKIPPED"
    name = report.suite.name
    if report.count(MISS):
        return f"suite {name}: FAILED ({counts}): a published number was not reproduced"
    if report.nothing_reproduced:
        accepted = "accepted by --allow-skipped" if report.allow_skipped else "--allow-skipped accepts this"
        return (
            f"suite {name}: NOTHING REPRODUCED ({counts}): no condition could be run here, so no published "
            f"number was checked ({accepted})"
        )
    if report.exit_code:
        return f"suite {name}: FAILED ({counts}): conditions were skipped and the suite sets fail_on_skip"
    return f"suite {name}: passed ({counts})"


def format_markdown(report: ReproduceReport) -> str:
    suite = report.suite
    lines = [f"# Reproduction: {suite.name}", ""]
    if suite.description:
        lines += [suite.description, ""]
    lines += [
        f"Suite file: `{display_path(suite.path)}`. A cell is OK when |ours - published| <= tolerance.",
        "",
    ]
    lines.append("| " + " | ".join(_HEADER) + " |")
    lines.append("|" + "|".join(["---"] * 3 + ["---:"] * 4 + ["---", "---"]) + "|")
    for row in _rows(report, with_reasons=True):
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    lines.append("")
    also = [f"- {line}" for line in [*_also_lines(report), *_unverified_lines(report)]]
    lines += [*also, ""] if also else []
    lines += [f"**{verdict(report)}**", ""]
    return "\n".join(lines)


def write_markdown(report: ReproduceReport, results_dir: str | Path) -> Path:
    path = Path(results_dir) / f"reproduce-{report.suite.name}.md"
    with atomic_write(path) as handle:
        handle.write(format_markdown(report))
    return path
