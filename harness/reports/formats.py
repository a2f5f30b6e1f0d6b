"""Rendering tables built by :mod:`harness.reports.tables`: Markdown, CSV (one tidy line per cell), LaTeX and JSON."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from harness.core.errors import HarnessError
from harness.evaluation.comparison import PAIRING_RULE, SignificanceSettings
from harness.evaluation.metrics import pretty_metric
from harness.reports.tables import BETTER, MISSING, TIED, WORSE, Cell, MetricTable, TableSet
from harness.results.collect import Collection

FORMATS = ("md", "csv", "latex", "json")


def legend(table: MetricTable, settings: SignificanceSettings, ci: bool = False) -> list[str]:
    """Plain-text lines explaining the marks of ``table``."""
    lines = ["Bold: best in the row (ties at the printed precision are all bold)."]
    if ci:
        lines.append(
            f"[low, high]: {settings.confidence:.0%} percentile bootstrap interval of the mean over queries "
            f"({settings.n_resamples:,} resamples, seed {settings.seed}); the average's interval resamples every query "
            "weighted 1 / (datasets x that dataset's queries)."
        )
        lines.append(
            f"{TIED}: statistically tied with the best of the row, i.e. not significantly different from it "
            f"({settings.describe()}; each system tested against its row's best, corrected over that row's "
            "comparisons; the average row is not tested)."
        )
    if table.judged_k is not None:
        lines.append(
            f"Judged@{table.judged_k} (beside each value: J, or its own table): the share of the top "
            f"{table.judged_k} documents that have a judgment (any grade); unjudged documents count as non-relevant."
        )
    if table.baseline is not None:
        lines.append(
            f"{BETTER} / {WORSE}: significantly better / worse than {table.labels[table.baseline]} "
            f"({settings.describe()} over the {table.n_comparisons} comparisons in this table)."
        )
        lines.append(f"Pairing: {PAIRING_RULE}.")
    lines.append(
        f"Average: mean over the {len(table.average_over)} dataset(s) every model has"
        + (f" ({', '.join(table.average_over)})." if table.average_over else ".")
    )
    return lines + table.notes


def _format(value: float | None, digits: int) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def render_markdown(tableset: TableSet) -> str:
    out: list[str] = []
    for table in tableset.tables:
        out.append(f"### {pretty_metric(table.metric)}\n")
        header = ["dataset", *(table.labels[slug] for slug in table.columns)]
        out.append("| " + " | ".join(_md_escape(h) for h in header) + " |")
        out.append("|" + "|".join(["---", *["---:"] * len(table.columns)]) + "|")

        def cell_text(cell: Cell) -> str:
            text = _format(cell.value, tableset.digits)
            if cell.best:
                text = f"**{text}**"
            return " ".join([text, *_annotations(cell, tableset.digits)])

        for row in table.rows:
            out.append(
                "| "
                + " | ".join([_md_escape(row.key), *(cell_text(row.cells[s]) for s in table.columns)])
                + " |"
            )
        label = f"average ({len(table.average_over)})"
        out.append(
            "| " + " | ".join([f"*{label}*", *(cell_text(table.average[s]) for s in table.columns)]) + " |"
        )
        out.append("")
        out.extend(f"_{line}_  " for line in legend(table, tableset.significance, tableset.ci))
        out.append("")
        out.extend(_judged_markdown(table))
    out.extend(_skipped_lines(tableset.collection))
    return "\n".join(out).rstrip() + "\n"


def _judged_markdown(table: MetricTable) -> list[str]:
    """The Judged@k table printed right after the nDCG@k table it belongs to."""
    if table.judged_k is None:
        return []
    out = [f"### Judged@{table.judged_k} (beside {pretty_metric(table.metric)})\n"]
    out.append(
        "| " + " | ".join(["dataset", *(_md_escape(table.labels[slug]) for slug in table.columns)]) + " |"
    )
    out.append("|" + "|".join(["---", *["---:"] * len(table.columns)]) + "|")
    for row in table.rows:
        values = [
            MISSING if row.cells[s].judged is None else f"{row.cells[s].judged:.2f}" for s in table.columns
        ]
        out.append("| " + " | ".join([_md_escape(row.key), *values]) + " |")
    return [*out, ""]


def _annotations(cell: Cell, digits: int) -> list[str]:
    """What follows a value in text formats: significance mark, tie mark, interval, judged share."""
    parts = [cell.mark] if cell.mark else []
    if cell.tied_with_best and not cell.best:
        parts.append(TIED)
    if cell.interval is not None:
        parts.append(f"[{cell.interval[0]:.{digits}f}, {cell.interval[1]:.{digits}f}]")
    return parts


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _skipped_lines(collection: Collection) -> list[str]:
    if not collection.skipped:
        return []
    return [
        "Skipped results (not in any table or average):",
        *(f"- {path}: {reason}" for path, reason in collection.skipped),
    ]


def render_csv(tableset: TableSet) -> str:
    """Tidy CSV: one line per metric x dataset x model (plus the average rows), every mark a column."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [
            "metric",
            "dataset",
            "split",
            "model",
            "value",
            "n_queries",
            "best",
            "baseline",
            "paired_queries",
            "difference",
            "p_value",
            "p_value_adjusted",
            "significant",
            "direction",
            "ci_low",
            "ci_high",
            "tied_with_best",
            "p_value_vs_best_adjusted",
            "judged",
        ]
    )

    def number(value: float | None) -> str:
        return "" if value is None else repr(float(value))

    for table in tableset.tables:
        baseline = table.labels[table.baseline] if table.baseline else ""
        rows = [(row.key, row.split, row.cells) for row in table.rows] + [("average", "", table.average)]
        for key, split, cells in rows:
            for slug in table.columns:
                cell = cells[slug]
                test = cell.comparison
                writer.writerow(
                    [
                        table.metric,
                        key,
                        split,
                        table.labels[slug],
                        number(cell.value),
                        "" if cell.n_queries is None else cell.n_queries,
                        str(cell.best).lower(),
                        baseline,
                        "" if test is None else test.n_queries,
                        number(test and test.difference),
                        number(test and test.p_value),
                        number(test and test.p_value_adjusted),
                        str(bool(cell.mark)).lower(),
                        {BETTER: "better", WORSE: "worse"}.get(cell.mark, ""),
                        number(cell.interval and cell.interval[0]),
                        number(cell.interval and cell.interval[1]),
                        str(cell.tied_with_best).lower() if tableset.ci else "",
                        number(cell.vs_best and cell.vs_best.p_value_adjusted),
                        number(cell.judged),
                    ]
                )
    return buffer.getvalue()


