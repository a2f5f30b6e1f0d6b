"""Commands that show a results folder: ``table`` (one table per metric, or bar charts) and ``report`` (one
self-contained HTML page). Both read every ``<dataset>/<model>/`` result below RESULTS_DIR and pick cells
the same way (:class:`ResultsViewOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.api.command_result import Command, CommandResult, StepOutcome
from harness.api.shared_options import (
    alpha_option,
    correction_option,
    n_resamples_option,
    paired_test_option,
    seed_option,
    significance_of,
)
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write, check_output_file, check_output_folder
from harness.core.options import MAX_DIGITS, OptionsRecord, option, output_file
from harness.core.output_guard import check_output
from harness.core.paths import default_results_dir
from harness.evaluation.metrics import HEADLINE_METRICS
from harness.evaluation.scoring_options import metrics_option
from harness.reports.charts import write_charts
from harness.reports.formats import FORMATS, render, tables_to_json
from harness.reports.html import DEFAULT_TITLE, write_report
from harness.reports.tables import SHOWABLE, TableSet, build_tables
from harness.reproduction.references import (
    model_aliases,
    published_results,
    read_references,
    references_option,
)
from harness.results.collect import Collection, collect_results, select_models
from harness.results.result_store import iter_result_dirs


class ResultsViewOptions(OptionsRecord):
    """What ``table`` and ``report`` show of a results folder: which cells, against which baseline.

    ``results_dir`` (default: env HARNESS_RESULTS_DIR or results/), ``metrics`` (one table each),
    ``datasets`` (rows) and ``models`` (columns) in the order given, ``baseline`` (the model every other is
    tested against: ``test``, ``n_resamples``, ``seed``, ``alpha``, ``correction``), ``digits`` printed,
    ``references`` (published cells shown as columns beside the models': a references YAML or an MTEB
    results folder), ``show`` (with a baseline, what cells show besides the value: ``delta``, ``p``).
    """

    results_dir: Path | None = option(
        None,
        positional=True,
        nargs="?",
        parse=Path,
        role="input",
        help="folder holding <dataset>/<model>/metrics.json (default: env HARNESS_RESULTS_DIR or results/)",
    )
    metrics: list[str] = metrics_option(list(HEADLINE_METRICS), "one table per metric (default: %(default)s)")
    datasets: list[str] | None = option(
        None, nargs="+", help="rows to show, in this order (default: all, sorted)"
    )
    models: list[str] | None = option(
        None,
        nargs="+",
        help="columns to show, in this order: names, aliases, slugs or checkpoint folders (default: all)",
    )
    baseline: str | None = option(
        None, help="model every other column is tested against; marks significant differences"
    )
    show: list[str] | None = option(
        None,
        nargs="+",
        metavar="WHAT",
        help=f"with --baseline, also show in each cell: {', '.join(SHOWABLE)} (the difference from the "
        "baseline, the corrected p of that difference), commas or spaces between them, e.g. --show delta,p "
        "(default: the value and its significance mark only)",
    )
    test: str = paired_test_option()
    n_resamples: int = n_resamples_option()
    seed: int = seed_option()
    alpha: float = alpha_option()
    correction: str = correction_option("each table's comparisons")
    digits: int = option(
        TableSet.digits, low=1, high=MAX_DIGITS, help="decimals printed (default: %(default)s)"
    )
    references: Path | None = references_option(
        "published numbers shown beside the results, each model's cell on each dataset as a column "
        "'MODEL (SOURCE)'"
    )

    def results_folder(self) -> Path:
        """``results_dir``, or the environment's results folder."""
        return self.results_dir or default_results_dir()


def _tableset(
    options: ResultsViewOptions, *, ci: bool
) -> tuple[TableSet | None, list[str], HarnessError | None]:
    """The tables the options pick and one warning per result folder left out (corrupt, other data).

    When the tables cannot be built after folders were left out, the warnings explain the error ("all were
    skipped, see above"): it comes back as the last message, after them, instead of being raised.
    """
    collection = collect_results(options.results_folder())
    warnings = [f"warning: skipped {path}: {reason}" for path, reason in collection.skipped]
    try:
        collection, models, notes = _with_published(options, collection)
        warnings += notes
        tableset = build_tables(
            collection,
            options.metrics,
            datasets=options.datasets,
            models=models,
            baseline=options.baseline,
            significance=significance_of(options),
            digits=options.digits,
            ci=ci,
            show=options.show or (),
        )
    except HarnessError as error:
        if not warnings:
            raise
        return None, [*warnings, f"error: {error}"], error
    return tableset, warnings, None


