"""``harness eval``: every dataset x model pair through the dense (or BM25) pipeline."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from harness.cli.common import add_qrels_duplicates_argument, positive_int
from harness.core.paths import default_cache_dir, default_data_dir, default_results_dir
from harness.evaluation.metrics import HEADLINE_METRICS, PIPELINE_METRICS, pretty_metric
from harness.models.registry import PRECISIONS, RUNTIMES
from harness.pipeline import PairOutcome, check_inputs, run_pairs

log = logging.getLogger(__name__)


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The pipeline's options; shared with commands that run evaluations (reproduce, compare)."""
    parser.add_argument("--split", help="split to evaluate (default: the one the papers report)")
    parser.add_argument("--top-k", type=positive_int, default=1000, help="documents retrieved per query")
    parser.add_argument("--batch-size", type=positive_int, default=128, help="encoding batch size")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, mps (default: the best available)")
    parser.add_argument(
        "--index",
        default="Flat",
        help="FAISS index spec: Flat (exact, default), HNSW32[,efSearch=N], IVF1024,PQ48np[,nprobe=N]",
    )
    parser.add_argument("--results-dir", type=Path, default=default_results_dir())
    parser.add_argument("--data-dir", type=Path, default=default_data_dir(), help="env HARNESS_DATA_DIR")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(), help="env HARNESS_CACHE_DIR")
    parser.add_argument(
        "--mirror", help="URL prefix or local folder with BEIR datasets (env HARNESS_BEIR_MIRROR)"
    )
    identical = parser.add_mutually_exclusive_group()
    identical.add_argument(
        "--drop-identical-ids",
        dest="drop_identical_ids",
        action="store_const",
        const=True,
        help="drop hits whose doc id equals the query id (default: the dataset's convention)",
    )
    identical.add_argument(
        "--keep-identical-ids", dest="drop_identical_ids", action="store_const", const=False
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=list(PIPELINE_METRICS),
        help="metric names (ndcg@10, map, ...) or bare families",
    )
    parser.add_argument(
        "--ks", nargs="+", type=positive_int, help="cut-offs that bare family names expand to"
    )
    parser.add_argument("--relevance-level", type=int, default=1, help="minimum grade counted as relevant")
    parser.add_argument(
        "--complete", action="store_true", help="average unretrieved judged queries as 0 (-c)"
    )
    parser.add_argument("--strict", action="store_true", help="qrels naming unknown ids are errors")
    add_qrels_duplicates_argument(parser)
    parser.add_argument("--trust-remote-code", action="store_true", help="allow a model's own Python code")
    parser.add_argument(
        "--shard-size", type=positive_int, default=50_000, help="documents per embedding shard"
    )
    parser.add_argument("--force", action="store_true", help="recompute even when an equal result exists")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "--backend",
        choices=RUNTIMES,
        help="runtime of the forward pass: exact (default: the fastest whose vectors equal torch fp32, "
        "checked once per model), torch, or onnx (ONNX Runtime, exported once into the cache)",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="fp32 (default); bf16 on CPUs with native bf16 or on GPUs; fp16 on GPUs; int8 with the onnx "
        "backend on CPUs (dynamic quantization). All but fp32 are approximate: vectors differ from fp32",
    )
    scale = parser.add_argument_group(
        "scaling out", "how the corpus is encoded; every choice writes the same embeddings (see README)"
    )
    scale.add_argument(
        "--workers",
        type=positive_int,
        help="encoding workers (default: one per GPU, else one CPU process per 4 cores)",
    )
    scale.add_argument("--devices", help="comma-separated devices, one worker each, e.g. cuda:0,cuda:1")
    scale.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local processes, or Ray actors (needs the [ray] extra; a local Ray starts if none is given)",
    )
    scale.add_argument("--ray-address", help="Ray cluster to join, e.g. ray://head:10001 (env RAY_ADDRESS)")


def options_from_args(args: argparse.Namespace):
    from harness.encoding.pool import parse_devices
    from harness.pipeline import EvalOptions

    return EvalOptions(
        split=args.split,
        top_k=args.top_k,
        batch_size=args.batch_size,
        device=args.device,
        index=args.index,
        results_dir=args.results_dir,
        data_dir=args.data_dir,
        cache_dir=args.cache_dir,
        mirror=args.mirror,
        drop_identical_ids=args.drop_identical_ids,
        metrics=list(args.metrics),
        ks=list(args.ks) if args.ks else None,
        relevance_level=args.relevance_level,
        complete=args.complete,
        strict=args.strict,
        qrels_duplicates=args.qrels_duplicates,
        trust_remote_code=args.trust_remote_code,
        shard_size=args.shard_size,
        force=args.force,
        progress=not args.no_progress,
        workers=args.workers,
        devices=parse_devices(args.devices),
        executor=args.executor,
        ray_address=args.ray_address,
        # Only what was asked for, so runs without these flags keep their earlier result config.
        encoder_options={
            key: value
            for key, value in (("runtime", args.backend), ("precision", args.precision))
            if value is not None
        },
    )


def format_summary(outcomes: list[PairOutcome]) -> str:
    """The closing table: one line per (dataset, model) with how its vectors were computed."""
    header = ("dataset", "model", "backend", *(pretty_metric(name) for name in HEADLINE_METRICS), "time (s)")
    lines = [header]
    for outcome in outcomes:
        result = outcome.result
        lines.append(
            (
                result.dataset,
                result.model,
                result.runtime_label,
                *(f"{result.metrics.get(name, float('nan')):.4f}" for name in HEADLINE_METRICS),
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
    check_inputs(args.dataset, args.model, options)
    outcomes, failures = run_pairs(args.dataset, args.model, options)
    if outcomes:
        print(format_summary(outcomes))
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
        help="registry names/aliases, Hugging Face ids or local model folders",
    )
    add_eval_arguments(parser)
    parser.set_defaults(func=run)
