"""``harness fuse``: fuse existing TREC run files into one (RRF, CombSUM, CombMNZ, interpolation)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import add_fusion_arguments, fusion_settings, positive_int
from harness.core.errors import HarnessError
from harness.evaluation.trec import read_run, write_run
from harness.retrieval.fusion import fuse


def run(args: argparse.Namespace) -> int:
    settings = fusion_settings(args)
    if settings is None:
        raise HarnessError("harness fuse needs --method (rrf, combsum, combmnz or interpolation)")
    runs = [read_run(path) for path in args.runs]
    fused = fuse(runs, settings, [str(path) for path in args.runs])
    write_run(args.output, fused, args.tag, top_k=args.top_k)
    print(f"wrote {args.output}: {len(fused)} queries, {settings.method} of {len(runs)} runs")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fuse",
        help="fuse TREC run files into one run (rrf, combsum, combmnz, interpolation)",
        description="Fuse two or more TREC runs over the same queries. Each run is ranked in trec_eval order "
        "(score descending, then docid descending) before its ranks or scores are used.",
    )
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="TREC run files")
    add_fusion_arguments(parser, method_option="--method")
    parser.add_argument("--output", "-o", type=Path, required=True, help="fused run file to write")
    parser.add_argument(
        "--top-k", type=positive_int, default=1000, help="documents kept per query (default: %(default)s)"
    )
    parser.add_argument("--tag", default="harness-fused", help="run tag column (default: %(default)s)")
    parser.set_defaults(func=run)
