"""Argument types and option groups shared by several commands, so each option means one thing everywhere."""

from __future__ import annotations

import argparse

from harness.evaluation.compare import SignificanceSettings

PAIRED_TESTS = ("permutation", "ttest", "wilcoxon")
CORRECTIONS = ("holm", "bonferroni", "none")


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
