"""From a results folder to the tables a paper prints: datasets down, models across, one table per metric.

Collection is strict about what it averages: a result folder that cannot be read, whose per-query
values are malformed, or that was computed on a different version of the data (its provenance
fingerprint disagrees with the registry pin or with the other results for that dataset) is reported by
path and left out. With a baseline, every other cell carries a mark when its per-query difference from
the baseline is significant under the paired test of :mod:`harness.evaluation.significance`, with the multiple
comparison correction applied across all the comparisons of the table. :mod:`harness.report.formats`
renders the result.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import HarnessError
from harness.reproduce.references import model_aliases
from harness.results.store import StoredResult, scan_results

log = logging.getLogger(__name__)

BETTER, WORSE = "↑", "↓"
MISSING = "–"
_PRETTY = {"ndcg": "nDCG", "recall": "Recall", "map": "MAP", "mrr": "MRR", "p": "P", "precision": "P"}


def pretty_metric(name: str) -> str:
    """``ndcg@10`` -> ``nDCG@10`` (the spelling papers use)."""
    family, _, cutoff = name.partition("@")
    label = _PRETTY.get(family.lower(), family)
    return f"{label}@{cutoff}" if cutoff else label


# ------------------------------------------------------------------------------------------ collection


@dataclass
class Collection:
    """The results a table may use, and the folders left out with the reason."""

    results: list[StoredResult]
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def _per_query_problem(result: StoredResult) -> str | None:
    per_query = result.per_query
    if not isinstance(per_query, dict):
        return "'per_query' is not a mapping of query id -> metric values"
    for qid, values in per_query.items():
        if not isinstance(values, dict) or not all(
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            for value in values.values()
        ):
            return f"'per_query' entry for query {qid!r} is not a mapping of metric names to finite numbers"
    for name, value in result.metrics.items():
        if not math.isfinite(value):
            return f"metric {name} is {value}"
    return None


def _registry_pins(dataset: str) -> dict[str, str]:
    """sha256 pins of the registry entry for ``dataset`` (empty for folders the registry does not know)."""
    try:
        from harness.datasets.registry import get_dataset_record

        return dict(get_dataset_record(dataset).files)
    except HarnessError:
        return {}


def _fingerprint_conflict(fingerprint: dict[str, str], reference: dict[str, str]) -> list[str]:
    return sorted(
        name for name in fingerprint.keys() & reference.keys() if fingerprint[name] != reference[name]
    )


def _check_data_versions(results: list[StoredResult]) -> tuple[list[StoredResult], list[tuple[Path, str]]]:
    """Keep only results computed on the pinned (or, without a pin, the agreed) version of their data."""
    kept: list[StoredResult] = []
    skipped: list[tuple[Path, str]] = []
    by_dataset: dict[tuple[str, str], list[StoredResult]] = {}
    for result in results:
        fingerprint = result.data_fingerprint
        if not isinstance(fingerprint, dict) or not fingerprint:
            skipped.append(
                (
                    result.directory,
                    "provenance.json has no dataset fingerprint, so its data version is unknown",
                )
            )
            continue
        by_dataset.setdefault((result.dataset, result.split), []).append(result)

    for (dataset, _split), group in by_dataset.items():
        pins = _registry_pins(dataset)
        pinned_ok: list[StoredResult] = []
        for result in group:
            differing = _fingerprint_conflict(result.data_fingerprint, pins)
            if differing:
                skipped.append(
                    (
                        result.directory,
                        f"computed on another version of {dataset}: {', '.join(differing)} differ from the "
                        "registry pin (re-run it on the pinned data)",
                    )
                )
            else:
                pinned_ok.append(result)
        # Files without a pin (or folders outside the registry): the results must at least agree,
        # file by file; the checksum most of them share is taken as the version to keep.
        conflicts: dict[Path, list[str]] = {}
        tie_files: set[str] = set()
        for name in sorted({name for r in pinned_ok for name in r.data_fingerprint}):
            ranked = Counter(
                r.data_fingerprint[name] for r in pinned_ok if name in r.data_fingerprint
            ).most_common()
            if len(ranked) < 2:
                continue
            majority = ranked[0][0] if ranked[0][1] > ranked[1][1] else None
            tie_files |= {name} if majority is None else set()
            for result in pinned_ok:
                if name in result.data_fingerprint and result.data_fingerprint[name] != majority:
                    conflicts.setdefault(result.directory, []).append(name)
        for result in pinned_ok:
            differing = conflicts.get(result.directory)
            if not differing:
                kept.append(result)
                continue
            tied = " (no version is in the majority)" if tie_files & set(differing) else ""
            skipped.append(
                (
                    result.directory,
                    f"computed on another version of {dataset}: {', '.join(differing)} differ from the other "
                    f"results{tied}",
                )
            )
    return kept, skipped


def _drop_duplicates(results: list[StoredResult]) -> tuple[list[StoredResult], list[tuple[Path, str]]]:
    """One result per (dataset, split, model): the newest wins, copies are reported."""
    newest: dict[tuple[str, str, str], StoredResult] = {}
    skipped: list[tuple[Path, str]] = []
    for result in sorted(results, key=lambda r: str(r.provenance.get("created_at", "")), reverse=True):
        key = (result.dataset, result.split, result.model_slug)
        if key in newest:
            skipped.append((result.directory, f"older duplicate of {newest[key].directory}"))
        else:
            newest[key] = result
    return list(newest.values()), skipped


def collect_results(results_dir: str | Path) -> Collection:
    """Every usable result below ``results_dir``; unreadable or inconsistent folders go to ``skipped``."""
    root = Path(results_dir)
    if not root.is_dir():
        raise HarnessError(f"results folder {root} does not exist (run `harness eval` first)")
    good, bad = scan_results(root)
    skipped = [(Path(path), reason) for path, reason in bad]
    readable: list[StoredResult] = []
    for result in good:
        problem = _per_query_problem(result)
        if problem:
            skipped.append((result.directory, f"{result.directory / 'metrics.json'}: {problem}"))
        else:
            readable.append(result)
    consistent, version_skips = _check_data_versions(readable)
    unique, duplicate_skips = _drop_duplicates(consistent)
    skipped += version_skips + duplicate_skips
    for path, reason in skipped:
        log.debug("skipped %s: %s", path, reason)
    return Collection(results=unique, skipped=sorted(skipped, key=lambda item: str(item[0])))


# ---------------------------------------------------------------------------------------- selection


def model_labels(result: StoredResult) -> set[str]:
    """Every name a user may call this result's model by: name, slug, the spec given to eval, aliases."""
    labels = {result.model, result.model_slug}
    model_info = result.provenance.get("model", {}) if isinstance(result.provenance, dict) else {}
    for key in ("spec", "record"):
        if isinstance(model_info.get(key), str):
            labels.add(model_info[key])
    identity = model_info.get("identity") or {}
    if isinstance(identity, dict) and isinstance(identity.get("model_id"), str):
        labels.add(identity["model_id"])
    labels |= model_aliases(result.model)
    return {label for label in labels if label}


