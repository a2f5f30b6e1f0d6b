"""Is a difference between two systems real? Paired tests, bootstrap CIs, multiple comparisons.

Per-query metric values come from :mod:`harness.evaluation.metrics`. The default test is the two-sided
paired permutation (randomization) test: under the null hypothesis the sign of each
query's difference is arbitrary, so the observed mean difference is compared with the
means obtained by flipping signs at random (all 2^n flips when that is no more than the
number of resamples). The paired t-test and Wilcoxon signed-rank test come from scipy.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from harness.core.errors import HarnessError
from harness.evaluation.metrics import as_qrels, empty_ranking_value, evaluate, parse_metrics
from harness.evaluation.trec import Qrels, Run

TESTS = ("permutation", "ttest", "wilcoxon")
CORRECTIONS = ("holm", "bonferroni", "none")
# Resamples x queries held in memory at once; fixed so results do not depend on the machine.
_BATCH_ELEMENTS = 1 << 22


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
    rows = max(1, _BATCH_ELEMENTS // n)
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


def _bootstrap_ci(
    diffs: np.ndarray, n_resamples: int, confidence: float, rng: np.random.Generator
) -> tuple[float, float]:
    from scipy import stats

    if np.ptp(diffs) == 0:  # every resample has the same mean
        return float(diffs[0]), float(diffs[0])
    result = stats.bootstrap(
        (diffs,),
        np.mean,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        batch=max(1, _BATCH_ELEMENTS // len(diffs)),
        rng=rng,
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def paired_test(
    a: np.ndarray,
    b: np.ndarray,
    *,
    test: str = "permutation",
    n_resamples: int = 10000,
    seed: int = 42,
    confidence: float = 0.95,
) -> PairedTest:
    """Two-sided paired test of a vs b plus a percentile-bootstrap CI of mean(a - b).

    Same inputs and seed give the same p-value and interval.
    """
    if test not in TESTS:
        raise HarnessError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    if n_resamples < 1:
        raise HarnessError(f"n_resamples must be at least 1, got {n_resamples}")
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
    permutation_rng, bootstrap_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    if test == "permutation":
        p_value = _permutation_p_value(diffs, n_resamples, permutation_rng)
    else:
        p_value = _scipy_p_value(test, a, b)
    ci_low, ci_high = _bootstrap_ci(diffs, n_resamples, confidence, bootstrap_rng)
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


def compare_runs(
    qrels: Qrels | str | os.PathLike,
    runs: dict[str, Run | str | os.PathLike],
    metrics: Sequence[str],
    *,
    ks: Sequence[int] | None = None,
    test: str = "permutation",
    n_resamples: int = 10000,
    seed: int = 42,
    alpha: float = 0.05,
    correction: str = "holm",
    relevance_level: int = 1,
    complete: bool = False,
) -> dict:
    """Compare every run with the first (the baseline) on every metric; JSON-ready result.

    Queries are paired, in qid order, over the judged queries any run answered (all judged
    queries with ``complete``); a run missing one of them scores it as an empty ranking (0),
    and the output lists those queries per run. The correction covers all metric x run comparisons;
    the CI is at confidence ``1 - alpha`` and is not adjusted.
    """
    if len(runs) < 2:
        raise HarnessError(f"compare needs at least 2 runs, got {len(runs)}")
    if test not in TESTS:
        raise HarnessError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    if correction not in CORRECTIONS:
        raise HarnessError(f"unknown correction {correction!r}; choose one of {', '.join(CORRECTIONS)}")
    if not 0 < alpha < 1:
        raise HarnessError(f"alpha must be between 0 and 1, got {alpha}")
    names = parse_metrics(metrics, ks)
    qrels = as_qrels(qrels)
    evaluations = {
        label: evaluate(qrels, run, names, relevance_level=relevance_level) for label, run in runs.items()
    }
    if complete:
        paired = sorted(qrels)
    else:
        paired = sorted({qid for evaluation in evaluations.values() for qid in evaluation.per_query})

    values: dict[str, dict[str, np.ndarray]] = {}
    run_info: dict[str, dict] = {}
    for label, evaluation in evaluations.items():
        missing = [qid for qid in paired if qid not in evaluation.per_query]
        run_info[label] = {
            "queries_with_results": len(paired) - len(missing),
            "missing_queries_scored_as_empty": {"count": len(missing), "qids": missing},
            "run_queries_without_qrels_skipped": len(evaluation.run_queries_without_qrels),
        }
        values[label] = {
            metric: np.array(
                [evaluation.per_query.get(qid, {}).get(metric, empty_ranking_value(metric)) for qid in paired]
            )
            for metric in names
        }

    labels = list(runs)
    baseline = labels[0]
    comparisons = []
    for metric in names:
        for label in labels[1:]:
            result = paired_test(
                values[baseline][metric],
                values[label][metric],
                test=test,
                n_resamples=n_resamples,
                seed=seed,
                confidence=1 - alpha,
            )
            row = {"metric": metric, "a": baseline, "b": label}
            row.update({key: value for key, value in asdict(result).items() if key != "test"})
            comparisons.append(row)
    for row, adjusted in zip(
        comparisons, adjust_pvalues([row["p_value"] for row in comparisons], correction), strict=True
    ):
        row["p_value_adjusted"] = adjusted
        row["significant"] = bool(adjusted < alpha)

    return {
        "baseline": baseline,
        "metrics": names,
        "n_queries": len(paired),
        "runs": run_info,
        "settings": {
            "test": test,
            "two_sided": True,
            "n_resamples": n_resamples,
            "seed": seed,
            "alpha": alpha,
            "correction": correction,
            "n_comparisons": len(comparisons),
            "confidence_interval": f"{1 - alpha:.0%} percentile bootstrap of mean(A - B), not adjusted",
            "paired_queries": "all judged queries" if complete else "judged queries answered by any run",
            "missing_query_value": "empty ranking: 0 (gmap: log(1e-5))",
            "gmap_scale": "per-query log(AP), as trec_eval",
            "relevance_level": relevance_level,
        },
        "comparisons": comparisons,
    }