_LATEX_SPECIAL = {
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


def render_latex(tableset: TableSet) -> str:
    """booktabs tables (``\\usepackage{booktabs}``); marks are math arrows, best cells ``\\textbf``."""
    marks = {BETTER: r"$^{\uparrow}$", WORSE: r"$^{\downarrow}$"}
    out: list[str] = []
    for table in tableset.tables:

        def cell_text(cell: Cell) -> str:
            text = _format(cell.value, tableset.digits)
            text = "--" if cell.value is None else text
            if cell.best:
                text = rf"\textbf{{{text}}}"
            text += marks.get(cell.mark, "") + (
                r"$^{\approx}$" if cell.tied_with_best and not cell.best else ""
            )
            if cell.interval is not None:
                low, high = (f"{value:.{tableset.digits}f}" for value in cell.interval)
                text += rf" {{\scriptsize[{low}, {high}]}}"
            return text

        caption = " ".join(legend(table, tableset.significance, tableset.ci))
        caption = latex_escape(caption).replace(BETTER, r"$\uparrow$").replace(WORSE, r"$\downarrow$")
        caption = caption.replace(TIED, r"$\approx$")
        out += [
            r"\begin{table}[t]",
            r"\centering",
            rf"\caption{{{latex_escape(pretty_metric(table.metric))}. {caption}}}",
            rf"\begin{{tabular}}{{l{'r' * len(table.columns)}}}",
            r"\toprule",
            " & ".join(["Dataset", *(latex_escape(table.labels[s]) for s in table.columns)]) + r" \\",
            r"\midrule",
        ]
        for row in table.rows:
            out.append(
                " & ".join([latex_escape(row.key), *(cell_text(row.cells[s]) for s in table.columns)])
                + r" \\"
            )
        out.append(r"\midrule")
        out.append(
            " & ".join(
                [
                    f"Average ({len(table.average_over)})",
                    *(cell_text(table.average[s]) for s in table.columns),
                ]
            )
            + r" \\"
        )
        out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    if tableset.collection.skipped:
        out += [f"% skipped {path}: {reason}" for path, reason in tableset.collection.skipped]
    return "\n".join(out).rstrip() + "\n"


def tables_to_json(tableset: TableSet) -> dict[str, Any]:
    def cell_json(cell: Cell) -> dict[str, Any]:
        return {
            "value": cell.value,
            "n_queries": cell.n_queries,
            "best": cell.best,
            "significant": bool(cell.mark),
            "direction": {BETTER: "better", WORSE: "worse"}.get(cell.mark),
            "comparison": None if cell.comparison is None else cell.comparison.to_json(),
            "interval": None if cell.interval is None else list(cell.interval),
            "tied_with_best": cell.tied_with_best if tableset.ci else None,
            "vs_best": None if cell.vs_best is None else cell.vs_best.to_json(),
            "judged": cell.judged,
        }

    return {
        "significance": tableset.significance.to_json(),
        "pairing_rule": PAIRING_RULE,
        "intervals": {
            "confidence": tableset.significance.confidence,
            "n_resamples": tableset.significance.n_resamples,
            "seed": tableset.significance.seed,
            "method": "percentile bootstrap of the mean over queries",
        }
        if tableset.ci
        else None,
        "tables": [
            {
                "metric": table.metric,
                "baseline": table.labels[table.baseline] if table.baseline else None,
                "models": [table.labels[s] for s in table.columns],
                "rows": [
                    {
                        "dataset": row.dataset,
                        "split": row.split,
                        "cells": {table.labels[s]: cell_json(row.cells[s]) for s in table.columns},
                    }
                    for row in table.rows
                ],
                "average": {
                    "over": table.average_over,
                    "cells": {table.labels[s]: cell_json(table.average[s]) for s in table.columns},
                },
                "n_comparisons": table.n_comparisons,
                "legend": legend(table, tableset.significance, tableset.ci),
            }
            for table in tableset.tables
        ],
        "skipped": [{"path": str(path), "reason": reason} for path, reason in tableset.collection.skipped],
    }


def render(tableset: TableSet, fmt: str) -> str:
    """The tables in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "md":
        return render_markdown(tableset)
    if fmt == "csv":
        return render_csv(tableset)
    if fmt == "latex":
        return render_latex(tableset)
    if fmt == "json":
        return json.dumps(tables_to_json(tableset), indent=2, ensure_ascii=False) + "\n"
    raise HarnessError(f"unknown table format {fmt!r}; choose from {', '.join(FORMATS)} or png")
