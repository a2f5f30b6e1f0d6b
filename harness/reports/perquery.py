"""The report's per-query section: each system against the baseline, query by query.

For every dataset and every system beside the baseline: an inline SVG scatter of per-query values
(baseline across, system up; above the diagonal the system won), the win / tie / loss counts, the queries
that moved most with both sides' retrieved documents and their judgments, and a sortable table of every
paired query. The numbers come from :func:`harness.results.settings_diff.per_query_diff`, the same as ``harness diff``.
"""

from __future__ import annotations

from html import escape

from harness.core.errors import HarnessError
from harness.evaluation.metrics import pretty_metric
from harness.reports.tables import MetricTable, TableSet
from harness.results.settings_diff import TIE_TOLERANCE, PerQueryDiff, RankedDoc, per_query_diff

_SIZE, _PAD = 320, 34  # scatter: square side and axis margin, in px
_COLOURS = {"win": "#0a6", "loss": "#c33", "tie": "#888"}

# Click a header to sort a table.sortable by that column (again to reverse); rows marked "pinned" stay last.
# The text between the page's <script> tags: its sha256 is what the page's Content-Security-Policy allows.
SORT_SCRIPT = """
(() => {
  const key = (row, index) => {
    const cell = row.cells[index];
    const raw = cell ? (cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim()) : "";
    const number = Number(raw);
    return raw !== "" && !Number.isNaN(number) ? number : raw;
  };
  const order = (x, y) => {
    if (typeof x === "number" && typeof y === "number") return x - y;
    if (typeof x === "number") return -1;
    if (typeof y === "number") return 1;
    return String(x).localeCompare(String(y));
  };
  const sortBy = (table, index, header) => {
    const body = table.tBodies[0];
    const ascending = header.getAttribute("aria-sort") !== "ascending";
    for (const cell of table.tHead.rows[0].cells) cell.removeAttribute("aria-sort");
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const rows = Array.from(body.rows);
    const movable = rows.filter((row) => !row.classList.contains("pinned"));
    movable.sort((a, b) => (ascending ? 1 : -1) * order(key(a, index), key(b, index)));
    for (const row of movable.concat(rows.filter((row) => row.classList.contains("pinned")))) body.appendChild(row);
  };
  for (const table of document.querySelectorAll("table.sortable")) {
    Array.from(table.tHead.rows[0].cells).forEach((header, index) => {
      header.tabIndex = 0;
      header.title = "click to sort";
      header.addEventListener("click", () => sortBy(table, index, header));
      header.addEventListener("keydown", (event) => { if (event.key === "Enter") sortBy(table, index, header); });
    });
  }
})();
"""


def _outcome(a: float, b: float) -> str:
    return "win" if b - a > TIE_TOLERANCE else "loss" if a - b > TIE_TOLERANCE else "tie"


def scatter_svg(diff: PerQueryDiff, baseline: str, system: str) -> str:
    """Per-query values as an inline SVG: baseline on x, system on y, the diagonal where they tie."""
    values = diff.a + diff.b
    low, high = min(0.0, *values), max(1.0, *values)
    span = (high - low) or 1.0
    inner = _SIZE - 2 * _PAD

    def x(value: float) -> float:
        return round(_PAD + (value - low) / span * inner, 1)

    def y(value: float) -> float:
        return round(_SIZE - _PAD - (value - low) / span * inner, 1)

    points = [
        f'<circle cx="{x(a)}" cy="{y(b)}" r="3" fill="{_COLOURS[_outcome(a, b)]}" fill-opacity="0.6">'
        f"<title>query {escape(qid)}: {a:.4f} → {b:.4f}</title></circle>"
        for qid, a, b in zip(diff.qids, diff.a, diff.b, strict=True)
    ]
    metric = escape(pretty_metric(diff.metric))
    return (
        f'<svg class="scatter" xmlns="http://www.w3.org/2000/svg" width="{_SIZE}" height="{_SIZE}" '
        f'viewBox="0 0 {_SIZE} {_SIZE}" role="img" aria-label="{metric} per query: {escape(baseline)} vs {escape(system)}">'
        f'<rect x="{_PAD}" y="{_PAD}" width="{inner}" height="{inner}" fill="none" stroke="#ccc"/>'
        f'<line x1="{x(low)}" y1="{y(low)}" x2="{x(high)}" y2="{y(high)}" stroke="#999" stroke-dasharray="4 3"/>'
        + "".join(points)
        + f'<text x="{_SIZE / 2}" y="{_SIZE - 6}" text-anchor="middle" font-size="11">{escape(baseline)} ({metric})</text>'
        f'<text x="12" y="{_SIZE / 2}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 12 {_SIZE / 2})">{escape(system)} ({metric})</text>'
        f'<text x="{_PAD}" y="{_SIZE - _PAD + 14}" font-size="10">{low:g}</text>'
        f'<text x="{_SIZE - _PAD}" y="{_SIZE - _PAD + 14}" font-size="10" text-anchor="end">{high:g}</text>'
        "</svg>"
    )


