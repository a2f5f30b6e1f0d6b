"""The comparison engine: pair per-query values of a baseline and a system, test, correct, report.

Every command that says whether two systems differ (``harness compare``, ``harness table --baseline``,
``harness report`` and ``harness qa-compare``) goes through here, so they pair queries the same way,
seed the statistics the same way and write the same keys. :mod:`harness.evaluation.significance` holds
the pure statistics; this module decides what is paired and assembles the result.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.core.errors import HarnessError
from harness.evaluation.metrics import (
    DEFAULT_SCORE_PRECISION,
    as_qrels,
    empty_ranking_value,
    evaluate,
    parse_metrics,
)
from harness.evaluation.significance import (
    CORRECTIONS,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    DEFAULT_TEST,
    MAX_RESAMPLES,
    MIN_RESAMPLES,
    TESTS,
    adjust_pvalues,
    paired_test,
)
from harness.evaluation.trec import Qrels, Run

# The one pairing rule (trec_eval -c's), printed or written by every output that reports a test.
PAIRING_RULE = (
    "queries paired over the judged queries any compared system answered (every judged query with "
    "--complete); a judged query missing from a system scores 0, an empty ranking (trec_eval -c)"
)
QA_PAIRING_RULE = (
    "questions paired by id over both files; a question missing from one file scores 0 for that system"
)
DIFFERENCE = "mean over paired queries of (system - baseline)"
# What ``harness compare`` tests by default: the headline metrics plus whole-ranking MAP and MRR@10.
COMPARE_METRICS = ("ndcg@10", "map", "recall@100", "mrr@10")


@dataclass(frozen=True)
class SignificanceSettings:
    """How a difference is tested: the paired test, its resamples and seed, alpha and the correction."""

    test: str = DEFAULT_TEST
    n_resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    alpha: float = 0.05
    correction: str = "holm"

    def validate(self) -> SignificanceSettings:
        """Fail before any test runs when a setting is out of range."""
        if self.test not in TESTS:
            raise HarnessError(f"unknown test {self.test!r}; choose one of {', '.join(TESTS)}")
        if self.correction not in CORRECTIONS:
            raise HarnessError(
                f"unknown correction {self.correction!r}; choose one of {', '.join(CORRECTIONS)}"
            )
        if not 0 < self.alpha < 1:
            raise HarnessError(f"--alpha must be between 0 and 1, got {self.alpha}")
        if not MIN_RESAMPLES <= self.n_resamples <= MAX_RESAMPLES:
            raise HarnessError(
                f"--n-resamples must be from {MIN_RESAMPLES:,} to {MAX_RESAMPLES:,}, got {self.n_resamples:,}"
            )
        # Each tail of the percentile interval needs resamples of its own.
        needed = math.ceil(2 / self.alpha)
        if self.n_resamples < needed:
            raise HarnessError(
                f"--n-resamples {self.n_resamples:,} is too few for --alpha {self.alpha:g}: the "
                f"{self.confidence:.2%} interval needs at least {needed:,} (raise --n-resamples or --alpha)"
            )
        return self

    @property
    def confidence(self) -> float:
        return 1 - self.alpha

    def confidence_interval(self) -> str:
        return f"{self.confidence:.0%} percentile bootstrap of mean(system - baseline), not adjusted"

    def describe(self) -> str:
        test = {
            "permutation": "paired permutation (randomisation) test",
            "ttest": "paired t-test",
            "wilcoxon": "Wilcoxon signed-rank test",
        }.get(self.test, f"paired {self.test} test")
        resamples = f", {self.n_resamples:,} resamples" if self.test == "permutation" else ""
        correction = "no correction" if self.correction == "none" else f"{self.correction} correction"
        return f"{test}{resamples}, two-sided, alpha = {self.alpha:g}, {correction}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Comparison:
    """One metric of one system against the baseline over the paired queries."""

    metric: str
    baseline: str
    system: str
    n_queries: int
    mean_baseline: float
    mean_system: float
    difference: float  # system - baseline
    ci_low: float
    ci_high: float
    p_value: float
    p_value_adjusted: float | None = None  # set by apply_correction over the whole family
    significant: bool = False
    missing: dict[str, list[str]] = field(default_factory=dict)  # label -> paired qids it lacked

    def to_json(self) -> dict[str, Any]:
        """Every field but ``missing`` (the outputs list missing queries per run, once)."""
        return {key: value for key, value in asdict(self).items() if key != "missing"}

    def table_cells(self) -> list[str]:
        """A, B, B-A, its interval, p, adjusted p and a ``*`` when significant: one printed table row."""
        return [
            f"{self.mean_baseline:.4f}",
            f"{self.mean_system:.4f}",
            f"{self.difference:+.4f}",
            f"[{self.ci_low:+.4f}, {self.ci_high:+.4f}]",
            f"{self.p_value:.4g}",
            f"{self.p_value_adjusted:.4g}",
            "*" if self.significant else "",
        ]


def pair_values(
    baseline: Mapping[str, float],
    system: Mapping[str, float],
    *,
    over: Iterable[str] | None = None,
    missing_value: float = 0.0,
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Query ids in sorted order and both systems' values on them, by :data:`PAIRING_RULE`.

    ``over`` is the judged queries any compared system answered (or, with ``--complete``, every judged
    query); without it, the queries either of these two answered.
    """
    qids = sorted(set(over) if over is not None else baseline.keys() | system.keys())
    a = np.array([baseline.get(qid, missing_value) for qid in qids], dtype=np.float64)
    b = np.array([system.get(qid, missing_value) for qid in qids], dtype=np.float64)
    return qids, a, b


