"""``harness reproduce SUITE``: run a list of model x dataset conditions and check them against published numbers.

A suite (``configs/suites/<name>.yaml``) lists conditions, each with the numbers it must reproduce
(inline, or taken from ``configs/references.yaml``) and a tolerance (default 0.0005 absolute, as
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
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write
from harness.core.paths import config_dir
from harness.evaluation.metrics import pretty_metric
from harness.reproduce.references import Reference, find_references, load_references, model_aliases
from harness.results.store import StoredResult

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

RunEval = Callable[[str, str, Any], StoredResult]


@dataclass
class Condition:
    model: str
    dataset: str
    expected: dict[str, float]
    source: str  # what the expected values are, printed beside them
    tolerance: float
    options: dict[str, Any] = field(default_factory=dict)
    also: list[str] = field(default_factory=list)  # other published values for the same cells


@dataclass
class Suite:
    name: str
    path: Path
    description: str
    conditions: list[Condition]
    fail_on_skip: bool = False


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

    def count(self, status: str) -> int:
        return sum(1 for check in self.checks if check.status == status)

    @property
    def exit_code(self) -> int:
        if self.count(MISS) or (self.suite.fail_on_skip and self.count(SKIPPED)):
            return 1
        return 0


# --------------------------------------------------------------------------------------------- loading


def suite_path(name_or_path: str) -> Path:
    """``offline-smoke`` -> ``configs/suites/offline-smoke.yaml``; an existing file is taken as is."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    candidate = config_dir() / "suites" / f"{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    known = sorted(p.stem for p in (config_dir() / "suites").glob("*.yaml"))
    raise HarnessError(f"unknown suite {name_or_path!r}; known suites: {', '.join(known) or 'none'}")


def _from_references(
    path: Path, where: str, model: str, dataset: str, source_id: str | None, references: list[Reference]
) -> tuple[dict[str, float], str, list[str]]:
    found = find_references(references, model_aliases(model), dataset)
    if not found:
        raise InputError(
            path, None, f"{where}: configs/references.yaml has no entry for {model} on {dataset}"
        )
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
    return dict(chosen.metrics), chosen.describe(), others


def load_suite(name_or_path: str, references_file: str | Path | None = None) -> Suite:
    """Read and validate a suite; every condition ends up with expected values and a named source."""
    path = suite_path(name_or_path)
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle) or {}
    except yaml.YAMLError as error:
        line = getattr(getattr(error, "problem_mark", None), "line", None)
        raise InputError(
            path, None if line is None else line + 1, f"not valid YAML: {' '.join(str(error).split())}"
        ) from None
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("conditions"), list)
        or not document["conditions"]
    ):
        raise InputError(path, None, "a suite needs a non-empty 'conditions' list")
    default_tolerance = _tolerance(path, "suite", document.get("tolerance", DEFAULT_TOLERANCE))
    shared_options = _options(path, "suite", document.get("options") or {})
    references: list[Reference] | None = None
    conditions = []
    for number, entry in enumerate(document["conditions"], start=1):
        where = f"condition {number}"
        if not isinstance(entry, dict) or not entry.get("model") or not entry.get("dataset"):
            raise InputError(path, None, f"{where} needs 'model' and 'dataset'")
        model, dataset = str(entry["model"]), str(entry["dataset"])
        also: list[str] = []
        if "expected" in entry:
            expected = entry["expected"]
            if (
                not isinstance(expected, dict)
                or not expected
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in expected.values())
            ):
                raise InputError(path, None, f"{where}: 'expected' must map metric names to numbers")
            if not entry.get("source"):
                raise InputError(
                    path,
                    None,
                    f"{where}: inline 'expected' values need a 'source' saying where they come from",
                )
            expected = {str(k).lower(): float(v) for k, v in expected.items()}
            source = str(entry["source"])
        else:
            if references is None:
                references = load_references(references_file)
            reference = entry.get("reference")
            expected, source, also = _from_references(path, where, model, dataset, reference, references)
        if entry.get("metrics"):
            wanted = [str(m).lower() for m in entry["metrics"]]
            unknown = [m for m in wanted if m not in expected]
            if unknown:
                raise InputError(path, None, f"{where}: no expected value for {', '.join(unknown)}")
            expected = {m: expected[m] for m in wanted}
        conditions.append(
            Condition(
                model=model,
                dataset=dataset,
                expected=expected,
                source=source,
                tolerance=_tolerance(path, where, entry.get("tolerance", default_tolerance)),
                options={**shared_options, **_options(path, where, entry.get("options") or {})},
                also=also,
            )
        )
    return Suite(
        name=str(document.get("name") or path.stem),
        path=path,
        description=str(document.get("description", "")).strip(),
        conditions=conditions,
        fail_on_skip=bool(document.get("fail_on_skip", False)),
    )


