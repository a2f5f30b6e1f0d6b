"""``harness report``: one self-contained static HTML page for a results folder.

The page carries everything inline (CSS, charts as base64 PNG, per-query scatters as SVG, the small
table-sorting script, provenance as text) so it can be mailed, attached to a CI run or opened from disk
with no server and no network; its Content-Security-Policy forbids any request a browser could make.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from html import escape
from pathlib import Path
from typing import Any

from harness import __version__
from harness.core.fileio import atomic_write
from harness.evaluation.metrics import HEADLINE_METRICS, pretty_metric
from harness.reports.charts import render_charts, series_colours
from harness.reports.formats import caption, legend, shown_text
from harness.reports.perquery import SORT_SCRIPT, per_query_section
from harness.reports.tables import BETTER, TIED, Cell, MetricTable, TableSet
from harness.results.result_store import StoredResult

DEFAULT_TITLE = "Retrieval benchmark report"

_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
.meta { color: #666; font-size: .9rem; }
table.results { border-collapse: collapse; margin: .8rem 0; font-variant-numeric: tabular-nums; }
table.results th, table.results td { padding: .3rem .7rem; border-bottom: 1px solid #e5e5e5; }
table.results td.num { text-align: right; } table.results th { background: #f6f6f6; text-align: left; }
table.results tr.average td { border-top: 2px solid #999; font-style: italic; }
td.best { font-weight: 700; } .mark { color: #0a6; } .mark.worse { color: #c33; }
.legend { color: #555; font-size: .85rem; margin: 0; } .shown { color: #555; font-size: .8rem; }
ul.chart-legend { list-style: none; padding: 0; margin: .2rem 0 1rem; display: flex; flex-wrap: wrap;
  gap: .2rem 1.2rem; font-size: .85rem; } ul.chart-legend li { overflow-wrap: anywhere; max-width: 100%; }
.notes { border-top: 1px solid #e5e5e5; padding-top: .3rem; max-width: 60rem; } .caption { margin: .3rem 0; } img.chart { max-width: 100%; border: 1px solid #eee; }
.skipped { background: #fff4e5; border-left: 4px solid #f0a020; padding: .5rem 1rem; }
details { margin: .4rem 0; border: 1px solid #e5e5e5; border-radius: 4px; padding: .3rem .7rem; }
summary { cursor: pointer; font-weight: 600; } dl { display: grid; grid-template-columns: 12rem 1fr; gap: .2rem 1rem; }
dt { color: #666; } dd { margin: 0; word-break: break-all; } pre { background: #f8f8f8; padding: .6rem; overflow-x: auto;
font-size: .8rem; }
table.sortable thead th { cursor: pointer; } th[aria-sort="ascending"]::after { content: " ▲"; }
th[aria-sort="descending"]::after { content: " ▼"; } .ci, .judged { color: #666; font-size: .8rem; }
.tied { color: #36c; } .scroll { max-height: 24rem; overflow-y: auto; } svg.scatter { float: right; margin: 0 0 1rem 1rem; }
section.pair { clear: both; border-top: 1px solid #eee; padding-top: .5rem; } table.moved ol { margin: 0; padding-left: 1.2rem; }
table.moved td { vertical-align: top; font-size: .85rem; max-width: 22rem; } table.moved li { overflow-wrap: anywhere; }
.query-text { font-weight: 400; color: #333; font-size: .8rem; max-width: 18rem; } .doc-title { color: #555; }
table.moved ul { margin: 0; padding-left: 1rem; }
table.queries { border-collapse: collapse; font-variant-numeric: tabular-nums; }
table.queries th, table.queries td { padding: .25rem .6rem; border-bottom: 1px solid #eee; text-align: left; }
table.queries td.num { text-align: right; } table.queries thead th { background: #f6f6f6; }
"""


