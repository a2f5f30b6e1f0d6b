"""Paired tests against scipy, bootstrap CIs, Holm/Bonferroni, and run comparisons."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from harness.core.errors import HarnessError
from harness.evaluation.comparison import PAIRING_RULE, SignificanceSettings, compare_runs
from harness.evaluation.metrics import evaluate
from harness.evaluation.significance import adjust_pvalues, bootstrap_interval, paired_test


def _per_query_pair(seed: int, n: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Metric-like per-query values in [0, 1] with ties, and a second system shifted by ``shift``."""
    rng = np.random.default_rng(seed)
    a = np.round(rng.random(n), 2)
    b = np.clip(np.round(a + shift + rng.normal(0, 0.25, n), 2), 0, 1)
    return a, b


def _scipy_permutation_p(a: np.ndarray, b: np.ndarray, n_resamples: int, seed: int) -> float:
    result = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",  # paired: swap a_i and b_i
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(result.pvalue)


@pytest.mark.parametrize(("seed", "shift"), [(0, 0.12), (1, 0.05), (2, 0.0), (3, -0.08)])
def test_permutation_p_value_agrees_with_scipy_within_monte_carlo_error(seed: int, shift: float) -> None:
    a, b = _per_query_pair(seed, 60, shift)
    resamples = 10000
    ours = paired_test(a, b, n_resamples=resamples, seed=seed).p_value
    theirs = _scipy_permutation_p(a, b, resamples, seed + 100)
    p = (ours + theirs) / 2
    # Ours counts |null| >= |observed|; scipy doubles the smaller one-sided count (variance ~2p/B).
    standard_error = math.sqrt(p * (1 - p) / resamples + 2 * p / resamples)
    assert abs(ours - theirs) <= 5 * standard_error + 1e-4, (ours, theirs)


def test_small_samples_are_tested_exactly_like_scipy() -> None:
    a, b = _per_query_pair(5, 11, 0.1)  # 2^11 sign flips <= 10000 resamples: full enumeration
    ours = paired_test(a, b, n_resamples=10000).p_value
    assert ours == pytest.approx(_scipy_permutation_p(a, b, 10000, 0), abs=1e-12)
    assert paired_test(a, b, n_resamples=10000, seed=1).p_value == ours  # exact: no randomness


def test_same_seed_same_p_value() -> None:
    a, b = _per_query_pair(7, 80, 0.04)
    first = paired_test(a, b, seed=3)
    assert paired_test(a, b, seed=3) == first
    other = paired_test(a, b, seed=4)
    assert (other.p_value, other.ci_low) != (first.p_value, first.ci_low)


@pytest.mark.parametrize("seed", range(3))
def test_ttest_and_wilcoxon_are_scipys(seed: int) -> None:
    a, b = _per_query_pair(seed, 45, 0.06)
    assert paired_test(a, b, test="ttest").p_value == stats.ttest_rel(a, b).pvalue
    assert paired_test(a, b, test="wilcoxon").p_value == stats.wilcoxon(a, b).pvalue


def test_means_difference_and_bootstrap_interval() -> None:
    a, b = _per_query_pair(11, 400, 0.05)
    result = paired_test(a, b, confidence=0.95)
    assert (result.mean_a, result.mean_b, result.n) == (pytest.approx(a.mean()), pytest.approx(b.mean()), 400)
    assert result.diff == pytest.approx(a.mean() - b.mean())
    # With 400 queries the percentile bootstrap is close to the normal approximation.
    half_width = 1.959964 * np.std(a - b, ddof=1) / math.sqrt(len(a))
    assert result.ci_low == pytest.approx(result.diff - half_width, abs=0.1 * half_width)
    assert result.ci_high == pytest.approx(result.diff + half_width, abs=0.1 * half_width)
    wider = paired_test(a, b, confidence=0.99)
    assert wider.ci_low < result.ci_low < result.diff < result.ci_high < wider.ci_high


def test_identical_systems() -> None:
    a = np.array([0.1, 0.5, 0.5, 1.0, 0.0])
    for test in ("permutation", "ttest", "wilcoxon"):
        result = paired_test(a, a.copy(), test=test)
        assert (result.p_value, result.ci_low, result.ci_high, result.diff) == (1.0, 0.0, 0.0, 0.0)


def test_bad_arguments() -> None:
    a = np.array([0.1, 0.2, 0.3])
    with pytest.raises(HarnessError, match="unknown test"):
        paired_test(a, a, test="sign")
    with pytest.raises(HarnessError, match="one length"):
        paired_test(a, a[:2])
    with pytest.raises(HarnessError, match="at least one query"):
        paired_test(a[:0], a[:0])
    with pytest.raises(HarnessError, match="finite"):
        paired_test(a, np.array([0.1, np.nan, 0.3]))


# --- multiple comparisons ----------------------------------------------------------------------------------