def _matches(spec: str, result: StoredResult) -> bool:
    wanted = spec.strip().lower()
    if wanted in {label.lower() for label in model_labels(result)}:
        return True
    path = Path(spec).expanduser()
    if path.exists():
        # A checkpoint folder passed by path: the slug the harness derives from it names the result.
        try:
            from harness.models.resolve import resolve_model

            return resolve_model(spec).slug == result.model_slug
        except (HarnessError, ImportError):
            return False
    return False


def select_models(results: list[StoredResult], specs: list[str]) -> list[str]:
    """Model slugs for ``specs`` in the given order; an unknown spec is an error naming the known ones."""
    slugs: list[str] = []
    for spec in specs:
        found = sorted({r.model_slug for r in results if _matches(spec, r)})
        if not found:
            known = sorted({r.model for r in results})
            raise HarnessError(
                f"no results for model {spec!r}; the results folder has: {', '.join(known) or 'none'}"
            )
        slugs.extend(slug for slug in found if slug not in slugs)
    return slugs


# ------------------------------------------------------------------------------------------ tables


@dataclass
class Cell:
    value: float | None
    n_queries: int | None = None
    mark: str = ""  # BETTER / WORSE when significantly different from the baseline
    diff: float | None = None  # mean per-query difference to the baseline
    p_value: float | None = None
    p_adjusted: float | None = None
    best: bool = False


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


@dataclass
class SignificanceSettings:
    test: str = "permutation"
    alpha: float = 0.05
    correction: str = "holm"
    n_resamples: int = 10_000
    seed: int = 42

    def describe(self) -> str:
        test = {
            "permutation": "paired permutation (randomisation) test",
            "ttest": "paired t-test",
            "wilcoxon": "Wilcoxon signed-rank test",
        }.get(self.test, f"paired {self.test} test")
        resamples = f", {self.n_resamples:,} resamples" if self.test == "permutation" else ""
        correction = "no correction" if self.correction == "none" else f"{self.correction} correction"
        return f"{test}{resamples}, two-sided, alpha = {self.alpha:g}, {correction}"


@dataclass
class TableSet:
    tables: list[MetricTable]
    collection: Collection
    significance: SignificanceSettings
    digits: int = 4
    # (row key, model slug) -> the result behind that cell (charts need its per-query values)
    sources: dict[tuple[str, str], StoredResult] = field(default_factory=dict)