def _with_published(
    options: ResultsViewOptions, collection: Collection
) -> tuple[Collection, list[str] | None, list[str]]:
    """With ``references``: the collection plus a published column per shown model, the columns to show
    (the chosen models' published ones after them), and the notes of reading the references."""
    if options.references is None:
        return collection, options.models, []
    references = read_references(options.references)
    shown = collection.results
    if options.models:
        chosen = set(select_models(shown, options.models, model_aliases))
        shown = [result for result in shown if result.model_slug in chosen]
    published = published_results(shown, references.references)
    models = [*options.models, *(cell.model_slug for cell in published)] if options.models else None
    notes = [f"note: {note}" for note in references.notes]
    if not published:
        notes.append(f"note: {options.references} has no published cell for the models and datasets shown")
    return Collection([*collection.results, *published], collection.skipped), models, notes


def results_files(options: ResultsViewOptions) -> dict[str, Path]:
    """Every result's metrics and provenance below the results folder: a table's whole input."""
    root = options.results_folder()
    files: dict[str, Path] = {}
    for folder in iter_result_dirs(root) if root.is_dir() else []:
        for name in ("metrics.json", "provenance.json"):
            if (folder / name).is_file():
                files[str(folder / name)] = folder / name
    return files


# ----------------------------------------------------------------------------------------- table


class TableOptions(ResultsViewOptions):
    """``harness table [RESULTS_DIR]``: ``format`` md, csv, latex, json or png (bar charts); ``ci`` adds a
    bootstrap interval to every cell and marks the systems tied with each row's best; ``output`` is the file
    (for png: the folder) to write instead of standard output."""

    ci: bool = option(
        False,
        action="store_true",
        help="a bootstrap interval over queries on every cell (--n-resamples, --seed, 1 - --alpha) and, per "
        "row, a mark on the systems statistically tied with the best (--test against the best, --correction "
        "over the row)",
    )
    format: str = option(
        "md",
        choices=(*FORMATS, "png"),
        help="md (default), csv (one tidy line per cell), latex (booktabs), json, or png (bar charts)",
    )
    output: Path | None = option(
        None,
        parse=Path,
        role="output",
        help="write here instead of stdout (for png: the folder for the charts, default RESULTS_DIR/charts)",
    )


@dataclass
class TableResult(CommandResult):
    """The tables (``tableset``), rendered in ``format`` (``text``; None for png charts, listed in ``paths``)."""

    tableset: TableSet | None  # None: no table could be built (``failure`` says why)
    format: str
    text: str | None = None
    output: Path | None = None
    failure: HarnessError | None = None

    def payload(self) -> dict[str, Any]:
        return tables_to_json(self.tableset) if self.tableset is not None else {}

    def render(self) -> str:
        if self.text is None:
            return "\n".join(str(path) for path in self.paths)
        if self.output is not None:
            return str(self.output)
        return self.text.removesuffix("\n")  # the CLI's print ends the text's last line

    def summary(self) -> list[str]:
        """What an experiment step shows: the skipped results, then the tables' own lines."""
        return [*self.messages, *(self.text or "").rstrip("\n").splitlines()]


def table(options: TableOptions | None = None, /, **values: Any) -> TableResult:
    """Tables of results, datasets x models, one per metric, as ``harness table``.

    Each row's best is marked; with ``baseline``, significant differences from it carry an arrow; with
    ``ci``, every cell an interval. Skipped result folders are ``warning:`` messages. Example:
    ``print(table(results_dir="results", metrics=["ndcg@10"], baseline="bm25").render())``.
    """
    options = TableOptions.coerce(options, values)
    charts_folder = options.output or options.results_folder() / "charts"
    if options.output is not None:  # refused before the tables are computed
        (check_output_folder if options.format == "png" else check_output_file)(options.output)
    if options.format == "png":  # the record's guard checked a given --output; this, the default folder too
        check_output(charts_folder, "--output" if options.output else "the default --output")
    tableset, warnings, failure = _tableset(options, ci=options.ci)
    if tableset is None:
        return TableResult(None, options.format, messages=warnings, exit_code=2, failure=failure)
    if options.format == "png":
        charts = write_charts(tableset, charts_folder)
        return TableResult(tableset=tableset, format=options.format, paths=charts, messages=warnings)
    text = render(tableset, options.format)
    result = TableResult(tableset=tableset, format=options.format, text=text, messages=warnings)
    if options.output:
        with atomic_write(options.output, parents=False) as handle:
            handle.write(text)
        result.output = options.output
        result.paths.append(options.output)
    return result


