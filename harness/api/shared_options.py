"""Options several commands share, each declared once: a command's record calls these to add them.

A default comes from the stage that uses the value (``SignificanceSettings``, ``EvaluationSettings``,
``FusionSettings``...), so it is written once in the source however many commands offer the option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.options import INT32_MAX, SEED_MAX, option, output_file
from harness.datasets.qrels import DEFAULT_DUPLICATES, DUPLICATE_POLICIES
from harness.evaluation.comparison import SignificanceSettings
from harness.evaluation.metrics import SCORE_PRECISIONS, EvaluationSettings
from harness.evaluation.significance import CORRECTIONS, MAX_RESAMPLES, MIN_RESAMPLES, TESTS
from harness.retrieval.fusion import FUSION_METHODS, NORMALIZATIONS, FusionSettings

_SIGNIFICANCE = SignificanceSettings()
_EVALUATION = EvaluationSettings()
_FUSION = FusionSettings()


# ------------------------------------------------------------------------------------- scoring


def ks_option(help: str = "cut-offs that bare family names expand to", metavar: str | None = None) -> Any:
    """``--ks K..``: the cut-offs bare metric families expand to."""
    return option(None, help=help, nargs="+", low=1, high=INT32_MAX, metavar=metavar)


def relevance_level_option(help: str = "minimum grade counted as relevant", metavar: str | None = None) -> Any:
    """``--relevance-level N``: the lowest grade that counts as relevant (trec_eval -l)."""
    return option(
        _EVALUATION.relevance_level, help=help, low=-INT32_MAX - 1, high=INT32_MAX, metavar=metavar
    )


def complete_option(help: str = "average unretrieved judged queries as 0 (-c)") -> Any:
    """``--complete``: average over every judged query (trec_eval -c)."""
    return option(_EVALUATION.complete, help=help, action="store_true")


def score_precision_option() -> Any:
    """``--score-precision {float64,float32}``."""
    return option(
        _EVALUATION.score_precision,
        choices=SCORE_PRECISIONS,
        help="rank by scores as read, like trec_eval 10 (float64, default), or rounded to float32 first, "
        "like trec_eval 9, pytrec_eval, beir and mteb (float32); recorded in the output's settings",
    )


def qrels_duplicates_option() -> Any:
    """``--qrels-duplicates {error,last}``."""
    return option(
        DEFAULT_DUPLICATES,
        choices=DUPLICATE_POLICIES,
        help="a (query, document) pair judged twice in the qrels: error (as trec_eval, default) "
        "or last (keep the last row, as BEIR's loader)",
    )


def json_output_option(help: str = "also write the results as JSON") -> Any:
    """``--output/-o FILE.json``: refused at once when it is a folder or its folder is missing."""
    value: Path | None = option(
        None, flags=("--output", "-o"), parse=output_file, metavar="FILE.json", help=help
    )
    return value


# -------------------------------------------------------------------------------- significance


def paired_test_option() -> Any:
    return option(
        _SIGNIFICANCE.test,
        choices=TESTS,
        help="two-sided paired test: sign-flip permutation (randomisation), Student's t, or Wilcoxon "
        "signed-rank (default: %(default)s)",
    )


def n_resamples_option() -> Any:
    return option(
        _SIGNIFICANCE.n_resamples,
        flags=("--n-resamples", "--resamples"),
        low=MIN_RESAMPLES,
        high=MAX_RESAMPLES,
        metavar="N",
        help=f"permutations and bootstrap resamples, {MIN_RESAMPLES:,} to {MAX_RESAMPLES:,} (default: %(default)s)",
    )


def seed_option() -> Any:
    return option(
        _SIGNIFICANCE.seed,
        low=0,
        high=SEED_MAX,
        help="random seed, 0 to 2^32-1; same seed, same p-values (default: %(default)s)",
    )


def alpha_option() -> Any:
    return option(_SIGNIFICANCE.alpha, above=0, below=1, help="significance level (default: %(default)s)")


def correction_option(scope: str) -> Any:
    return option(
        _SIGNIFICANCE.correction,
        choices=CORRECTIONS,
        help=f"multiple-comparison correction over {scope} (default: %(default)s)",
    )


def significance_of(options: Any) -> SignificanceSettings:
    """The significance settings a record's ``test n_resamples seed alpha correction`` describe, checked."""
    return SignificanceSettings(
        test=options.test,
        n_resamples=options.n_resamples,
        seed=options.seed,
        alpha=options.alpha,
        correction=options.correction,
    ).validate()


# ------------------------------------------------------------------------------------- fusion


def fuse_method_option(flag: str, group: tuple[str, str | None] | None = None) -> Any:
    return option(
        None, flags=(flag,), metavar="METHOD", help=f"fusion method: {', '.join(FUSION_METHODS)}", group=group
    )


def rrf_k_option(group: tuple[str, str | None] | None = None) -> Any:
    return option(_FUSION.k, parse=int, help="rrf's k (default: %(default)s)", group=group)


def norm_option(group: tuple[str, str | None] | None = None) -> Any:
    return option(
        None,
        metavar="NORM",
        help=f"score normalisation: {', '.join(NORMALIZATIONS)} (default: min-max for combsum/combmnz, "
        "none for interpolation)",
        group=group,
    )


def weights_option(group: tuple[str, str | None] | None = None) -> Any:
    return option(
        None, nargs="+", parse=float, metavar="W", help="interpolation: one weight per run/model", group=group
    )


def fuse_depth_option(group: tuple[str, str | None] | None = None) -> Any:
    return option(
        None,
        parse=int,
        metavar="N",
        help="documents each run contributes per query (default: all it has; with eval, --top-k)",
        group=group,
    )
