"""``harness evaluate`` (trec_eval-exact metrics of one run) and ``harness compare``
(paired significance tests between runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.common import (
    add_qrels_duplicates_argument,
    add_score_precision_argument,
    add_significance_arguments,
    cutoff,
    output_file,
    relevance_grade,
    significance_settings,
)
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, describe_inputs
from harness.datasets.qrels import read_qrels
from harness.evaluation.comparison import COMPARE_METRICS, PAIRING_RULE, compare_runs
from harness.evaluation.metrics import EVALUATE_FAMILIES, PIPELINE_KS, Evaluation, evaluate
from harness.evaluation.trec import read_run, read_run_columns, run_labels

# One list object, so _cutoffs can tell the default apart from the same names typed by the user.
_EVALUATE_DEFAULT = list(EVALUATE_FAMILIES)

METRICS_HELP = (
    "metric names, case-insensitive: ndcg[@k], recall@k, p@k (precision@k), map[@k], mrr[@k], rprec, bpref, "
    "gmap, success@k, r_cap@k; a bare name that takes k expands over --ks"
)
FORMATS_HELP = (
    "QRELS is TREC `qid iter docid rel` or BEIR TSV `query-id corpus-id score` (header optional); runs are "
    "TREC `qid Q0 docid rank score tag`, columns after the tag ignored. Files are read as trec_eval reads "
    "them: columns split on spaces and tabs, lines starting with # skipped, relevance read as an integer "
    "(1.5 is 1), scores as C reads them (0x1p-1 too); .gz is read transparently. Ranking is trec_eval's: "
    "score descending, then docid descending; the rank column is ignored."
)


def _add_common(parser: argparse.ArgumentParser, metrics: list[str]) -> None:
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=metrics,
        metavar="NAME",
        help=f"{METRICS_HELP} (default: {' '.join(metrics)})",
    )
    parser.add_argument(
        "--ks",
        nargs="+",
        type=cutoff,
        default=None,
        metavar="K",
        help="cutoffs for bare metric names, e.g. --metrics ndcg recall --ks 10 100 "
        f"(default: {' '.join(map(str, PIPELINE_KS))} with the default metrics; otherwise bare map, mrr "
        "and ndcg cover the whole ranking)",
    )
    parser.add_argument(
        "--relevance-level",
        type=relevance_grade,
        default=1,
        metavar="N",
        help="a document is relevant when rel >= N (trec_eval -l; default: %(default)s); nDCG's gain is rel itself",
    )
    parser.add_argument(
        "--complete",
        action="store_true",
        help="average over every judged query, scoring those the run missed as 0 (trec_eval -c); "
        "default: only judged queries present in the run",
    )
    add_score_precision_argument(parser)
    parser.add_argument(
        "--output", "-o", type=output_file, metavar="FILE.json", help="also write the results as JSON"
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    evaluate_parser = subparsers.add_parser(
        "evaluate",
        help="score a run file against qrels with trec_eval's semantics",
        description="Score a TREC run against qrels. " + FORMATS_HELP,
    )
    evaluate_parser.add_argument("qrels", type=Path, metavar="QRELS")
    evaluate_parser.add_argument("run", type=Path, metavar="RUN")
    _add_common(evaluate_parser, _EVALUATE_DEFAULT)
    add_qrels_duplicates_argument(evaluate_parser)
    evaluate_parser.add_argument(
        "--no-diagnostics",
        action="store_true",
        help="skip judged@k and the tie bounds (the bounds re-score every query whose tie order matters "
        "twice: about 3x the time on a large run full of ties)",
    )
    evaluate_parser.add_argument(
        "--per-query",
        action="store_true",
        help="include per-query values (in the JSON with --output, else printed as `qid metric value` lines)",
    )
    evaluate_parser.set_defaults(func=run_evaluate)

    compare_parser = subparsers.add_parser(
        "compare",
        help="paired significance tests of runs against the first run",
        description="Compare RUN_B, RUN_C, ... with the baseline RUN_A on each metric: means, difference "
        "(B-A) with a bootstrap confidence interval, two-sided paired p-value, and the multiple-comparison "
        "correction over all metric x run comparisons. Pairing: " + PAIRING_RULE + " (listed in the "
        "output). " + FORMATS_HELP,
    )
    compare_parser.add_argument("qrels", type=Path, metavar="QRELS")
    compare_parser.add_argument("baseline", type=Path, metavar="RUN_A", help="the baseline run")
    compare_parser.add_argument(
        "others", type=Path, nargs="+", metavar="RUN_B", help="runs compared with RUN_A"
    )
    _add_common(compare_parser, list(COMPARE_METRICS))
    add_qrels_duplicates_argument(compare_parser)
    add_significance_arguments(compare_parser, correction_scope="all metric x run comparisons")
    compare_parser.set_defaults(func=run_compare)


def _cutoffs(args: argparse.Namespace) -> list[int] | None:
    """--ks, or the default cutoffs when the default metric families are used."""
    if args.ks is None and args.metrics is _EVALUATE_DEFAULT:
        return list(PIPELINE_KS)
    return args.ks


def run_evaluate(args: argparse.Namespace) -> int:
    qrels = read_qrels(args.qrels, duplicates=args.qrels_duplicates).qrels
    result = evaluate(
        qrels,
        read_run_columns(args.run),
        args.metrics,
        ks=_cutoffs(args),
        relevance_level=args.relevance_level,
        complete=args.complete,
        score_precision=args.score_precision,
        diagnose=not args.no_diagnostics,
    )
    width = max(len(name) for name in result.aggregate)
    for name, value in result.aggregate.items():
        print(f"{name:<{width}}  {value:.4f}")
    print(_coverage_line(result))
    if result.judged:
        print(_judged_line(result))
    if result.ties:
        print(_ties_line(result))
    if result.judged.get("warning"):
        print(f"warning: {result.judged['warning']}", file=sys.stderr)
    if args.output:
        payload = {
            "inputs": describe_inputs({"qrels": args.qrels, "run": args.run}),
            **result.to_json(args.per_query),
        }
        atomic_write_json(args.output, payload, parents=False)
        print(f"wrote {args.output}")
    elif args.per_query:
        for qid, values in result.per_query.items():
            for name, value in values.items():
                print(f"{qid}\t{name}\t{value:.4f}")
    return 0


def _judged_line(result: Evaluation) -> str:
    means = ", ".join(f"{name} {value:.4f}" for name, value in result.judged["mean"].items())
    return f"judged (share of the top k with a judgment): {means}"


def _ties_line(result: Evaluation) -> str:
    ties = result.ties
    if not ties["queries_with_ties"]:
        return "ties: no query has tied scores; every metric is independent of the tie rule"
    straddling = ", ".join(f"{cut} {entry['queries']}" for cut, entry in ties["straddling_cutoff"].items())
    moving = [
        f"{name} {bound['lowest']:.4f}..{bound['highest']:.4f}"
        for name, bound in ties["bounds"].items()
        if bound["lowest"] != bound["highest"]
    ]
    return (
        f"ties: {ties['queries_with_ties']} queries have tied scores; straddling the cut-off: {straddling or '-'}; "
        f"range over tie orders: {', '.join(moving) or 'none moves'}"
    )


def _preview(qids: list[str], limit: int = 5) -> str:
    shown = ", ".join(qids[:limit])
    return shown + (f", ... (+{len(qids) - limit})" if len(qids) > limit else "")


def _coverage_line(result) -> str:
    missing, unjudged = result.qrels_queries_without_results, result.run_queries_without_qrels
    how = (
        "scored as 0 (--complete)"
        if result.settings["complete"]
        else "not averaged (use --complete to count as 0)"
    )
    line = f"averaged over {result.n_queries} queries; {len(missing)} judged queries without results, {how}"
    if missing:
        line += f": {_preview(missing)}"
    line += f"; {len(unjudged)} run queries without judgments skipped"
    return line


def run_compare(args: argparse.Namespace) -> int:
    paths = [args.baseline, *args.others]
    labels = run_labels(paths)
    if len(set(labels)) != len(labels):
        raise HarnessError("the same run file is given twice")
    qrels = read_qrels(args.qrels, duplicates=args.qrels_duplicates).qrels
    runs = {label: read_run(path) for label, path in zip(labels, paths, strict=True)}
    result = compare_runs(
        qrels,
        runs,
        args.metrics,
        ks=_cutoffs(args),
        settings=significance_settings(args),
        relevance_level=args.relevance_level,
        complete=args.complete,
        score_precision=args.score_precision,
    )
    _print_comparison(result)
    if args.output:
        files = {
            "qrels": args.qrels,
            **{f"run:{label}": path for label, path in zip(labels, paths, strict=True)},
        }
        atomic_write_json(args.output, {"inputs": describe_inputs(files), **result}, parents=False)
        print(f"wrote {args.output}")
    return 0


def _print_comparison(result: dict) -> None:
    settings = result["settings"]
    print(
        f"A = {result['baseline']} (baseline); {result['n_queries']} paired queries; two-sided paired "
        f"{settings['test']} test; {settings['correction']} correction over {settings['n_comparisons']} "
        f"comparisons, alpha {settings['alpha']}; CI: {settings['confidence_interval']} "
        f"({settings['n_resamples']} resamples, seed {settings['seed']})"
    )
    print(f"pairing: {result['pairing_rule']}")
    for label, info in result["runs"].items():
        missing = info["missing_queries_scored_as_empty"]
        if missing["count"]:
            print(
                f"  {label}: {missing['count']} paired queries without results, counted as 0: {_preview(missing['qids'])}"
            )
    ci_label = settings["confidence_interval"].split()[0] + " CI"
    header = ["metric", "B", "A_mean", "B_mean", "Diff(B-A)", ci_label, "n", "p", "p_adj", "sig"]
    rows = [
        [
            row["metric"],
            row["system"],
            f"{row['mean_baseline']:.4f}",
            f"{row['mean_system']:.4f}",
            f"{row['difference']:+.4f}",
            f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]",
            str(row["n_queries"]),
            f"{row['p_value']:.4f}",
            f"{row['p_value_adjusted']:.4f}",
            "yes" if row["significant"] else "no",
        ]
        for row in result["comparisons"]
    ]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    for line in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