def _holm_reference(p_values: list[float]) -> list[float]:
    """Holm's step-down procedure, written out one step at a time."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for step, index in enumerate(order):
        running = max(running, min(1.0, (m - step) * p_values[index]))
        adjusted[index] = running
    return adjusted


def test_holm_bonferroni_none() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # By hand: sorted 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> raised to 0.06.
    assert adjust_pvalues(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjust_pvalues(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert adjust_pvalues(p, "none") == p
    assert adjust_pvalues([0.3, 0.6], "bonferroni") == [0.6, 1.0]
    rng = random.Random(0)
    for _ in range(20):
        values = [rng.choice([rng.random(), rng.random() / 50, 0.02]) for _ in range(rng.randint(1, 12))]
        assert adjust_pvalues(values, "holm") == pytest.approx(_holm_reference(values))
    with pytest.raises(HarnessError, match="unknown correction"):
        adjust_pvalues(p, "fdr")


# --- comparing runs ------------------------------------------------------------------------------------------


def _three_runs() -> tuple[dict, dict]:
    rng = random.Random(3)
    qrels, runs = {}, {"A": {}, "B": {}, "C": {}}
    for q in range(60):
        qid = f"q{q}"
        relevant = [f"d{q}-{i}" for i in range(3)]
        qrels[qid] = {docid: 1 for docid in relevant}
        decoys = {f"x{i}": rng.random() for i in range(20)}
        for name, boost in (("A", 0.3), ("B", 0.6), ("C", 0.3)):
            runs[name][qid] = {**decoys, **{docid: rng.random() + boost for docid in relevant}}
    for q in range(0, 60, 6):
        del runs["C"][f"q{q}"]  # C misses ten queries
    qrels["never"] = {"z": 1}  # judged, answered by no run
    return qrels, runs


def test_compare_runs_pairs_queries_and_counts_missing_as_zero() -> None:
    qrels, runs = _three_runs()
    metrics = ["ndcg@10", "map", "mrr@5"]
    settings = SignificanceSettings(n_resamples=2000, seed=5)
    result = compare_runs(qrels, runs, metrics, settings=settings)
    assert result["baseline"] == "A" and result["n_queries"] == 60
    missing = result["runs"]["C"]["missing_queries_scored_as_empty"]
    assert missing["count"] == 10 and missing["qids"] == sorted(f"q{q}" for q in range(0, 60, 6))
    assert result["runs"]["B"]["missing_queries_scored_as_empty"]["count"] == 0
    assert result["pairing_rule"] == PAIRING_RULE
    rows = {(row["metric"], row["system"]): row for row in result["comparisons"]}
    assert len(rows) == 6
    per_query = {name: evaluate(qrels, run, metrics).per_query for name, run in runs.items()}
    paired = sorted(f"q{q}" for q in range(60))  # compare_runs pairs queries in qid order
    for (metric, other), row in rows.items():
        a = np.array([per_query["A"][qid][metric] for qid in paired])
        b = np.array([per_query[other].get(qid, {}).get(metric, 0.0) for qid in paired])
        # The system goes first: difference = system - baseline.
        expected = paired_test(b, a, n_resamples=2000, seed=5)
        assert row["p_value"] == expected.p_value and row["n_queries"] == 60
        assert (row["mean_baseline"], row["mean_system"], row["difference"]) == (
            expected.mean_b,
            expected.mean_a,
            expected.diff,
        )
        assert (row["ci_low"], row["ci_high"]) == (expected.ci_low, expected.ci_high)
    raw = [row["p_value"] for row in result["comparisons"]]
    adjusted = adjust_pvalues(raw, "holm")
    assert [row["p_value_adjusted"] for row in result["comparisons"]] == adjusted
    assert [row["significant"] for row in result["comparisons"]] == [p < 0.05 for p in adjusted]
    assert rows[("ndcg@10", "B")]["significant"] and rows[("ndcg@10", "B")]["difference"] > 0
    assert rows[("ndcg@10", "C")]["mean_system"] < rows[("ndcg@10", "C")]["mean_baseline"]
    assert result["settings"]["correction"] == "holm" and result["settings"]["n_comparisons"] == 6
    assert compare_runs(qrels, runs, metrics, settings=settings) == result


def test_compare_runs_complete_and_ttest() -> None:
    qrels, runs = _three_runs()
    settings = SignificanceSettings(test="ttest", correction="bonferroni")
    result = compare_runs(qrels, runs, ["map"], settings=settings, complete=True)
    assert result["n_queries"] == 61  # every judged query, including the one no run answered
    assert all(row["n_queries"] == 61 for row in result["comparisons"])
    assert result["runs"]["A"]["missing_queries_scored_as_empty"]["qids"] == ["never"]
    p = [row["p_value"] for row in result["comparisons"]]
    assert [row["p_value_adjusted"] for row in result["comparisons"]] == [min(1.0, 2 * value) for value in p]
    with pytest.raises(HarnessError, match="at least 2 runs"):
        compare_runs(qrels, {"A": runs["A"]}, ["map"])


def test_bootstrap_interval_is_seeded_and_shared_by_paired_test() -> None:
    a, b = _per_query_pair(13, 50, 0.05)
    interval = bootstrap_interval(a - b, confidence=0.9, n_resamples=3000, seed=8)
    assert bootstrap_interval(a - b, confidence=0.9, n_resamples=3000, seed=8) == interval
    result = paired_test(a, b, confidence=0.9, n_resamples=3000, seed=8)
    assert (result.ci_low, result.ci_high) == interval
    assert bootstrap_interval([0.5], seed=1) == (0.5, 0.5)
    with pytest.raises(HarnessError, match="at least one value"):
        bootstrap_interval([])


def test_settings_are_validated_before_any_test() -> None:
    qrels, runs = _three_runs()
    for bad, message in (
        (SignificanceSettings(test="sign"), "unknown test"),
        (SignificanceSettings(correction="fdr"), "unknown correction"),
        (SignificanceSettings(alpha=1.5), "alpha"),
    ):
        with pytest.raises(HarnessError, match=message):
            compare_runs(qrels, runs, ["map"], settings=bad)