def inline_source(text: str) -> str:
    """The CSP source that allows exactly one inline ``<script>`` or ``<style>`` whose content is ``text``."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


# No request of any kind, and no inline code but the page's own: its one style sheet and its one script are
# allowed by their sha256, so markup that slipped into a name could run nothing. Only data: images.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; img-src data:; style-src {inline_source(_STYLE)}; "
    f"script-src {inline_source(SORT_SCRIPT)}; base-uri 'none'; form-action 'none'"
)


def _cell_extras(cell: Cell, digits: int) -> str:
    """Tied-with-best mark, interval and judged share, after the value and its significance mark."""
    parts = []
    if cell.tied_with_best and not cell.best and cell.vs_best is not None:
        title = f"not significantly different from the row's best (adjusted p = {cell.vs_best.p_value_adjusted:.3g})"
        parts.append(f' <span class="tied" title="{escape(title)}">{TIED}</span>')
    if cell.interval is not None:
        parts.append(
            f' <span class="ci">[{cell.interval[0]:.{digits}f}, {cell.interval[1]:.{digits}f}]</span>'
        )
    if cell.judged is not None:
        parts.append(f' <span class="judged">J {cell.judged:.2f}</span>')
    return "".join(parts)


def _cell_html(cell: Cell, digits: int, show: tuple[str, ...] = ()) -> str:
    text = "–" if cell.value is None else f"{cell.value:.{digits}f}"
    classes = (
        ["num"]
        + (["best"] if cell.best else [])
        + (["tied-best"] if cell.tied_with_best and not cell.best else [])
    )
    mark, data = "", ""
    test = cell.comparison
    if test is not None:
        # The engine's result, unrounded, so readers and tools see what the table saw.
        payload = escape(json.dumps(test.to_json()))
        data = f'<span class="comparison" hidden data-comparison="{payload}"></span>'
    if cell.mark and test is not None:
        kind = "better" if cell.mark == BETTER else "worse"
        title = (
            f"difference {test.difference:+.4f} over {test.n_queries} paired queries, "
            f"p = {test.p_value:.3g}, adjusted p = {test.p_value_adjusted:.3g}"
        )
        mark = f' <span class="mark {kind}" title="{escape(title)}">{escape(cell.mark)}</span>'
    shown = shown_text(cell, show, digits)
    if shown:
        mark += f' <span class="shown">{escape(shown)}</span>'
    sort = "" if cell.value is None else f' data-sort="{cell.value!r}"'
    return (
        f'<td class="{" ".join(classes)}"{sort}>{escape(text)}{mark}{_cell_extras(cell, digits)}{data}</td>'
    )


def table_html(table: MetricTable, tableset: TableSet) -> str:
    head = "".join(f"<th>{escape(table.labels[slug])}</th>" for slug in table.columns)
    lines = [
        f'<table class="results sortable" id="table-{escape(table.metric)}">',
        f"<thead><tr><th>dataset</th>{head}</tr></thead><tbody>",
    ]
    for row in table.rows:
        cells = "".join(_cell_html(row.cells[slug], tableset.digits, tableset.show) for slug in table.columns)
        lines.append(f"<tr><th>{escape(row.key)}</th>{cells}</tr>")
    if table.shows_average:
        cells = "".join(_cell_html(table.average[slug], tableset.digits) for slug in table.columns)
        lines.append(
            f'<tr class="average pinned"><td>{escape(table.average_label)} ({len(table.average_over)})</td>{cells}</tr>'
        )
    lines.append("</tbody></table>")
    # The explanations: one block of notes under the table.
    notes = legend(table, tableset.significance, tableset.ci, tableset.show)
    lines.append(
        '<div class="notes">' + "".join(f'<p class="legend">{escape(line)}</p>' for line in notes) + "</div>"
    )
    return "\n".join(lines)


def chart_legend_html(table: MetricTable) -> str:
    """The chart's legend again as text under it: every name in full, selectable and searchable, with its
    bars' colour (an SVG swatch: the page's policy allows no style attribute)."""
    items = "".join(
        f'<li><svg class="swatch" width="12" height="12" aria-hidden="true"><rect width="12" height="12" '
        f'fill="{colour}"/></svg> <span class="system">{escape(table.labels[slug])}</span></li>'
        for slug, colour in zip(table.columns, series_colours(len(table.columns)), strict=True)
    )
    return f'<ul class="chart-legend" aria-label="chart legend">{items}</ul>'


def _definition_list(pairs: list[tuple[str, Any]]) -> str:
    items = []
    for key, value in pairs:
        if value in (None, "", {}, []):
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
        items.append(f"<dt>{escape(key)}</dt><dd>{escape(text)}</dd>")
    return "<dl>" + "".join(items) + "</dl>"


def _ties_summary(ties: dict[str, Any]) -> dict[str, Any] | None:
    """Tie diagnostics in brief: counts, and the range of every metric the order of tied documents can move."""
    if not ties:
        return None
    moving = {
        name: [bound["lowest"], bound["highest"]]
        for name, bound in (ties.get("bounds") or {}).items()
        if bound.get("lowest") != bound.get("highest")
    }
    return {
        "queries_with_ties": ties.get("queries_with_ties"),
        "straddling_cutoff": {
            cut: entry.get("queries") for cut, entry in (ties.get("straddling_cutoff") or {}).items()
        },
        "metrics_the_tie_order_can_move": moving or "none",
    }


def provenance_html(result: StoredResult) -> str:
    """A collapsible block with the facts that produced one result, and the full provenance JSON."""
    prov = result.provenance if isinstance(result.provenance, dict) else {}
    dataset = prov.get("dataset", {}) or {}
    model = prov.get("model", {}) or {}
    environment = prov.get("environment", {}) or {}
    headline = ", ".join(
        f"{pretty_metric(name)} {result.metrics[name]:.4f}"
        for name in HEADLINE_METRICS
        if name in result.metrics
    )
    summary = f"{result.dataset} ({result.split}) · {result.model} · {headline}"
    facts = [
        ("folder", str(result.directory)),
        ("created", prov.get("created_at")),
        ("harness version", prov.get("harness_version")),
        (
            "command",
            " ".join(prov["command"]) if isinstance(prov.get("command"), list) else prov.get("command"),
        ),
        ("queries evaluated", str(result.n_queries)),
        ("judged@k (share of the top k judged)", (result.judged.get("mean") or None)),
        ("judged warning", result.judged.get("warning")),
        ("ties", _ties_summary(result.ties)),
        ("data fingerprint", dataset.get("fingerprint")),
        ("data counts", dataset.get("counts")),
        ("model spec", model.get("spec")),
        ("model identity", model.get("identity")),
        ("model settings", model.get("settings")),
        ("assumed settings", model.get("assumed")),
        ("evaluation", (prov.get("config") or {}).get("evaluation")),
        ("retrieval", (prov.get("config") or {}).get("retrieval")),
        ("device", environment.get("device")),
        ("versions", environment.get("versions")),
        ("hardware", environment.get("hardware")),
        ("timings (s)", prov.get("timings")),
    ]
    full = escape(json.dumps(prov, indent=2, ensure_ascii=False, sort_keys=True))
    return (
        f"<details><summary>{escape(summary)}</summary>{_definition_list(facts)}"
        f"<details><summary>provenance.json</summary><pre>{full}</pre></details></details>"
    )


def build_report(tableset: TableSet, charts: dict[str, bytes], *, title: str, results_dir: Path) -> str:
    """The whole page as a string."""
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta">Results folder <code>{escape(str(results_dir))}</code> · '
        f"{len(tableset.collection.results)} result(s) · generated {escape(now)} by harness {escape(__version__)}</p>",
    ]
    if tableset.collection.skipped:
        items = "".join(
            f"<li><code>{escape(str(path))}</code>: {escape(reason)}</li>"
            for path, reason in tableset.collection.skipped
        )
        parts.append(
            f'<div class="skipped"><strong>Skipped (not in any table or average):</strong><ul>{items}</ul></div>'
        )
    for table in tableset.tables:
        parts.append(f'<h2 id="metric-{escape(table.metric)}">{escape(pretty_metric(table.metric))}</h2>')
        parts.append(f'<p class="caption">{escape(caption(table))}</p>')
        parts.append(table_html(table, tableset))
        png = charts.get(table.metric)
        if png:
            encoded = base64.b64encode(png).decode("ascii")
            alt = f"{pretty_metric(table.metric)} per dataset and model, with 95% bootstrap confidence intervals"
            parts.append(
                f'<p><img class="chart" alt="{escape(alt)}" src="data:image/png;base64,{encoded}"></p>'
            )
            parts.append(chart_legend_html(table))
    parts.append(per_query_section(tableset))
    parts.append('<h2 id="runs">Runs and their provenance</h2>')
    used = sorted(tableset.sources.values(), key=lambda r: (r.dataset, r.split, r.model))
    parts += [provenance_html(result) for result in used]
    parts.append(f"<script>{SORT_SCRIPT}</script>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(
    tableset: TableSet, output: str | Path, *, title: str = DEFAULT_TITLE, results_dir: Path
) -> Path:
    """Render charts and page and write it atomically to ``output``."""
    page = build_report(tableset, render_charts(tableset), title=title, results_dir=results_dir)
    output = Path(output)
    with atomic_write(output) as handle:
        handle.write(page)
    return output