def table_step(options: TableOptions, directory: Path) -> StepOutcome:
    """``table`` as an experiment step: ``table.<format>`` (or ``charts/``) in the step's folder."""
    name = "charts" if options.format == "png" else f"table.{options.format}"
    result = table(options.replace(output=directory / name))
    if result.failure is not None:
        raise result.failure
    return StepOutcome(result.paths, result.summary())


# ---------------------------------------------------------------------------------------- report


class ReportOptions(ResultsViewOptions):
    """``harness report [RESULTS_DIR]``: one HTML page at ``output`` (default RESULTS_DIR/report.html)
    titled ``title``; always with intervals and tied-with-best marks, per-query views with ``baseline``."""

    output: Path | None = option(
        None, parse=output_file, role="output", help="HTML file to write (default: RESULTS_DIR/report.html)"
    )
    title: str = option(DEFAULT_TITLE, help="page title")


@dataclass
class ReportResult(CommandResult):
    """The page written (``output``) and the tables on it."""

    tableset: TableSet | None  # None: no table could be built (``failure`` says why)
    output: Path | None
    failure: HarnessError | None = None

    def payload(self) -> dict[str, Any]:
        return {"output": str(self.output) if self.output else None}

    def render(self) -> str:
        return str(self.output) if self.output else ""


def report(options: ReportOptions | None = None, /, **values: Any) -> ReportResult:
    """Write one self-contained HTML page of the results, as ``harness report``.

    Tables as ``table(ci=True)`` shows them, sortable; a bar chart per metric with bootstrap error bars;
    with ``baseline`` a per-query section; every run's provenance. Example:
    ``report(results_dir="results", baseline="bm25").output``.
    """
    options = ReportOptions.coerce(options, values)
    # The default page goes into the results folder: refused there (before any work) if that is a result.
    label = "--output" if options.output else "the default --output"
    output = check_output(options.output or options.results_folder() / "report.html", label)
    # The page always shows intervals and tied groups.
    tableset, warnings, failure = _tableset(options, ci=True)
    if tableset is None:
        return ReportResult(None, None, messages=warnings, exit_code=2, failure=failure)
    written = write_report(tableset, output, title=options.title, results_dir=options.results_folder())
    return ReportResult(tableset=tableset, output=written, paths=[written], messages=warnings)


def report_step(options: ReportOptions, directory: Path) -> StepOutcome:
    """``report`` as an experiment step: ``report.html`` in the step's folder."""
    result = report(options.replace(output=directory / "report.html"))
    if result.failure is not None:
        raise result.failure
    return StepOutcome(result.paths, list(result.messages))


COMMANDS = (
    Command(
        "table",
        TableOptions,
        table,
        help="tables of results: datasets x models, averages, best marked, significance vs a baseline",
        description="One table per metric: datasets as rows (plus the average over the datasets every model "
        "has), models as columns, the best value per row in bold. With --baseline, a cell carries "
        "an arrow when its per-query difference from the baseline is significant (paired test, "
        "correction across the table). With --ci, every cell carries a bootstrap interval and each row "
        "marks the systems statistically tied with its best. Results whose files are corrupt or whose data "
        "fingerprint differs are reported on stderr and left out.",
        step=table_step,
        step_inputs=results_files,
    ),
    Command(
        "report",
        ReportOptions,
        report,
        help="one self-contained HTML page: tables, charts and every run's provenance",
        description="Write a static HTML page (no external files, charts embedded, no request allowed) with "
        "the tables of `harness table --ci` (intervals, systems tied with the best, Judged@k), sortable by a "
        "click on a header, a bar chart per metric with per-query bootstrap error bars, with --baseline a "
        "per-query section (scatter against the baseline, win / tie / loss, the queries that moved most with "
        "their documents and judgments), and the provenance of every run shown.",
        step=report_step,
        step_inputs=results_files,
    ),
)
