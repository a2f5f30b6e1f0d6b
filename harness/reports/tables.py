"""From collected results to the tables a paper prints: datasets down, models across, one table per metric.

:mod:`harness.results.collect` decides which results may be used. With a baseline, every other cell
carries a mark when its per-query difference from the baseline is significant under
:mod:`harness.evaluation.comparison` (its one pairing rule and test), with the multiple comparison
correction applied across all the comparisons of the table. With intervals (``--ci``), every cell
carries the one bootstrap interval of its mean over queries, and each row marks the systems
statistically tied with its best: each tested against the best through the same engine, with the
correction over that row's comparisons. :mod:`harness.reports.formats` renders the result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from harness.core.errors import HarnessError
from harness.datasets.mteb_tasks import load_mteb_tasks
from harness.evaluation.comparison import Comparison, SignificanceSettings, apply_correction, compare_values
from harness.evaluation.judged import FAR_BELOW, far_below, judged_name
from harness.evaluation.metrics import canonical_metric_name, empty_ranking_value, split_metric_names
from harness.evaluation.significance import bootstrap_interval
from harness.reproduction.references import model_aliases
from harness.results.collect import Collection, display_labels, select_models
from harness.results.result_store import StoredResult

BETTER, WORSE = "↑", "↓"
# What a cell can show besides its value with a baseline (``--show delta,p``): the difference from the
# baseline and the corrected p of that difference.
SHOWABLE = ("delta", "p")
TIED = "≈"  # statistically tied with the best of its row
MISSING = "–"


# ------------------------------------------------------------------------------------------ tables


@dataclass
class Cell:
    value: float | None
    n_queries: int | None = None
    mark: str = ""  # BETTER / WORSE when significantly different from the baseline
    comparison: Comparison | None = None  # the test against the baseline, when this cell had one
    best: bool = False
    interval: tuple[float, float] | None = None  # bootstrap interval of the mean over queries (--ci)
    vs_best: Comparison | None = None  # the test against the row's best (--ci)
    tied_with_best: bool = False  # the best itself, or not significantly different from it (--ci)
    judged: float | None = None  # mean judged@k beside nDCG@k, when the result recorded it


@dataclass
class Row:
    key: str  # "dataset" or "dataset/split" when a dataset appears with several splits
    dataset: str
    split: str
    cells: dict[str, Cell]


@dataclass
class MetricTable:
    metric: str
    columns: list[str]  # model slugs, in display order
    labels: dict[str, str]  # slug -> display name
    rows: list[Row]
    average: dict[str, Cell]
    average_over: list[str]  # row keys every model has
    baseline: str | None = None
    n_comparisons: int = 0
    notes: list[str] = field(default_factory=list)
    judged_k: int | None = None  # k of the judged@k shown beside the cells (nDCG@k tables)
    judged_ceilings: dict[str, float] = field(default_factory=dict)  # row key -> highest judged@k reachable
    # "average", or a benchmark's own average row when the rows are exactly its tasks (e.g. "BRIGHT average")
    average_label: str = "average"

    @property
    def shows_average(self) -> bool:
        """Whether the paper-style formats print an average row: only over two datasets or more (over one
        it would repeat that row)."""
        return len(self.average_over) >= 2


@dataclass
class TableSet:
    tables: list[MetricTable]
    collection: Collection
    significance: SignificanceSettings
    digits: int = 4
    ci: bool = False  # intervals on every cell and tied-with-best marks
    show: tuple[str, ...] = ()  # what cells show besides value and mark (SHOWABLE), with a baseline
    # (row key, model slug) -> the result behind that cell (charts need its per-query values)
    sources: dict[tuple[str, str], StoredResult] = field(default_factory=dict)


def _benchmark_averages(table: MetricTable, complete_rows: list[Row]) -> None:
    """A benchmark's own average row (MTEB(eng, v2), BRIGHT, FollowIR: the plain mean of its main metric
    over all its tasks): the table's average row is named after it when the complete rows are exactly its
    tasks; when they hold its tasks among others, a note gives each model's benchmark average."""
    tasks = load_mteb_tasks()
    datasets = {row.dataset: row for row in complete_rows}
    for name, benchmark in tasks.benchmarks.items():
        if benchmark.main_metric != table.metric or not set(benchmark.members) <= set(datasets):
            continue
        if set(datasets) == set(benchmark.members):
            table.average_label = f"{benchmark.title} average"
            table.notes.append(
                f"{benchmark.title} average: the mean of {benchmark.main_metric} over its "
                f"{len(benchmark.members)} tasks, as the benchmark computes it ({benchmark.source})."
            )
            continue
        averages = {
            table.labels[slug]: tasks.benchmark_average(
                name, {member: datasets[member].cells[slug].value for member in benchmark.members}
            )
            for slug in table.columns
        }
        shown = ", ".join(f"{label} {value:.4f}" for label, value in averages.items())
        table.notes.append(f"{benchmark.title} average over its {len(benchmark.members)} tasks: {shown}.")