def _display_labels(results: list[StoredResult], slugs: list[str]) -> dict[str, str]:
    names = {slug: next(r.model for r in results if r.model_slug == slug) for slug in slugs}
    repeated = {name for name, count in Counter(names.values()).items() if count > 1}
    return {slug: (slug if names[slug] in repeated else names[slug]) for slug in slugs}


def _row_keys(results: list[StoredResult]) -> dict[tuple[str, str], str]:
    splits: dict[str, set[str]] = {}
    for result in results:
        splits.setdefault(result.dataset, set()).add(result.split)
    return {
        (r.dataset, r.split): (r.dataset if len(splits[r.dataset]) == 1 else f"{r.dataset}/{r.split}")
        for r in results
    }


def _paired(
    baseline: StoredResult, other: StoredResult, metric: str
) -> tuple[list[float], list[float]] | None:
    base = baseline.per_query_values(metric)
    mine = other.per_query_values(metric)
    common = sorted(base.keys() & mine.keys())
    if not common:
        return None
    if len(common) != len(base) or len(common) != len(mine):
        log.warning(
            "%s vs %s on %s: %d queries in common (%d / %d); testing those",
            other.model,
            baseline.model,
            baseline.dataset,
            len(common),
            len(mine),
            len(base),
        )
    return [base[q] for q in common], [mine[q] for q in common]


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
    from harness.evaluation.significance import TESTS, adjust_pvalues, paired_test

    if settings.test not in TESTS:
        raise HarnessError(f"unknown test {settings.test!r}; choose one of {', '.join(TESTS)}")
    adjust_pvalues([], method=settings.correction)  # an unknown correction fails before any test runs
    assert table.baseline is not None
    pending: list[tuple[Cell, float]] = []
    untestable: list[str] = []
    for row in table.rows:
        base = by_key.get((row.key, table.baseline))
        if base is None:
            continue
        for slug in table.columns:
            cell = row.cells[slug]
            if slug == table.baseline or cell.value is None:
                continue
            pair = _paired(base, by_key[(row.key, slug)], table.metric)
            if pair is None:
                untestable.append(f"{table.labels[slug]} on {row.key}")
                continue
            test = paired_test(
                pair[1], pair[0], test=settings.test, n_resamples=settings.n_resamples, seed=settings.seed
            )
            cell.diff = float(test.diff) if test.diff is not None else None
            cell.p_value = float(test.p_value)
            pending.append((cell, cell.p_value))
    table.n_comparisons = len(pending)
    if pending:
        raw = [p for _, p in pending]
        adjusted = (
            raw if settings.correction == "none" else list(adjust_pvalues(raw, method=settings.correction))
        )
        for (cell, _), p_adj in zip(pending, adjusted, strict=True):
            cell.p_adjusted = float(p_adj)
            if cell.p_adjusted < settings.alpha and cell.diff:
                cell.mark = BETTER if cell.diff > 0 else WORSE
    if untestable:
        table.notes.append("No per-query values to test: " + ", ".join(untestable) + ".")


def build_tables(
    collection: Collection,
    metrics: list[str],
    *,
    datasets: list[str] | None = None,
    models: list[str] | None = None,
    baseline: str | None = None,
    significance: SignificanceSettings | None = None,
    digits: int = 4,
) -> TableSet:
    """One :class:`MetricTable` per metric over the collected results (filtered by dataset and model)."""
    significance = significance or SignificanceSettings()
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

    columns = select_models(results, models) if models else sorted({r.model_slug for r in results})
    baseline_slug = None
    if baseline:
        matched = select_models(results, [baseline])
        if len(matched) != 1:
            raise HarnessError(f"baseline {baseline!r} matches several models: {', '.join(matched)}")
        baseline_slug = matched[0]
        columns = [baseline_slug] + [slug for slug in columns if slug != baseline_slug]
    results = [r for r in results if r.model_slug in columns]
    labels = _display_labels(results, columns)
    row_key_of = _row_keys(results)
    by_key = {(row_key_of[(r.dataset, r.split)], r.model_slug): r for r in results}
    order = datasets or sorted({r.dataset for r in results})
    row_keys: list[tuple[str, str, str]] = []
    for name in order:
        for (dataset, split), key in sorted(row_key_of.items()):
            if dataset == name and (key, dataset, split) not in row_keys:
                row_keys.append((key, dataset, split))

    metric_names = [metric.strip().lower() for metric in metrics]
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
        if left_out:
            table.notes.append(
                f"Average leaves out {', '.join(left_out)} (not every model has a result there)."
            )
        if baseline_slug is not None and len(columns) > 1:
            _significance(table, by_key, significance)
        tables.append(table)
    return TableSet(
        tables=tables, collection=collection, significance=significance, digits=digits, sources=by_key
    )
