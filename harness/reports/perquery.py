"""The report's per-query section: each system against the baseline, query by query.

For every dataset and every system beside the baseline: an inline SVG scatter of per-query values
(baseline across, system up; above the diagonal the system won), the win / tie / loss counts, the queries
that moved most with both sides' retrieved documents and their judgments, and a sortable table of every
paired query. The numbers come from :func:`harness.results.settings_diff.per_query_diff`, the same as ``harness diff``.
Queries show their text and documents their titles, read from the dataset folder the results' provenance
names when it is on this machine; otherwise ids only, and a note says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from harness.core.errors import HarnessError
from harness.datasets.beir import iter_corpus, load_queries
from harness.evaluation.metrics import pretty_metric
from harness.reports.tables import MetricTable, TableSet
from harness.results.result_store import StoredResult
from harness.results.settings_diff import TIE_TOLERANCE, PerQueryDiff, RankedDoc, per_query_diff

# Titles are looked up by streaming the corpus once; past this size that pass would take minutes (MS MARCO
# is 3 GB), so the page shows document ids only and says so.
MAX_CORPUS_BYTES = 500 * 1024 * 1024

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


@dataclass
class DatasetText:
    """Query texts and document titles for the per-query views, or the reason they are missing."""

    queries: dict[str, str] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    note: str | None = None  # why texts or titles are missing (None: read from the dataset folder)


def _dataset_root(results: Iterable[StoredResult]) -> str | None:
    for result in results:
        dataset = result.provenance.get("dataset") if isinstance(result.provenance, dict) else None
        root = dataset.get("root") if isinstance(dataset, dict) else None
        if isinstance(root, str):
            return root
    return None


def dataset_text(results: Iterable[StoredResult], qids: set[str], docids: set[str]) -> DatasetText:
    """The texts of ``qids`` and titles of ``docids`` from the dataset folder the results were run on."""
    root = _dataset_root(results)
    if root is None:
        return DatasetText(note="the results do not name their dataset folder: ids only")
    folder = Path(root)
    queries_path = folder / "queries.jsonl"
    corpus_path = next(
        (folder / name for name in ("corpus.jsonl", "corpus.jsonl.gz") if (folder / name).is_file()), None
    )
    if not queries_path.is_file() and corpus_path is None:
        return DatasetText(note=f"the dataset folder {root} is not on this machine: ids only")
    text = DatasetText()
    try:
        if queries_path.is_file():
            text.queries = {qid: query for qid, query in load_queries(queries_path).items() if qid in qids}
        if corpus_path is not None and corpus_path.stat().st_size <= MAX_CORPUS_BYTES:
            text.titles = _titles(corpus_path, docids)
        elif corpus_path is not None:
            text.note = f"{corpus_path} is too large to look titles up in: document ids only"
    except HarnessError as error:
        text.note = f"query texts and titles unreadable ({error}): ids only"
    if corpus_path is None:
        text.note = f"{root} holds no corpus.jsonl: document ids only"
    elif not queries_path.is_file():
        text.note = f"{root} holds no queries.jsonl: query ids only"
    return text


def _titles(path: Path, docids: set[str]) -> dict[str, str]:
    """Titles of ``docids`` (documents without one are left out), streaming the corpus until all are seen."""
    titles: dict[str, str] = {}
    wanted = set(docids)
    for document in iter_corpus(path):
        if document.id in wanted:
            wanted.discard(document.id)
            if document.title:
                titles[document.id] = document.title
            if not wanted:
                break
    return titles


def _query_cell(qid: str, text: DatasetText) -> str:
    query = text.queries.get(qid)
    said = f'<div class="query-text">{escape(query)}</div>' if query else ""
    return f"<th>{escape(qid)}{said}</th>"


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


def _title(docid: str, text: DatasetText) -> str:
    title = text.titles.get(docid)
    return f' <span class="doc-title">{escape(title)}</span>' if title else ""


def _docs_html(docs: list[RankedDoc], text: DatasetText) -> str:
    items = "".join(
        f'<li><code>{escape(doc.docid)}</code>{_title(doc.docid, text)} <span class="grade">'
        f"{'not judged' if doc.grade is None else f'grade {doc.grade}'}</span></li>"
        for doc in docs
    )
    return f"<ol>{items}</ol>" if items else "<p>(no documents)</p>"


def _moved_html(diff: PerQueryDiff, baseline: str, system: str, text: DatasetText) -> str:
    if not diff.moved:
        return "<p>No query moved.</p>"
    source = (
        f"judgments from <code>{escape(diff.judgments)}</code>" if diff.judgments else "judgments unavailable"
    )
    rows = []
    for move in diff.moved:
        judged = "".join(
            f"<li><code>{escape(docid)}</code>{_title(docid, text)} ({grade})</li>"
            for docid, grade in sorted(move.judged.items())
        )
        rows.append(
            f'<tr>{_query_cell(move.qid, text)}<td class="num">{move.a:.4f}</td><td class="num">{move.b:.4f}</td>'
            f'<td class="num">{move.delta:+.4f}</td><td>{f"<ul>{judged}</ul>" if judged else "–"}</td>'
            f"<td>{_docs_html(move.a_top, text)}</td><td>{_docs_html(move.b_top, text)}</td></tr>"
        )
    head = (
        f"<tr><th>query</th><th>{escape(baseline)}</th><th>{escape(system)}</th><th>change</th>"
        f"<th>judged documents (grade)</th><th>{escape(baseline)} retrieved</th><th>{escape(system)} retrieved</th></tr>"
    )
    return (
        f'<p class="legend">Queries that moved most ({source}):</p>'
        f'<table class="queries moved sortable"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _values_table(diff: PerQueryDiff, baseline: str, system: str, text: DatasetText) -> str:
    rows = "".join(
        f'<tr><th>{escape(qid)}</th><td class="num" data-sort="{a!r}">{a:.4f}</td>'
        f'<td class="num" data-sort="{b!r}">{b:.4f}</td><td class="num" data-sort="{b - a!r}">{b - a:+.4f}</td>'
        f"<td>{_outcome(a, b)}</td><td>{escape(text.queries.get(qid, ''))}</td></tr>"
        for qid, a, b in zip(diff.qids, diff.a, diff.b, strict=True)
    )
    head = (
        f"<tr><th>query</th><th>{escape(baseline)}</th><th>{escape(system)}</th><th>change</th><th>outcome</th>"
        "<th>text</th></tr>"
    )
    return (
        f'<details class="per-query-values"><summary>All {len(diff.qids)} paired queries (click a header to sort)'
        f'</summary><div class="scroll"><table class="queries per-query sortable"><thead>{head}</thead>'
        f"<tbody>{rows}</tbody></table></div></details>"
    )


def _pair_html(
    table: MetricTable, row_key: str, slug: str, diff: PerQueryDiff | HarnessError, text: DatasetText
) -> str:
    baseline, system = table.labels[table.baseline], table.labels[slug]
    if isinstance(diff, HarnessError):
        return f"<p>{escape(system)} vs {escape(baseline)} on {escape(row_key)}: {escape(str(diff))}</p>"
    return (
        f'<section class="pair" data-dataset="{escape(row_key)}" data-system="{escape(system)}">'
        f"<h3>{escape(row_key)}: {escape(system)} vs {escape(baseline)}</h3>"
        f'<p class="wtl">{escape(system)} wins <strong class="wins">{diff.wins}</strong>, ties '
        f'<strong class="ties">{diff.ties}</strong>, loses <strong class="losses">{diff.losses}</strong> '
        f"of {len(diff.qids)} paired queries on {escape(pretty_metric(table.metric))} "
        f"(a query one side lacks scores as an empty ranking).</p>"
        f"{scatter_svg(diff, baseline, system)}{_moved_html(diff, baseline, system, text)}"
        f"{_values_table(diff, baseline, system, text)}</section>"
    )


def _diff(tableset: TableSet, table: MetricTable, row_key: str, slug: str) -> PerQueryDiff | HarnessError:
    try:
        return per_query_diff(
            tableset.sources[(row_key, table.baseline)], tableset.sources[(row_key, slug)], table.metric
        )
    except HarnessError as error:
        return error


def _shown_ids(diffs: Iterable[PerQueryDiff | HarnessError]) -> tuple[set[str], set[str]]:
    """The query ids and document ids the section prints."""
    qids: set[str] = set()
    docids: set[str] = set()
    for diff in diffs:
        if isinstance(diff, HarnessError):
            continue
        qids.update(diff.qids)
        for move in diff.moved:
            docids.update(move.judged)
            docids.update(doc.docid for doc in [*move.a_top, *move.b_top])
    return qids, docids


def per_query_section(tableset: TableSet) -> str:
    """The section for the first table's metric, or "" without a baseline."""
    table = tableset.tables[0] if tableset.tables else None
    if table is None or table.baseline is None:
        return ""
    pairs = [
        (row.key, slug)
        for row in table.rows
        if (row.key, table.baseline) in tableset.sources
        for slug in table.columns
        if slug != table.baseline and (row.key, slug) in tableset.sources
    ]
    if not pairs:
        return ""
    diffs = {pair: _diff(tableset, table, *pair) for pair in pairs}
    texts = {}
    for row_key in dict.fromkeys(key for key, _ in pairs):  # one read of each dataset's files
        row_diffs = [diff for (key, _), diff in diffs.items() if key == row_key]
        results = [result for (key, _), result in tableset.sources.items() if key == row_key]
        texts[row_key] = dataset_text(results, *_shown_ids(row_diffs))
    notes = [f"{key}: {text.note}" for key, text in texts.items() if text.note]
    metric = escape(pretty_metric(table.metric))
    return (
        f'<h2 id="per-query">Per query against {escape(table.labels[table.baseline])} ({metric})</h2>'
        '<p class="legend">Each point is a query: above the dashed diagonal the system beat the baseline '
        f"(green), below it lost (red), on it tied (grey, |change| ≤ {TIE_TOLERANCE:g}).</p>"
        + "".join(f'<p class="legend text-note">Note: {escape(note)}.</p>' for note in notes)
        + "".join(_pair_html(table, key, slug, diffs[(key, slug)], texts[key]) for key, slug in pairs)
    )