def _row_keys(results: list[StoredResult]) -> dict[tuple[str, str], str]:
    splits: dict[str, set[str]] = {}
    for result in results:
        splits.setdefault(result.dataset, set()).add(result.split)
    return {
        (r.dataset, r.split): (r.dataset if len(splits[r.dataset]) == 1 else f"{r.dataset}/{r.split}")
        for r in results
    }


def _mark_best(cells: Iterable[Cell], digits: int) -> None:
    cells = [cell for cell in cells if cell.value is not None]
    if not cells:
        return
    # Compare what the reader sees: values equal at the printed precision are both best.
    top = max(round(cell.value, digits) for cell in cells)
    for cell in cells:
        cell.best = round(cell.value, digits) == top


def _significance(
    table: MetricTable, by_key: dict[tuple[str, str], StoredResult], settings: SignificanceSettings
) -> None:
    """Test every cell against the baseline of its row; one correction over the whole table."""
    assert table.baseline is not None
    pending: list[Cell] = []
    untestable: list[str] = []
    for row in table.rows:
        base = by_key.get((row.key, table.baseline))
        if base is None:
            continue
        row_results = [by_key[(row.key, slug)] for slug in table.columns if (row.key, slug) in by_key]
        # The pairing rule: the judged queries any result of the row answered; a missing one scores 0.
        answered = {qid for result in row_results for qid in result.per_query_values(table.metric)}
        for slug in table.columns:
            cell = row.cells[slug]
            if slug == table.baseline or cell.value is None:
                continue
            base_values = base.per_query_values(table.metric)
            system_values = by_key[(row.key, slug)].per_query_values(table.metric)
            if not base_values or not system_values:
                untestable.append(f"{table.labels[slug]} on {row.key}")
                continue
            cell.comparison = compare_values(
                table.metric,
                (table.labels[table.baseline], table.labels[slug]),
                base_values,
                system_values,
                settings,
                over=answered,
                missing_value=empty_ranking_value(table.metric),
            )
            pending.append(cell)
    table.n_comparisons = len(pending)
    apply_correction([cell.comparison for cell in pending], settings)
    for cell in pending:
        if cell.comparison.significant and cell.comparison.difference:
            cell.mark = BETTER if cell.comparison.difference > 0 else WORSE
    if untestable:
        table.notes.append("No per-query values to test: " + ", ".join(untestable) + ".")


def _interval(metric: str, values: list[float], settings: SignificanceSettings) -> tuple[float, float]:
    """The one bootstrap's interval of the mean; gmap's per-query values are logs, so its ends are exp'd."""
    low, high = bootstrap_interval(
        values, confidence=settings.confidence, n_resamples=settings.n_resamples, seed=settings.seed
    )
    return (math.exp(low), math.exp(high)) if metric == "gmap" else (low, high)


def _intervals(
    table: MetricTable, by_key: dict[tuple[str, str], StoredResult], settings: SignificanceSettings
) -> None:
    """An interval on every cell with per-query values, and on each average over the complete rows.

    The average of per-dataset means is the mean of every query's value weighted by
    1 / (datasets x that dataset's queries), so its interval resamples those weighted values pooled.
    """
    for row in table.rows:
        for slug, cell in row.cells.items():
            values = (
                list(by_key[(row.key, slug)].per_query_values(table.metric).values())
                if cell.value is not None
                else []
            )
            if values:
                cell.interval = _interval(table.metric, values, settings)
    if table.metric == "gmap":
        return  # a mean of geometric means is not a mean of per-query values
    for slug, cell in table.average.items():
        per_row = [
            list(by_key[(key, slug)].per_query_values(table.metric).values()) for key in table.average_over
        ]
        if cell.value is None or not per_row or not all(per_row):
            continue
        total = sum(len(values) for values in per_row)
        pooled = [value * total / (len(per_row) * len(values)) for values in per_row for value in values]
        cell.interval = _interval(table.metric, pooled, settings)