def compare_values(
    metric: str,
    labels: tuple[str, str],
    baseline: Mapping[str, float],
    system: Mapping[str, float],
    settings: SignificanceSettings,
    *,
    over: Iterable[str] | None = None,
    missing_value: float = 0.0,
) -> Comparison:
    """Pair the per-query values of ``labels = (baseline, system)`` and test the difference."""
    qids, a, b = pair_values(baseline, system, over=over, missing_value=missing_value)
    if not qids:
        raise HarnessError(f"{labels[1]} vs {labels[0]} on {metric}: no query to pair")
    # paired_test's difference is first - second: the system goes first so difference = system - baseline.
    test = paired_test(
        b,
        a,
        test=settings.test,
        n_resamples=settings.n_resamples,
        seed=settings.seed,
        confidence=settings.confidence,
    )
    return Comparison(
        metric=metric,
        baseline=labels[0],
        system=labels[1],
        n_queries=test.n,
        mean_baseline=test.mean_b,
        mean_system=test.mean_a,
        difference=test.diff,
        ci_low=test.ci_low,
        ci_high=test.ci_high,
        p_value=test.p_value,
        missing={
            labels[0]: [qid for qid in qids if qid not in baseline],
            labels[1]: [qid for qid in qids if qid not in system],
        },
    )


def apply_correction(comparisons: Sequence[Comparison], settings: SignificanceSettings) -> None:
    """Adjust the p-values of one family of comparisons and decide significance at ``alpha``."""
    adjusted = adjust_pvalues([c.p_value for c in comparisons], settings.correction)
    for comparison, p_adjusted in zip(comparisons, adjusted, strict=True):
        comparison.p_value_adjusted = float(p_adjusted)
        comparison.significant = bool(p_adjusted < settings.alpha)


def compare_runs(
    qrels: Qrels | str | os.PathLike,
    runs: dict[str, Run | str | os.PathLike],
    metrics: Sequence[str],
    *,
    ks: Sequence[int] | None = None,
    settings: SignificanceSettings | None = None,
    relevance_level: int = 1,
    complete: bool = False,
    score_precision: str = DEFAULT_SCORE_PRECISION,
) -> dict[str, Any]:
    """Compare every run with the first (the baseline) on every metric; JSON-ready result.

    Queries are paired by :data:`PAIRING_RULE`; the output lists, per run, the paired queries it
    lacked. The correction covers all metric x run comparisons; the CI is at ``1 - alpha``, unadjusted.
    """
    settings = (settings or SignificanceSettings()).validate()
    if len(runs) < 2:
        raise HarnessError(f"compare needs at least 2 runs, got {len(runs)}")
    names = parse_metrics(metrics, ks)
    qrels = as_qrels(qrels)
    evaluations = {
        label: evaluate(
            qrels,
            run,
            names,
            relevance_level=relevance_level,
            score_precision=score_precision,
            diagnose=False,
        )
        for label, run in runs.items()
    }
    answered = sorted({qid for evaluation in evaluations.values() for qid in evaluation.per_query})
    paired = sorted(qrels) if complete else answered

    labels = list(runs)
    baseline = labels[0]
    comparisons: list[Comparison] = []
    for metric in names:
        base_values = _metric_values(evaluations[baseline].per_query, metric)
        for label in labels[1:]:
            comparisons.append(
                compare_values(
                    metric,
                    (baseline, label),
                    base_values,
                    _metric_values(evaluations[label].per_query, metric),
                    settings,
                    over=paired,
                    missing_value=empty_ranking_value(metric),
                )
            )
    apply_correction(comparisons, settings)

    run_info = {}
    for label, evaluation in evaluations.items():
        missing = [qid for qid in paired if qid not in evaluation.per_query]
        run_info[label] = {
            "queries_with_results": len(paired) - len(missing),
            "missing_queries_scored_as_empty": {"count": len(missing), "qids": missing},
            "run_queries_without_qrels_skipped": len(evaluation.run_queries_without_qrels),
        }
    return {
        "baseline": baseline,
        "metrics": names,
        "n_queries": len(paired),
        "pairing_rule": PAIRING_RULE,
        "runs": run_info,
        "settings": {
            **settings.to_json(),
            "two_sided": True,
            "n_comparisons": len(comparisons),
            "difference": DIFFERENCE,
            "confidence_interval": settings.confidence_interval(),
            "complete": complete,
            "missing_query_value": "empty ranking: 0 (gmap: log(1e-5))",
            "gmap_scale": "per-query log(AP), as trec_eval",
            "relevance_level": relevance_level,
            "score_precision": score_precision,
        },
        "comparisons": [comparison.to_json() for comparison in comparisons],
    }


def _metric_values(per_query: Mapping[str, Mapping[str, float]], metric: str) -> dict[str, float]:
    return {qid: values[metric] for qid, values in per_query.items() if metric in values}
