"""``harness diff A B``: why two results (or a result and a published number) differ."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.api.command_result import Command, CommandResult
from harness.api.shared_options import json_output_option
from harness.core.errors import HarnessError
from harness.core.options import INT32_MAX, OptionsRecord, option
from harness.core.text_table import text_table
from harness.evaluation.metrics import pretty_metric
from harness.reproduction.reference_diff import DIFF_METRIC, DiffReport, build_diff
from harness.reproduction.references import references_option
from harness.results.settings_diff import (
    TIE_TOLERANCE,
    TOP_DOCS,
    TOP_QUERIES,
    PerQueryDiff,
    ProtocolDiff,
    RankedDoc,
    run_file_diff,
)


class DiffOptions(OptionsRecord):
    """``harness diff A B``: result folder A against result folder B or a published cell (``ref[:SOURCE]``)."""

    a: Path = option(
        positional=True,
        parse=Path,
        role="input",
        help="result folder (holding metrics.json and provenance.json), or a run file",
    )
    b: str = option(
        positional=True,
        help="result folder, or ref / ref:SOURCE for the published cell; a run file when A is one",
    )
    metric: str = option(DIFF_METRIC, help="metric of the per-query picture (default: %(default)s)")
    top_queries: int = option(
        TOP_QUERIES, low=1, high=INT32_MAX, help="queries that moved most to show (default: %(default)s)"
    )
    top_docs: int = option(
        TOP_DOCS, low=1, high=INT32_MAX, help="documents shown per side (default: %(default)s)"
    )
    references: Path | None = references_option(
        "published numbers in place of the shipped references.yaml plus HARNESS_CONFIG_DIR's"
    )
    output: Path | None = json_output_option("also write the diff as JSON")


@dataclass
class DiffResult(CommandResult):
    """The diff: both sides, the differing settings, the metrics side by side and the per-query picture."""

    report: DiffReport
    output: Path | None = None
    echoed: bool = False  # the report was shown through ``echo`` before the JSON was written

    def payload(self) -> dict[str, Any]:
        return self.report.to_json()

    def render(self) -> str:
        """The report (unless ``echo`` showed it already), then the ``wrote FILE.json`` line."""
        lines = [] if self.echoed else report_lines(self.report)
        if self.output:
            lines.append(f"wrote {self.output}")
        return "\n".join(lines)


def report_lines(report: DiffReport) -> list[str]:
    """The printed diff: both sides, differing settings, the metrics table, the per-query picture, notes."""
    lines = [f"A  {report.a}", f"B  {report.b}", "", *_protocol_lines(report.protocol)]
    if report.b_is_reference:
        lines += _reference_lines(report.protocol)
    else:
        if report.protocol.only_a:
            lines.append("  not recorded by B: " + ", ".join(report.protocol.only_a))
        if report.protocol.only_b:
            lines.append("  not recorded by A: " + ", ".join(report.protocol.only_b))
    if report.metrics:
        lines += ["", *_metric_lines(report.metrics)]
    if report.per_query is not None:
        lines += ["", *_per_query_lines(report.per_query)]
    lines += [f"note: {note}" for note in report.notes]
    return lines


def diff(
    options: DiffOptions | None = None, /, *, echo: Callable[[str], Any] | None = None, **values: Any
) -> DiffResult:
    """Show why two results differ, as ``harness diff A B``.

    Lists every recorded setting that differs and can move a number, the metrics side by side, then per
    query: win / tie / loss, and the queries that moved most with each side's top documents and judgments.

    ``b`` is a result folder, or ``ref`` / ``ref:SOURCE`` for the published cell of A's model and dataset
    (no per-query picture then). E.g. ``diff(a="results/scifact/bm25", b="ref").report.protocol``;
    ``output`` also writes the diff as JSON (the result's ``payload()``); ``echo`` (e.g. ``print``) is
    given the report before that file is written.
    """
    options = DiffOptions.coerce(options, values)
    if options.a.is_file():
        report = run_files_report(options.a, Path(options.b))
    else:
        report = build_diff(
            options.a,
            options.b,
            metric=options.metric,
            top_queries=options.top_queries,
            top_docs=options.top_docs,
            references_file=options.references,
        )
    result = DiffResult(report=report, output=options.output, echoed=echo is not None)
    if echo is not None:
        echo("\n".join(report_lines(report)))
    if options.output:
        result.write_payload(options.output, parents=True)
    return result


def run_files_report(a: Path, b: Path) -> DiffReport:
    """Two run files side by side: the fields of their ir_metadata headers that differ (no metrics: a run
    carries no judgments)."""
    if not b.is_file():
        raise HarnessError(f"A ({a}) is a run file, so B must be one too; {b} is not a file")
    protocol, notes = run_file_diff(a, b)
    return DiffReport(f"{a} (run file)", f"{b} (run file)", protocol, [], None, notes)


def _short(value: Any, width: int = 48) -> str:
    # JSON spelling, so strings show their quotes ("\n" vs " ") and null / true read as recorded.
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def _protocol_lines(protocol: ProtocolDiff) -> list[str]:
    if not protocol.differences:
        return ["no protocol difference: every setting both sides record is equal"]
    lines = [f"{len(protocol.differences)} recorded setting(s) differ and can move a number:"]
    for difference in protocol.differences:
        detail = difference.detail()
        if detail:
            for key, (a, b) in detail.items():
                lines.append(f"  {difference.setting} [{key}]: A {_short(a)} | B {_short(b)}")
        else:
            lines.append(f"  {difference.setting}: A {_short(difference.a)} | B {_short(difference.b)}")
    return lines


def _reference_lines(protocol: ProtocolDiff) -> list[str]:
    """Every other setting the published cell records (equal to A's, or one A does not record), then the
    settings it does not record: a setting it leaves out is unknown, not equal."""
    lines = []
    if protocol.equal:
        lines.append(f"{len(protocol.equal)} setting(s) the reference records equal A's:")
        lines += [f"  {setting}: {_short(value)}" for setting, value in protocol.equal.items()]
    if protocol.only_b:
        lines.append("  recorded by the reference, not by A: " + ", ".join(protocol.only_b))
    if protocol.only_a:
        lines.append("the reference does not record: " + ", ".join(protocol.only_a))
    return lines


def _metric_lines(metrics: list[tuple[str, float, float]]) -> list[str]:
    # Fixed-width numbers (7 and 8 wide) keep A, B and B - A at the same columns as the header.
    rows = [("metric", "A", "B", "B - A")]
    rows += [(pretty_metric(name), f"{a:7.4f}", f"{b:7.4f}", f"{b - a:+8.4f}") for name, a, b in metrics]
    return text_table(rows, right=(1, 2, 3))


def _doc_line(label: str, docs: list[RankedDoc]) -> str:
    shown = [
        f"{rank}. {doc.docid} [{'-' if doc.grade is None else doc.grade}]" for rank, doc in enumerate(docs, 1)
    ]
    return f"    {label} top {len(docs)}: " + ("  ".join(shown) or "(no documents)")


def _per_query_lines(diff: PerQueryDiff) -> list[str]:
    name = pretty_metric(diff.metric)
    lines = [
        f"Per query ({name} over {len(diff.qids)} paired queries; a query one side lacks scores as an empty ranking):",
        f"  B wins {diff.wins}, ties {diff.ties}, loses {diff.losses} (tie: |B - A| <= {TIE_TOLERANCE:g})",
    ]
    if not diff.moved:
        return [*lines, "  no query moved"]
    lines.append(
        "Queries that moved most ([grade] of each document; - = not judged"
        + (f"; judgments from {diff.judgments}):" if diff.judgments else "; judgments unavailable):")
    )
    for move in diff.moved:
        judged = ", ".join(f"{docid} ({grade})" for docid, grade in sorted(move.judged.items())) or "-"
        lines += [
            f"  query {move.qid}: A {move.a:.4f}  B {move.b:.4f}  ({move.delta:+.4f})",
            f"    judged: {judged}",
            _doc_line("A", move.a_top),
            _doc_line("B", move.b_top),
        ]
    return lines


COMMANDS = (
    Command(
        "diff",
        DiffOptions,
        diff,
        help="why two results differ: every differing setting that can move a number, then per query",
        description="Compare result folder A with result folder B, or with the published reference cell for "
        "A's model and dataset (B = ref, or ref:SOURCE for one source of references.yaml, or of the MTEB "
        "results folder given as --references: ref:mteb-results). Lists every "
        "recorded setting that differs and can move a number (dataset checksum, split, identical-id rule, "
        "prefixes, pooling, normalisation, max length, title joining, top-k, -c, relevance level, score "
        "precision, library versions that change scores), the metrics side by side, then per query: "
        "win / tie / loss and the queries that moved most with each side's top documents and judgments. "
        "Two run files are compared by their ir_metadata headers, field by field.",
        echo=True,
    ),
)