def _tied_with_best(
    table: MetricTable, by_key: dict[tuple[str, str], StoredResult], settings: SignificanceSettings
) -> None:
    """Per row: test every system against the row's best (one correction per row); mark those not separable."""
    untestable: list[str] = []
    for row in table.rows:
        present = [
            slug
            for slug in table.columns
            if row.cells[slug].value is not None and by_key[(row.key, slug)].per_query_values(table.metric)
        ]
        untestable += [
            f"{table.labels[slug]} on {row.key}"
            for slug in table.columns
            if row.cells[slug].value is not None and slug not in present
        ]
        if not present:
            continue
        best = max(present, key=lambda slug: row.cells[slug].value)
        row.cells[best].tied_with_best = True
        values = {slug: by_key[(row.key, slug)].per_query_values(table.metric) for slug in present}
        answered = {qid for per_query in values.values() for qid in per_query}
        tested = [slug for slug in present if slug != best]
        for slug in tested:
            row.cells[slug].vs_best = compare_values(
                table.metric,
                (table.labels[best], table.labels[slug]),
                values[best],
                values[slug],
                settings,
                over=answered,
                missing_value=empty_ranking_value(table.metric),
            )
        apply_correction([row.cells[slug].vs_best for slug in tested], settings)
        for slug in tested:
            row.cells[slug].tied_with_best = not row.cells[slug].vs_best.significant
    if untestable:
        table.notes.append(
            "No per-query values for an interval or a test against the best: " + ", ".join(untestable) + "."
        )


