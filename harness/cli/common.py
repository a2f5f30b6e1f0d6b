"""Argument types and option groups shared by several commands, so each option means one thing everywhere."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from harness.core.errors import OutputError
from harness.core.fileio import check_output_file
from harness.core.paths import default_cache_dir, default_data_dir, default_results_dir
from harness.datasets.qrels import DEFAULT_DUPLICATES, DUPLICATE_POLICIES
from harness.encoding.onnx import INT8_VARIANTS
from harness.evaluation.comparison import SignificanceSettings
from harness.evaluation.metrics import DEFAULT_SCORE_PRECISION, PIPELINE_METRICS, SCORE_PRECISIONS
from harness.evaluation.significance import CORRECTIONS, MAX_RESAMPLES, MIN_RESAMPLES
from harness.evaluation.significance import TESTS as PAIRED_TESTS
from harness.models.model_registry import PRECISIONS, RUNTIMES
from harness.pipeline import EvalOptions
from harness.retrieval.fusion import DEFAULT_RRF_K, FUSION_METHODS, NORMALIZATIONS, FusionSettings
from harness.retrieval.rerank import DEFAULT_RERANK_DEPTH
from harness.retrieval.systems import SYSTEM_OPTIONS, SystemRecord, fusion_from_options, systems_from_options

# The real range of every numeric option, checked when the command line is parsed. Cut-offs, depths
# and grades end up in C ints (FAISS, trec_eval), so they stay within 32 bits.
INT32_MAX = 2**31 - 1
SEED_MAX = 2**32 - 1  # numpy seeds are non-negative; 32 bits as in every seeded tool
MAX_BATCH_SIZE = 1 << 20
MAX_WORKERS = 1024
MAX_DIGITS = 15  # a float64 holds 15-17 significant digits
MAX_RETRIES = 100
MAX_TIMEOUT = 24 * 3600.0


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """argparse type: a whole number from ``low`` to ``high``; the error names the range."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low:,} to {high:,}, got {text!r}"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low:,} to {high:,}, got {text}")
        return value

    parse.__name__ = "whole number"
    return parse


def number_above(low: float, high: float) -> Callable[[str], float]:
    """argparse type: a finite number greater than ``low`` and at most ``high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number above {low:g} up to {high:g}, got {text!r}") from None
        if not low < value <= high:  # NaN fails both comparisons
            raise argparse.ArgumentTypeError(f"must be above {low:g} and at most {high:g}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


positive_int = whole_number(1, INT32_MAX)
cutoff = whole_number(1, INT32_MAX)
relevance_grade = whole_number(-INT32_MAX - 1, INT32_MAX)


def output_file(text: str) -> Path:
    """argparse type: a file to write; refused now if it is a folder or its folder does not exist."""
    try:
        return check_output_file(Path(text))
    except OutputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def folder(text: str) -> Path:
    """argparse type: a folder the command reads or fills (it may not exist yet); a file there is refused."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a file, not a folder; give a folder path")
    return path