def _docs_html(docs: list[RankedDoc]) -> str:
    items = "".join(
        f'<li><code>{escape(doc.docid)}</code> <span class="grade">'
        f"{'not judged' if doc.grade is None else f'grade {doc.grade}'}</span></li>"
        for doc in docs
    )
    return f"<ol>{items}</ol>" if items else "<p>(no documents)</p>"


def _moved_html(diff: PerQueryDiff, baseline: str, system: str) -> str:
    if not diff.moved:
        return "<p>No query moved.</p>"
    source = (
        f"judgments from <code>{escape(diff.judgments)}</code>" if diff.judgments else "judgments unavailable"
    )
    rows = []
    for move in diff.moved:
        judged = ", ".join(f"{docid} ({grade})" for docid, grade in sorted(move.judged.items())) or "–"
        rows.append(
            f'<tr><th>{escape(move.qid)}</th><td class="num">{move.a:.4f}</td><td class="num">{move.b:.4f}</td>'
            f'<td class="num">{move.delta:+.4f}</td><td>{escape(judged)}</td>'
            f"<td>{_docs_html(move.a_top)}</td><td>{_docs_html(move.b_top)}</td></tr>"
        )
    head = (
        f"<tr><th>query</th><th>{escape(baseline)}</th><th>{escape(system)}</th><th>change</th>"
        f"<th>judged documents (grade)</th><th>{escape(baseline)} retrieved</th><th>{escape(system)} retrieved</th></tr>"
    )
    return (
        f'<p class="legend">Queries that moved most ({source}):</p>'
        f'<table class="queries moved sortable"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _values_table(diff: PerQueryDiff, baseline: str, system: str) -> str:
    rows = "".join(
        f'<tr><th>{escape(qid)}</th><td class="num" data-sort="{a!r}">{a:.4f}</td>'
        f'<td class="num" data-sort="{b!r}">{b:.4f}</td><td class="num" data-sort="{b - a!r}">{b - a:+.4f}</td>'
        f"<td>{_outcome(a, b)}</td></tr>"
        for qid, a, b in zip(diff.qids, diff.a, diff.b, strict=True)
    )
    head = f"<tr><th>query</th><th>{escape(baseline)}</th><th>{escape(system)}</th><th>change</th><th>outcome</th></tr>"
    return (
        f'<details class="per-query-values"><summary>All {len(diff.qids)} paired queries (click a header to sort)'
        f'</summary><div class="scroll"><table class="queries per-query sortable"><thead>{head}</thead>'
        f"<tbody>{rows}</tbody></table></div></details>"
    )


def _pair_html(table: MetricTable, tableset: TableSet, row_key: str, slug: str) -> str:
    baseline, system = table.labels[table.baseline], table.labels[slug]
    try:
        diff = per_query_diff(
            tableset.sources[(row_key, table.baseline)], tableset.sources[(row_key, slug)], table.metric
        )
    except HarnessError as error:
        return f"<p>{escape(system)} vs {escape(baseline)} on {escape(row_key)}: {escape(str(error))}</p>"
    return (
        f'<section class="pair" data-dataset="{escape(row_key)}" data-system="{escape(system)}">'
        f"<h3>{escape(row_key)}: {escape(system)} vs {escape(baseline)}</h3>"
        f'<p class="wtl">{escape(system)} wins <strong class="wins">{diff.wins}</strong>, ties '
        f'<strong class="ties">{diff.ties}</strong>, loses <strong class="losses">{diff.losses}</strong> '
        f"of {len(diff.qids)} paired queries on {escape(pretty_metric(table.metric))} "
        f"(a query one side lacks scores as an empty ranking).</p>"
        f"{scatter_svg(diff, baseline, system)}{_moved_html(diff, baseline, system)}{_values_table(diff, baseline, system)}"
        "</section>"
    )


def per_query_section(tableset: TableSet) -> str:
    """The section for the first table's metric, or "" without a baseline."""
    table = tableset.tables[0] if tableset.tables else None
    if table is None or table.baseline is None:
        return ""
    pairs = [
        _pair_html(table, tableset, row.key, slug)
        for row in table.rows
        if (row.key, table.baseline) in tableset.sources
        for slug in table.columns
        if slug != table.baseline and (row.key, slug) in tableset.sources
    ]
    if not pairs:
        return ""
    metric = escape(pretty_metric(table.metric))
    return (
        f'<h2 id="per-query">Per query against {escape(table.labels[table.baseline])} ({metric})</h2>'
        '<p class="legend">Each point is a query: above the dashed diagonal the system beat the baseline '
        f"(green), below it lost (red), on it tied (grey, |change| ≤ {TIE_TOLERANCE:g}).</p>" + "".join(pairs)
    )