def _judged_ceiling(result: StoredResult, k: int) -> float | None:
    """The reachable mean Judged@k a result recorded (None in results from before it was recorded)."""
    block = result.judged.get("ceiling")
    value = block.get(judged_name(k)) if isinstance(block, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def _judged_beside(table: MetricTable, by_key: dict[tuple[str, str], StoredResult]) -> None:
    """Judged@k beside nDCG@k cells; a note names the cells far below what their qrels allow or far
    below the best Judged@k of their row (:mod:`harness.evaluation.judged`)."""
    family, _, cutoff = table.metric.partition("@")
    if family != "ndcg" or not cutoff.isdigit():
        return
    k = int(cutoff)
    low: list[str] = []
    for row in table.rows:
        shares = {}
        for slug, cell in row.cells.items():
            result = by_key.get((row.key, slug))
            cell.judged = result.judged_share(k) if result is not None else None
            if cell.judged is not None:
                shares[slug] = cell.judged
        best = max(shares.values(), default=0.0)
        for slug, share in shares.items():
            ceiling = _judged_ceiling(by_key[(row.key, slug)], k)
            if ceiling is not None:
                table.judged_ceilings[row.key] = max(ceiling, table.judged_ceilings.get(row.key, 0.0))
            if far_below(share, best) or (ceiling is not None and far_below(share, ceiling)):
                reachable = "" if ceiling is None else f" of a reachable {ceiling:.2f}"
                low.append(f"{table.labels[slug]} on {row.key} {share:.2f}{reachable}")
    if any(cell.judged is not None for row in table.rows for cell in row.cells.values()):
        table.judged_k = k
    if low:
        table.notes.append(
            f"Warning: {judged_name(k)} more than {FAR_BELOW:g} below what the qrels allow or below its row's "
            f"best ({', '.join(low)}): unjudged documents count as non-relevant, so these values may "
            "understate the systems."
        )


def shown_extras(show: Iterable[str], baseline: str | None) -> tuple[str, ...]:
    """``--show`` values (commas or spaces) checked: each one of :data:`SHOWABLE`, and a baseline given."""
    pieces = [piece for value in ([show] if isinstance(show, str) else show) for piece in value.split(",")]
    chosen = tuple(dict.fromkeys(piece.strip().lower() for piece in pieces if piece.strip()))
    unknown = [piece for piece in chosen if piece not in SHOWABLE]
    if unknown:
        raise HarnessError(
            f"--show {','.join(unknown)}: choose from {', '.join(SHOWABLE)} (e.g. --show delta,p)"
        )
    if chosen and baseline is None:
        raise HarnessError(
            f"--show {','.join(chosen)} needs --baseline: the differences are from the baseline"
        )
    return chosen


def _canonical_or_as_given(name: str) -> str:
    """The harness's name of a metric in any tool's spelling; a name the parser does not know is looked up
    as written (lower-cased), so a stored result's own metric names always work."""
    try:
        return canonical_metric_name(name)
    except HarnessError:
        return name.strip().lower()


def build_tables(
    collection: Collection,
    metrics: list[str],
    *,
    datasets: list[str] | None = None,
    models: list[str] | None = None,
    baseline: str | None = None,
    significance: SignificanceSettings | None = None,
    digits: int = TableSet.digits,
    ci: bool = False,
    show: Iterable[str] = (),
) -> TableSet:
    """One :class:`MetricTable` per metric over the collected results (filtered by dataset and model).

    ``ci``: a bootstrap interval on every cell and, per row, the systems statistically tied with the best.
    ``show``: with a ``baseline``, what each cell shows beside its value (:data:`SHOWABLE`).
    """
    significance = (significance or SignificanceSettings()).validate()
    show = shown_extras(show, baseline)
    results = collection.results
    if datasets:
        unknown = [name for name in datasets if not any(r.dataset == name for r in results)]
        if unknown:
            known = sorted({r.dataset for r in results})
            raise HarnessError(
                f"no results for dataset(s) {', '.join(unknown)}; the results folder has: {', '.join(known) or 'none'}"
            )
        results = [r for r in results if r.dataset in datasets]
    if not results:
        raise HarnessError(
            "no usable results to tabulate" + (" (all were skipped, see above)" if collection.skipped else "")
        )

    columns = (
        select_models(results, models, model_aliases) if models else sorted({r.model_slug for r in results})
    )
    baseline_slug = None
    if baseline:
        matched = select_models(results, [baseline], model_aliases)
        if len(matched) != 1:
            raise HarnessError(f"baseline {baseline!r} matches several models: {', '.join(matched)}")
        baseline_slug = matched[0]
        columns = [baseline_slug] + [slug for slug in columns if slug != baseline_slug]
    results = [r for r in results if r.model_slug in columns]
    labels = display_labels(results, columns)
    row_key_of = _row_keys(results)
    by_key = {(row_key_of[(r.dataset, r.split)], r.model_slug): r for r in results}
    order = datasets or sorted({r.dataset for r in results})
    row_keys: list[tuple[str, str, str]] = []
    for name in order:
        for (dataset, split), key in sorted(row_key_of.items()):
            if dataset == name and (key, dataset, split) not in row_keys:
                row_keys.append((key, dataset, split))

    metric_names = list(dict.fromkeys(_canonical_or_as_given(name) for name in split_metric_names(metrics)))
    available = {name for r in results for name in r.metrics}
    missing = [metric for metric in metric_names if metric not in available]
    if missing:
        raise HarnessError(
            f"metric(s) {', '.join(missing)} not in any result; available: {', '.join(sorted(available))}"
        )

    tables = []
    for metric in metric_names:
        rows = []
        for key, dataset, split in row_keys:
            cells = {}
            for slug in columns:
                result = by_key.get((key, slug))
                value = result.metrics.get(metric) if result else None
                cells[slug] = Cell(value=value, n_queries=result.n_queries if result else None)
            _mark_best(cells.values(), digits)
            rows.append(Row(key=key, dataset=dataset, split=split, cells=cells))
        complete_rows = [row for row in rows if all(cell.value is not None for cell in row.cells.values())]
        average = {
            slug: Cell(
                value=(sum(row.cells[slug].value for row in complete_rows) / len(complete_rows))
                if complete_rows
                else None
            )
            for slug in columns
        }
        _mark_best(average.values(), digits)
        table = MetricTable(
            metric=metric,
            columns=columns,
            labels=labels,
            rows=rows,
            average=average,
            average_over=[row.key for row in complete_rows],
            baseline=baseline_slug,
        )
        left_out = [row.key for row in rows if row not in complete_rows]
        if left_out and table.shows_average:
            table.notes.append(
                f"Average leaves out {', '.join(left_out)} (not every model has a result there)."
            )
        elif left_out:
            table.notes.append(
                f"No average row: {', '.join(left_out)} lack(s) a result of some model"
                + (f", so only {complete_rows[0].key} has them all." if complete_rows else ".")
            )
        _benchmark_averages(table, complete_rows)
        if baseline_slug is not None and len(columns) > 1:
            _significance(table, by_key, significance)
        if ci:
            _intervals(table, by_key, significance)
            _tied_with_best(table, by_key, significance)
        _judged_beside(table, by_key)
        tables.append(table)
    return TableSet(
        tables=tables,
        collection=collection,
        significance=significance,
        digits=digits,
        ci=ci,
        show=show,
        sources=by_key,
    )
