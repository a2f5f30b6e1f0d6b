"""Options several commands share, each declared once: a command's record calls these to add them.

The scoring options (``ks_option`` ...) are the evaluation stage's (:mod:`harness.evaluation.scoring_options`),
re-exported here for the commands.

A default comes from the stage that uses the value (``SignificanceSettings``, ``EvaluationSettings``,
``FusionSettings``...), so it is written once in the source however many commands offer the option.
"""

from __future__ import annotations

from typing import Any

from harness.core.options import SEED_MAX, option, output_file
from harness.evaluation.comparison import SignificanceSettings
from harness.evaluation.scoring_options import (
    complete_option,
    ks_option,
    qrels_duplicates_option,
    relevance_level_option,
    score_precision_option,
)
from harness.evaluation.significance import CORRECTIONS, MAX_RESAMPLES, MIN_RESAMPLES, TESTS
from harness.retrieval.fusion import FUSION_METHODS, NORMALIZATIONS, FusionSettings

_SIGNIFICANCE = SignificanceSettings()
_FUSION = FusionSettings()


# ------------------------------------------------------------------------------------- outputs


def json_output_option(help: str = "also write the results as JSON") -> Any:
    """``--output/-o FILE.json``: refused at once when it is a folder or its folder is missing, or when it
    names one of the command's inputs, a harness result or a file inside one (``role="output"``)."""
    return option(
        None, flags=("--output", "-o"), parse=output_file, metavar="FILE.json", help=help, role="output"
    )


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
    # Fusion's own settings refuse a negative k and a depth below 1 (FusionSettings), from every source; a
    # whole number option is held to int64 and a weight to a finite number (harness.core.options).
    return option(_FUSION.k, help="rrf's k (default: %(default)s)", group=group)


def norm_option(group: tuple[str, str | None] | None = None) -> Any:
    return option(
        None,
        metavar="NORM",
        help=f"score normalisation: {', '.join(NORMALIZATIONS)} (default: min-max for combsum/combmnz, "
        "none for interpolation)",
        group=group,
    )


def weights_option(group: tuple[str, str | None] | None = None, flags: tuple[str, ...] = ()) -> Any:
    return option(
        None, nargs="+", metavar="W", flags=flags, help="interpolation: one weight per run/model", group=group
    )


def fuse_depth_option(group: tuple[str, str | None] | None = None) -> Any:
    return option(
        None,
        metavar="N",
        help="documents each run contributes per query (default: all it has; with eval, --top-k)",
        group=group,
    )


__all__ = [
    "alpha_option",
    "complete_option",
    "correction_option",
    "fuse_depth_option",
    "fuse_method_option",
    "json_output_option",
    "ks_option",
    "n_resamples_option",
    "norm_option",
    "paired_test_option",
    "qrels_duplicates_option",
    "relevance_level_option",
    "rrf_k_option",
    "score_precision_option",
    "seed_option",
    "significance_of",
    "weights_option",
]
