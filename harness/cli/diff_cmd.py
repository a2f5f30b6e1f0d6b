"""``harness diff A B``: why two results (or a result and a published number) differ."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.common import positive_int
from harness.core.fileio import atomic_write_json
from harness.reproduce.reference_diff import build_diff, format_diff


def run_diff(args: argparse.Namespace) -> int:
    report = build_diff(
        args.a,
        args.b,
        metric=args.metric,
        top_queries=args.top_queries,
        top_docs=args.top_docs,
        references_file=args.references,
    )
    sys.stdout.write(format_diff(report))
    if args.output:
        atomic_write_json(args.output, report.to_json())
        print(f"wrote {args.output}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="why two results differ: every differing setting that can move a number, then per query",
        description="Compare result folder A with result folder B, or with the published reference cell for "
        "A's model and dataset (B = ref, or ref:SOURCE for one source of references.yaml). Lists every "
        "recorded setting that differs and can move a number (dataset checksum, split, identical-id rule, "
        "prefixes, pooling, normalisation, max length, title joining, top-k, -c, relevance level, score "
        "precision, library versions that change scores), the metrics side by side, then per query: "
        "win / tie / loss and the queries that moved most with each side's top documents and judgments.",
    )
    parser.add_argument("a", type=Path, help="result folder (holding metrics.json and provenance.json)")
    parser.add_argument("b", help="result folder, or ref / ref:SOURCE for the published cell")
    parser.add_argument(
        "--metric", default="ndcg@10", help="metric of the per-query picture (default: %(default)s)"
    )
    parser.add_argument(
        "--top-queries",
        type=positive_int,
        default=5,
        help="queries that moved most to show (default: %(default)s)",
    )
    parser.add_argument(
        "--top-docs", type=positive_int, default=5, help="documents shown per side (default: %(default)s)"
    )
    parser.add_argument(
        "--references",
        type=Path,
        help="published numbers (default: the shipped references.yaml plus HARNESS_CONFIG_DIR's)",
    )
    parser.add_argument("--output", "-o", type=Path, metavar="FILE.json", help="also write the diff as JSON")
    parser.set_defaults(func=run_diff)
