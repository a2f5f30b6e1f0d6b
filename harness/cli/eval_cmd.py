"""``harness eval``: every dataset x model pair through the dense (or BM25) pipeline."""

from __future__ import annotations

import argparse
import logging
import sys

from harness.cli.common import add_eval_arguments, add_system_arguments, options_from_args, systems_from_args
from harness.evaluation.judged import HEADLINE_K, judged_warning
from harness.evaluation.metrics import HEADLINE_METRICS, pretty_metric
from harness.pipeline import PairOutcome, check_inputs, run_pairs

log = logging.getLogger(__name__)


def format_summary(outcomes: list[PairOutcome]) -> str:
    """The closing table: one line per (dataset, model) with how its vectors were computed.

    Judged@10 stands beside nDCG@10: the share of the top 10 that has a judgment at all.
    """
    names = [pretty_metric(name) for name in HEADLINE_METRICS]
    header = ("dataset", "model", "runtime", names[0], f"Judged@{HEADLINE_K}", *names[1:], "time (s)")
    lines = [header]
    for outcome in outcomes:
        result = outcome.result
        values = [f"{result.metrics.get(name, float('nan')):.4f}" for name in HEADLINE_METRICS]
        judged = result.judged_share(HEADLINE_K)
        lines.append(
            (
                result.dataset,
                result.model,
                result.runtime_label,
                values[0],
                "-" if judged is None else f"{judged:.2f}",
                *values[1:],
                f"{outcome.seconds:.1f}" + (" (reused)" if result.reused else ""),
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    rendered = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in lines
    ]
    rendered.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(rendered)


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    models = systems_from_args(args)
    for note in check_inputs(args.dataset, models, options):
        print(f"note: {note}", file=sys.stderr)
    outcomes, failures = run_pairs(args.dataset, models, options)
    if outcomes:
        print(format_summary(outcomes))
    for outcome in outcomes:
        warning = judged_warning(outcome.result.judged.get("mean") or {})
        if warning:
            print(f"warning: {outcome.result.dataset} x {outcome.result.model}: {warning}", file=sys.stderr)
    for failure in failures:
        print(f"error: {failure}", file=sys.stderr)
    return 2 if failures else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="encode, index, retrieve and evaluate every dataset x model pair",
        description="Run the dense (or BM25) pipeline for every dataset x model pair and write "
        "results/<dataset>/<model>/ (run.trec, metrics.json, provenance.json). Embeddings are cached; "
        "an unchanged pair reuses its result.",
    )
    parser.add_argument("--dataset", nargs="+", required=True, help="registry names or BEIR-format folders")
    parser.add_argument(
        "--model",
        nargs="+",
        required=True,
        help="registry names/aliases (models or systems), Hugging Face ids or local model folders",
    )
    add_eval_arguments(parser)
    add_system_arguments(parser)
    parser.set_defaults(func=run)
