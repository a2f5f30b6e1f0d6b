"""Argument types and option groups shared by several commands, so each option means one thing everywhere."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.core.paths import default_cache_dir, default_data_dir, default_results_dir
from harness.datasets.qrels import DEFAULT_DUPLICATES, DUPLICATE_POLICIES
from harness.encoding.onnx import INT8_VARIANTS
from harness.encoding.pool import parse_devices
from harness.evaluation.compare import SignificanceSettings
from harness.evaluation.metrics import PIPELINE_METRICS
from harness.evaluation.significance import CORRECTIONS
from harness.evaluation.significance import TESTS as PAIRED_TESTS
from harness.models.registry import PRECISIONS, RUNTIMES
from harness.pipeline import EvalOptions


def positive_int(text: str) -> int:
    """argparse type: a whole number greater than 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return value


def probability(text: str) -> float:
    """argparse type: a number strictly between 0 and 1 (a significance level)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def add_significance_arguments(parser: argparse.ArgumentParser, *, correction_scope: str) -> None:
    """``--test --n-resamples --seed --alpha --correction``, read as ``args.test``, ``args.n_resamples``, ..."""
    parser.add_argument(
        "--test",
        choices=PAIRED_TESTS,
        default="permutation",
        help="two-sided paired test: sign-flip permutation (randomisation), Student's t, or Wilcoxon "
        "signed-rank (default: %(default)s)",
    )
    parser.add_argument(
        "--n-resamples",
        "--resamples",
        dest="n_resamples",
        type=positive_int,
        default=10_000,
        metavar="N",
        help="permutations and bootstrap resamples (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=42, help="random seed; same seed, same p-values (default: %(default)s)"
    )
    parser.add_argument(
        "--alpha", type=probability, default=0.05, help="significance level (default: %(default)s)"
    )
    parser.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default="holm",
        help=f"multiple-comparison correction over {correction_scope} (default: %(default)s)",
    )


def significance_settings(args: argparse.Namespace) -> SignificanceSettings:
    """The settings read by :func:`add_significance_arguments`, checked."""
    return SignificanceSettings(
        test=args.test,
        n_resamples=args.n_resamples,
        seed=args.seed,
        alpha=args.alpha,
        correction=args.correction,
    ).validate()


class DeprecatedAlias(argparse.Action):
    """An old option spelling kept for one release: stores into the new option, with one note on stderr."""

    def __init__(self, option_strings, dest, *, new: str, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"note: {option_string} is deprecated, use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The pipeline's options; shared by every command that encodes or evaluates (eval, encode, reproduce)."""
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
    add_runtime_arguments(parser)
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


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """``--runtime`` (``--backend`` until the next release) and ``--precision``: how vectors are computed."""
    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        help="runtime of the forward pass: exact (default: the fastest whose vectors equal torch fp32, "
        "checked once per model), torch, or onnx (ONNX Runtime, exported once into the cache)",
    )
    parser.add_argument(
        "--backend",
        dest="runtime",
        choices=RUNTIMES,
        action=DeprecatedAlias,
        new="--runtime",
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="fp32 (default); bf16 on CPUs with native bf16 or on GPUs; fp16 on GPUs; int8 with the onnx "
        "runtime on CPUs (see --int8); fast: the fastest setting here whose once-per-model check passes. "
        "All but fp32 are approximate: vectors differ from fp32, each checked once against torch fp32",
    )
    parser.add_argument(
        "--int8",
        choices=("auto", *INT8_VARIANTS),
        help="how --precision int8 quantizes: auto (default: nbits8, the variant that passes its check) or "
        "a named variant, e.g. dynamic (faster, further from fp32; dynamic-7bit on CPUs without VNNI)",
    )


def options_from_args(args: argparse.Namespace) -> EvalOptions:
    """The ``EvalOptions`` that ``add_eval_arguments``'s options describe."""
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
            for key, value in (("runtime", args.runtime), ("precision", args.precision), ("int8", args.int8))
            if value is not None
        },
    )


def add_qrels_duplicates_argument(parser: argparse.ArgumentParser) -> None:
    """``--qrels-duplicates {error,last}``, read as ``args.qrels_duplicates``."""
    parser.add_argument(
        "--qrels-duplicates",
        choices=DUPLICATE_POLICIES,
        default=DEFAULT_DUPLICATES,
        help="a (query, document) pair judged twice in the qrels: error (as trec_eval, default) "
        "or last (keep the last row, as BEIR's loader)",
    )
