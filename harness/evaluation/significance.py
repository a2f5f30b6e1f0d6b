"""Is a difference between two systems real? Paired tests, bootstrap CIs, multiple comparisons.

Pure statistics on paired arrays; which queries are paired is decided in
:mod:`harness.evaluation.comparison`. The default test is the two-sided paired permutation (randomization) test: under the null hypothesis the sign of each
query's difference is arbitrary, so the observed mean difference is compared with the
means obtained by flipping signs at random (all 2^n flips when that is no more than the
number of resamples). The paired t-test and Wilcoxon signed-rank test come from scipy.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.core.errors import HarnessError

TESTS = ("permutation", "ttest", "wilcoxon")
CORRECTIONS = ("holm", "bonferroni", "none")
# Resamples x queries held in memory at once; fixed so results do not depend on the machine.
RESAMPLE_BATCH_ELEMENTS = 1 << 22
# The real range of --n-resamples. Below 100 the tails of a 95% percentile interval hold about two
# resamples; above a million p-values resolve below 1e-6 (finer than any correction needs) while the
# bootstrap keeps one float per resample (8 MB at the limit) and each test takes seconds per comparison.
MIN_RESAMPLES = 100
# The defaults every command and stage uses (``SignificanceSettings`` reads them from here).
DEFAULT_TEST = "permutation"
DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 42
MAX_RESAMPLES = 1_000_000


@dataclass
class PairedTest:
    """One paired comparison of per-query values ``a`` (baseline) and ``b``; diff = mean(a - b)."""

    p_value: float
    ci_low: float
    ci_high: float
    mean_a: float
    mean_b: float
    diff: float
    n: int
    test: str


def _permutation_p_value(diffs: np.ndarray, n_resamples: int, rng: np.random.Generator) -> float:
    n = len(diffs)
    total = diffs.sum()
    # Sums that are equal in exact arithmetic may differ in the last bits; count them as ties.
    observed = abs(total) - 1e-10 * np.abs(diffs).sum()
    if 2**n <= n_resamples:  # few queries: enumerate every sign flip, an exact p-value
        flips = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        null = total - 2.0 * (flips @ diffs)
        return float(np.mean(np.abs(null) >= observed))
    rows = max(1, RESAMPLE_BATCH_ELEMENTS // n)
    extreme = 0
    for start in range(0, n_resamples, rows):
        flips = rng.integers(0, 2, size=(min(rows, n_resamples - start), n), dtype=np.int8)
        null = total - 2.0 * (flips @ diffs)
        extreme += int(np.count_nonzero(np.abs(null) >= observed))
    # The observed assignment is one of the possible ones: (extreme + 1) / (n_resamples + 1).
    return (extreme + 1) / (n_resamples + 1)


def _scipy_p_value(test: str, a: np.ndarray, b: np.ndarray) -> float:
    from scipy import stats

    if not np.any(a - b):
        return 1.0  # identical systems: scipy returns NaN, there is no evidence of a difference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy warns on near-constant differences
        result = stats.ttest_rel(a, b) if test == "ttest" else stats.wilcoxon(a, b)
    # NaN means the test is undefined (e.g. a single query): no evidence of a difference.
    return 1.0 if np.isnan(result.pvalue) else float(result.pvalue)


def bootstrap_interval(
    values: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values``; the one bootstrap every output uses.

    Seeded with ``numpy.random.default_rng(seed)``: same values and seed, same interval. Resamples are
    drawn in chunks of at most ``RESAMPLE_BATCH_ELEMENTS`` values, so memory holds one chunk plus one
    mean per resample, whatever the number of queries (the draws are those of ``scipy.stats.bootstrap``
    with ``batch`` set alike, so intervals equal earlier releases').
    """
    from scipy import stats

    data = np.asarray(values, dtype=np.float64)
    if data.ndim != 1 or data.size == 0:
        raise HarnessError("a bootstrap interval needs a 1-D array of at least one value")
    if np.ptp(data) == 0:  # every resample has the same mean
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    rows = max(1, RESAMPLE_BATCH_ELEMENTS // len(data))
    means = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, rows):
        stop = min(start + rows, n_resamples)
        picks = rng.integers(0, len(data), size=(stop - start, len(data)))
        means[start:stop] = data[picks].mean(axis=-1)
    tail = (1 - confidence) / 2
    # scipy's quantile, not numpy's: its interpolation rounds alike, so the bounds match to the last bit.
    low, high = stats.quantile(means, np.array([tail, 1 - tail]))
    return float(low), float(high)


def paired_test(
    a: np.ndarray,
    b: np.ndarray,
    *,
    test: str = DEFAULT_TEST,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> PairedTest:
    """Two-sided paired test of a vs b plus a percentile-bootstrap CI of mean(a - b).

    Same inputs and seed give the same p-value and interval.
    """
    if test not in TESTS:
        raise HarnessError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    if not MIN_RESAMPLES <= n_resamples <= MAX_RESAMPLES:
        raise HarnessError(
            f"n_resamples must be from {MIN_RESAMPLES:,} to {MAX_RESAMPLES:,}, got {n_resamples:,}"
        )
    if not 0 < confidence < 1:
        raise HarnessError(f"confidence must be between 0 and 1, got {confidence}")
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise HarnessError(f"paired values must be two 1-D arrays of one length, got {a.shape} and {b.shape}")
    if len(a) == 0:
        raise HarnessError("a paired test needs at least one query")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise HarnessError("paired values must be finite numbers")
    diffs = a - b
    if test == "permutation":
        # A stream of its own, so the sign flips do not replay the bootstrap's draws.
        permutation_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        p_value = _permutation_p_value(diffs, n_resamples, permutation_rng)
    else:
        p_value = _scipy_p_value(test, a, b)
    ci_low, ci_high = bootstrap_interval(diffs, confidence=confidence, n_resamples=n_resamples, seed=seed)
    return PairedTest(
        p_value=p_value,
        ci_low=ci_low,
        ci_high=ci_high,
        mean_a=float(a.mean()),
        mean_b=float(b.mean()),
        diff=float(diffs.mean()),
        n=len(a),
        test=test,
    )


def adjust_pvalues(p_values: Sequence[float], method: str = "holm") -> list[float]:
    """Family-wise error control: Holm's step-down (default), Bonferroni, or none."""
    if method not in CORRECTIONS:
        raise HarnessError(f"unknown correction {method!r}; choose one of {', '.join(CORRECTIONS)}")
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    if method == "none" or m == 0:
        return p.tolist()
    if method == "bonferroni":
        return np.minimum(p * m, 1.0).tolist()
    # Holm: the i-th smallest p (0-based) is scaled by m - i, and adjusted values never decrease.
    order = np.argsort(p, kind="stable")
    scaled = np.maximum.accumulate((m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(scaled, 1.0)
    return adjusted.tolist()