def _tolerance(path: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(path, None, f"{where}: tolerance must be a non-negative number, got {value!r}")
    return float(value)


def _options(path: Path, where: str, options: Any) -> dict[str, Any]:
    if not isinstance(options, dict):
        raise InputError(path, None, f"{where}: 'options' must be a mapping")
    unknown = sorted(set(options) - SUITE_OPTIONS)
    if unknown:
        raise InputError(
            path,
            None,
            f"{where}: unknown option(s) {', '.join(unknown)}",
            f"allowed: {', '.join(sorted(SUITE_OPTIONS))}",
        )
    return dict(options)


# --------------------------------------------------------------------------------------------- running


def _condition_options(base: Any, condition: Condition) -> Any:
    """The command line's options with the suite's settings applied and the checked metrics added."""
    options = dataclasses.replace(base, **condition.options)
    if hasattr(options, "metrics"):
        from harness.evaluation.metrics import parse_metrics

        computed = set(parse_metrics(options.metrics, options.ks))
        missing = [metric for metric in condition.expected if metric not in computed]
        if missing:
            options = dataclasses.replace(options, metrics=[*options.metrics, *missing])
    return options


def _check_options(options: Any) -> None:
    """A bad index in the suite (or on the command line) is an error, not a skipped condition."""
    if hasattr(options, "index"):
        from harness.retrieval.dense import parse_index_spec

        parse_index_spec(options.index)


def run_suite(suite: Suite, base_options: Any, run_eval: RunEval | None = None) -> ReproduceReport:
    """Run (or reuse) every condition and compare each expected metric; model/data failures are SKIPPED."""
    if run_eval is None:
        from harness.pipeline import run_eval as pipeline_run_eval

        run_eval = pipeline_run_eval
    prepared = [(condition, _condition_options(base_options, condition)) for condition in suite.conditions]
    for _, options in prepared:
        _check_options(options)
    checks: list[Check] = []
    for condition, options in prepared:
        log.info("reproduce %s: %s on %s", suite.name, condition.model, condition.dataset)
        try:
            result = run_eval(condition.dataset, condition.model, options)
        except HarnessError as error:
            checks += [
                Check(condition, metric, SKIPPED, expected=value, reason=str(error))
                for metric, value in condition.expected.items()
            ]
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
    return ReproduceReport(suite=suite, checks=checks)


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
    rows = [_HEADER, *_rows(report, with_reasons=False)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER) - 1)]
    lines = []
    for index, row in enumerate(rows):
        lines.append(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
        )
        if index == 0:
            lines.append("  ".join("-" * width for width in widths) + "  " + "-" * len(_HEADER[-1]))
    lines += _reason_lines(report)
    lines += _also_lines(report)
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


def verdict(report: ReproduceReport) -> str:
    counts = f"{report.count(OK)} OK, {report.count(MISS)} MISS, {report.count(SKIPPED)} SKIPPED"
    if report.exit_code:
        why = "a published number was not reproduced" if report.count(MISS) else "conditions were skipped"
        return f"suite {report.suite.name}: FAILED ({counts}): {why}"
    return f"suite {report.suite.name}: passed ({counts})"


def format_markdown(report: ReproduceReport) -> str:
    suite = report.suite
    lines = [f"# Reproduction: {suite.name}", ""]
    if suite.description:
        lines += [suite.description, ""]
    lines += [f"Suite file: `{suite.path}`. A cell is OK when |ours - published| <= tolerance.", ""]
    lines.append("| " + " | ".join(_HEADER) + " |")
    lines.append("|" + "|".join(["---"] * 3 + ["---:"] * 4 + ["---", "---"]) + "|")
    for row in _rows(report, with_reasons=True):
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    lines.append("")
    also = [f"- {line}" for line in _also_lines(report)]
    lines += [*also, ""] if also else []
    lines += [f"**{verdict(report)}**", ""]
    return "\n".join(lines)


def write_markdown(report: ReproduceReport, results_dir: str | Path) -> Path:
    path = Path(results_dir) / f"reproduce-{report.suite.name}.md"
    with atomic_write(path) as handle:
        handle.write(format_markdown(report))
    return path
