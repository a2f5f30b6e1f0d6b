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


def legend(
    table: MetricTable, settings: SignificanceSettings, ci: bool = False, show: tuple[str, ...] = ()
) -> list[str]:
    """Plain-text lines explaining the marks of ``table``: the notes printed under it."""
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
            + _reachable(table)
        )
    if table.baseline is not None:
        lines.append(
            f"{BETTER} / {WORSE}: significantly better / worse than {table.labels[table.baseline]} "
            f"({settings.describe()} over the {table.n_comparisons} comparisons in this table)."
        )
        if show:
            lines.append(f"{_shown_label(show)}: {_shown_explanation(show, table, settings)}.")
        lines.append(f"Pairing: {PAIRING_RULE}.")
    if table.shows_average:
        lines.append(
            f"Average: mean over the {len(table.average_over)} datasets every model has"
            f" ({', '.join(table.average_over)})."
        )
    return lines + table.notes


def _reachable(table: MetricTable) -> str:
    """`` The qrels allow at most ...``: the highest Judged@k each dataset's judgments make possible."""
    if not table.judged_ceilings:
        return ""
    shares = ", ".join(f"{key} {share:.2f}" for key, share in table.judged_ceilings.items())
    return f" The qrels allow at most: {shares}."


def caption(table: MetricTable) -> str:
    """The table's one short sentence; what its marks mean is in the notes under it (:func:`legend`)."""
    against = f", against {table.labels[table.baseline]}" if table.baseline is not None else ""
    return f"{pretty_metric(table.metric)} per dataset{against}."


def _shown_label(show: tuple[str, ...]) -> str:
    return "(" + ", ".join({"delta": "+difference", "p": "p"}[what] for what in show) + ")"


def _shown_explanation(show: tuple[str, ...], table: MetricTable, settings: SignificanceSettings) -> str:
    parts = []
    if "delta" in show:
        parts.append(f"the value minus {table.labels[table.baseline]}'s over the paired queries")
    if "p" in show:
        adjusted = "unadjusted" if settings.correction == "none" else f"{settings.correction}-adjusted"
        parts.append(f"the {adjusted} p of that difference")
    return " and ".join(parts)


def p_text(p_value: float) -> str:
    """A p value as papers print it: three decimals, or ``p<0.001``."""
    return "p<0.001" if p_value < 0.001 else f"p={p_value:.3f}"


def shown_text(cell: Cell, show: tuple[str, ...], digits: int) -> str:
    """``(+0.0123, p=0.021)``: the cell's difference from the baseline and its corrected p, as ``show``
    asks; "" for the baseline itself and cells without a test."""
    test = cell.comparison
    if not show or test is None:
        return ""
    parts = []
    if "delta" in show:
        parts.append(f"{test.difference:+.{digits}f}")
    if "p" in show:
        parts.append(p_text(test.p_value_adjusted))
    return f"({', '.join(parts)})"


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
            return " ".join([text, *_annotations(cell, tableset.digits, tableset.show)])

        for row in table.rows:
            out.append(
                "| "
                + " | ".join([_md_escape(row.key), *(cell_text(row.cells[s]) for s in table.columns)])
                + " |"
            )
        if table.shows_average:
            label = f"{table.average_label} ({len(table.average_over)})"
            out.append(
                "| "
                + " | ".join([f"*{label}*", *(cell_text(table.average[s]) for s in table.columns)])
                + " |"
            )
        out.append("")
        out.extend(f"_{line}_  " for line in legend(table, tableset.significance, tableset.ci, tableset.show))
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


def _annotations(cell: Cell, digits: int, show: tuple[str, ...] = ()) -> list[str]:
    """What follows a value in text formats: significance mark, difference and p, tie mark, interval."""
    parts = [cell.mark] if cell.mark else []
    if shown_text(cell, show, digits):
        parts.append(shown_text(cell, show, digits))
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


def _latex_text(text: str) -> str:
    """Plain legend text as LaTeX: escaped, the marks as math symbols."""
    text = latex_escape(text).replace(BETTER, r"$\uparrow$").replace(WORSE, r"$\downarrow$")
    return text.replace(TIED, r"$\approx$")


def _latex_p(text: str) -> str:
    """``p=0.021`` and ``p<0.001`` with the p in math italics, as papers set it."""
    return text.replace("p<0.001", "$p<0.001$").replace("p=", "$p$=")


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
            shown = shown_text(cell, tableset.show, tableset.digits)
            if shown:
                text += rf" {{\scriptsize{_latex_p(latex_escape(shown))}}}"
            if cell.interval is not None:
                low, high = (f"{value:.{tableset.digits}f}" for value in cell.interval)
                text += rf" {{\scriptsize[{low}, {high}]}}"
            return text

        notes = [
            _latex_text(line) for line in legend(table, tableset.significance, tableset.ci, tableset.show)
        ]
        out += [
            r"\begin{table}[t]",
            r"\centering",
            rf"\caption{{{latex_escape(caption(table))}}}",
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
        if table.shows_average:
            out.append(r"\midrule")
            out.append(
                " & ".join(
                    [
                        f"{table.average_label[:1].upper()}{table.average_label[1:]} ({len(table.average_over)})",
                        *(cell_text(table.average[s]) for s in table.columns),
                    ]
                )
                + r" \\"
            )
        out += [r"\bottomrule", r"\end{tabular}"]
        # The explanations: one block of notes under the table, not in the caption.
        out += [r"\par\smallskip", r"\begin{minipage}{\linewidth}\footnotesize\raggedright"]
        out += [f"{line}\\par" for line in notes]
        out += [r"\end{minipage}", r"\end{table}", ""]
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
                "caption": caption(table),
                "legend": legend(table, tableset.significance, tableset.ci, tableset.show),
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
