"""``harness table``, ``harness report`` and ``harness reproduce``: from result folders to what a paper prints."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.common import (
    MAX_DIGITS,
    add_eval_arguments,
    add_significance_arguments,
    options_from_args,
    output_file,
    significance_settings,
    whole_number,
)
from harness.core.fileio import atomic_write, check_output_file, check_output_folder
from harness.core.paths import default_results_dir
from harness.evaluation.metrics import HEADLINE_METRICS
from harness.report.charts import write_charts
from harness.report.formats import FORMATS, render
from harness.report.html import write_report
from harness.report.tables import TableSet, build_tables
from harness.reproduce.suites import format_text, load_suite, run_suite, write_markdown
from harness.results.collect import collect_results


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results_dir",
        nargs="?",
        type=Path,
        default=None,
        help="folder holding <dataset>/<model>/metrics.json (default: env HARNESS_RESULTS_DIR or results/)",
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=list(HEADLINE_METRICS),
        help="one table per metric (default: %(default)s)",
    )
    parser.add_argument("--datasets", nargs="+", help="rows to show, in this order (default: all, sorted)")
    parser.add_argument(
        "--models",
        nargs="+",
        help="columns to show, in this order: names, aliases, slugs or checkpoint folders (default: all)",
    )
    parser.add_argument(
        "--baseline", help="model every other column is tested against; marks significant differences"
    )
    add_significance_arguments(parser, correction_scope="each table's comparisons")
    parser.add_argument(
        "--digits", type=whole_number(1, MAX_DIGITS), default=4, help="decimals printed (default: %(default)s)"
    )


def _tableset(args: argparse.Namespace, *, ci: bool) -> tuple[Path, TableSet]:
    results_dir = args.results_dir or default_results_dir()
    collection = collect_results(results_dir)
    for path, reason in collection.skipped:
        print(f"warning: skipped {path}: {reason}", file=sys.stderr)
    settings = significance_settings(args)
    tableset = build_tables(
        collection,
        args.metrics,
        datasets=args.datasets,
        models=args.models,
        baseline=args.baseline,
        significance=settings,
        digits=args.digits,
        ci=ci,
    )
    return results_dir, tableset


def run_table(args: argparse.Namespace) -> int:
    if args.output is not None:  # refused before the tables are computed
        (check_output_folder if args.format == "png" else check_output_file)(args.output)
    results_dir, tableset = _tableset(args, ci=args.ci)
    if args.format == "png":
        for path in write_charts(tableset, args.output or Path(results_dir) / "charts"):
            print(path)
        return 0
    text = render(tableset, args.format)
    if args.output:
        with atomic_write(args.output, parents=False) as handle:
            handle.write(text)
        print(args.output)
    else:
        sys.stdout.write(text)
    return 0


def run_report(args: argparse.Namespace) -> int:
    results_dir, tableset = _tableset(args, ci=True)  # the page always shows intervals and tied groups
    output = args.output or Path(results_dir) / "report.html"
    print(write_report(tableset, output, title=args.title, results_dir=Path(results_dir)))
    return 0


def run_reproduce(args: argparse.Namespace) -> int:
    suite = load_suite(args.suite, args.references)
    options = options_from_args(args)
    report = run_suite(suite, options)
    sys.stdout.write(format_text(report))
    print(f"wrote {write_markdown(report, options.results_dir)}")
    return report.exit_code


def register(subparsers: argparse._SubParsersAction) -> None:
    table = subparsers.add_parser(
        "table",
        help="tables of results: datasets x models, averages, best marked, significance vs a baseline",
        description="One table per metric: datasets as rows (plus the average over the datasets every model "
        "has), models as columns, the best value per row in bold. With --baseline, a cell carries "
        "an arrow when its per-query difference from the baseline is significant (paired test, "
        "correction across the table). With --ci, every cell carries a bootstrap interval and each row "
        "marks the systems statistically tied with its best. Results whose files are corrupt or whose data fingerprint "
        "differs are reported on stderr and left out.",
    )
    _add_selection(table)
    table.add_argument(
        "--ci",
        action="store_true",
        help="a bootstrap interval over queries on every cell (--n-resamples, --seed, 1 - --alpha) and, per "
        "row, a mark on the systems statistically tied with the best (--test against the best, --correction "
        "over the row)",
    )
    table.add_argument(
        "--format",
        choices=[*FORMATS, "png"],
        default="md",
        help="md (default), csv (one tidy line per cell), latex (booktabs), json, or png (bar charts)",
    )
    table.add_argument(
        "--output",
        type=Path,
        help="write here instead of stdout (for png: the folder for the charts, default RESULTS_DIR/charts)",
    )
    table.set_defaults(func=run_table)

    report = subparsers.add_parser(
        "report",
        help="one self-contained HTML page: tables, charts and every run's provenance",
        description="Write a static HTML page (no external files, charts embedded, no request allowed) with "
        "the tables of `harness table --ci` (intervals, systems tied with the best, Judged@k), sortable by a "
        "click on a header, a bar chart per metric with per-query bootstrap error bars, with --baseline a "
        "per-query section (scatter against the baseline, win / tie / loss, the queries that moved most with "
        "their documents and judgments), and the provenance of every run shown.",
    )
    _add_selection(report)
    report.add_argument("--output", type=output_file, help="HTML file to write (default: RESULTS_DIR/report.html)")
    report.add_argument("--title", default="Retrieval benchmark report", help="page title")
    report.set_defaults(func=run_report)

    reproduce = subparsers.add_parser(
        "reproduce",
        help="run a suite of conditions and compare with published numbers (OK / MISS / SKIPPED)",
        description="Load the suite SUITE (harness/records/suites/ or HARNESS_CONFIG_DIR/suites/, or a suite file), run every model x dataset condition "
        "that has no matching result yet (cached embeddings and results are reused), and print ours "
        "vs published with the difference and OK / MISS per cell; the same table is written to "
        "RESULTS_DIR/reproduce-SUITE.md. Exits 1 on any MISS (and on SKIPPED when the suite sets "
        "fail_on_skip); a condition whose model or data cannot be obtained is SKIPPED with the reason.",
    )
    reproduce.add_argument("suite", help="suite name (e.g. offline-smoke) or a YAML file")
    reproduce.add_argument(
        "--references",
        type=Path,
        help="published numbers (default: the shipped references.yaml plus HARNESS_CONFIG_DIR's)",
    )
    add_eval_arguments(reproduce)
    reproduce.set_defaults(func=run_reproduce)