def probability(text: str) -> float:
    """argparse type: a number strictly between 0 and 1 (a significance level)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
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
        type=whole_number(MIN_RESAMPLES, MAX_RESAMPLES),
        default=10_000,
        metavar="N",
        help=f"permutations and bootstrap resamples, {MIN_RESAMPLES:,} to {MAX_RESAMPLES:,} (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=whole_number(0, SEED_MAX),
        default=42,
        help="random seed, 0 to 2^32-1; same seed, same p-values (default: %(default)s)",
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
    parser.add_argument("--batch-size", type=whole_number(1, MAX_BATCH_SIZE), default=128, help="encoding batch size")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, mps (default: the best available)")
    parser.add_argument(
        "--index",
        default="Flat",
        help="FAISS index spec: Flat (exact, default), HNSW32[,efSearch=N], IVF1024,PQ48np[,nprobe=N]",
    )
    parser.add_argument("--results-dir", type=folder, default=default_results_dir())
    parser.add_argument("--data-dir", type=folder, default=default_data_dir(), help="env HARNESS_DATA_DIR")
    parser.add_argument("--cache-dir", type=folder, default=default_cache_dir(), help="env HARNESS_CACHE_DIR")
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
        "--ks", nargs="+", type=cutoff, help="cut-offs that bare family names expand to"
    )
    parser.add_argument("--relevance-level", type=relevance_grade, default=1, help="minimum grade counted as relevant")
    parser.add_argument(
        "--complete", action="store_true", help="average unretrieved judged queries as 0 (-c)"
    )
    add_score_precision_argument(parser)
    parser.add_argument("--strict", action="store_true", help="qrels naming unknown ids are errors")
    add_qrels_duplicates_argument(parser)
    parser.add_argument("--trust-remote-code", action="store_true", help="allow a model's own Python code")
    parser.add_argument(
        "--shard-size",
        type=positive_int,
        default=None,
        help="documents per embedding shard (default: corpus/8, between 256 and 50000, so a killed run resumes)",
    )
    parser.add_argument("--force", action="store_true", help="recompute even when an equal result exists")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_runtime_arguments(parser)
    scale = parser.add_argument_group(
        "scaling out", "how the corpus is encoded; every choice writes the same embeddings (see README)"
    )
    scale.add_argument(
        "--workers",
        type=whole_number(1, MAX_WORKERS),
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
    return EvalOptions.from_command_options(vars(args))


def add_score_precision_argument(parser: argparse.ArgumentParser) -> None:
    """``--score-precision {float64,float32}``, read as ``args.score_precision``."""
    parser.add_argument(
        "--score-precision",
        choices=SCORE_PRECISIONS,
        default=DEFAULT_SCORE_PRECISION,
        help="rank by scores as read, like trec_eval 10 (float64, default), or rounded to float32 first, "
        "like trec_eval 9, pytrec_eval, beir and mteb (float32); recorded in the output's settings",
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


def add_fusion_arguments(parser: argparse.ArgumentParser, *, method_option: str) -> None:
    """``METHOD_OPTION --rrf-k --norm --weights --fuse-depth``, read by :func:`fusion_settings`.

    Values are checked by ``FusionSettings`` (one error line), not by argparse, so a bad method or a
    depth of 0 reads the same from the command line and from a system record.
    """
    parser.add_argument(
        method_option,
        dest="fuse",
        metavar="METHOD",
        help=f"fusion method: {', '.join(FUSION_METHODS)}",
    )
    parser.add_argument("--rrf-k", type=int, default=DEFAULT_RRF_K, help="rrf's k (default: %(default)s)")
    parser.add_argument(
        "--norm",
        metavar="NORM",
        help=f"score normalisation: {', '.join(NORMALIZATIONS)} (default: min-max for combsum/combmnz, "
        "none for interpolation)",
    )
    parser.add_argument(
        "--weights", nargs="+", type=float, metavar="W", help="interpolation: one weight per run/model"
    )
    parser.add_argument(
        "--fuse-depth",
        type=int,
        metavar="N",
        help="documents each run contributes per query (default: all it has; with eval, --top-k)",
    )


def fusion_settings(args: argparse.Namespace) -> FusionSettings | None:
    """The fusion :func:`add_fusion_arguments` describes (None without a method)."""
    return fusion_from_options(args.fuse, args.rrf_k, args.norm, args.weights, args.fuse_depth)


def add_system_arguments(parser: argparse.ArgumentParser) -> None:
    """How several ``--model``s become one system: ``--fuse`` and its options, ``--rerank``."""
    group = parser.add_argument_group(
        "systems", "fuse the --model runs into one system and/or re-rank with a cross-encoder (see README)"
    )
    add_fusion_arguments(group, method_option="--fuse")
    group.add_argument(
        "--rerank", metavar="MODEL", help="cross-encoder (folder or hub id) re-ranking each run"
    )
    group.add_argument(
        "--rerank-depth",
        type=int,
        default=DEFAULT_RERANK_DEPTH,
        metavar="N",
        help="documents re-ranked per query; below it the first-stage order is kept (default: %(default)s)",
    )
    group.add_argument("--rerank-max-length", type=int, metavar="N", help="pair truncation (default: 512)")


def systems_from_args(args: argparse.Namespace) -> list[str | SystemRecord]:
    """``--model``s as given, or the system(s) ``--fuse``/``--rerank`` make of them."""
    return systems_from_options(args.model, **{name: getattr(args, name) for name in SYSTEM_OPTIONS})
