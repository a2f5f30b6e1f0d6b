"""A subset's fidelity on hand-made numbers: Kendall tau-b (ties included) against scipy and a count by
hand, rank flips and the largest one, the bias, and what is said with too few systems."""

from __future__ import annotations

import itertools

import pytest
from scipy.stats import kendalltau

from harness.results.subset_fidelity import MIN_SYSTEMS_FOR_TAU, RankFlip, subset_fidelity


def tau_b_by_hand(first: list[float], second: list[float]) -> float:
    """Kendall's tau-b from its definition: (C - D) / sqrt((n0 - ties1) (n0 - ties2))."""
    concordant = discordant = ties_first = ties_second = 0
    for i, j in itertools.combinations(range(len(first)), 2):
        a, b = first[i] - first[j], second[i] - second[j]
        if a == 0:
            ties_first += 1
        if b == 0:
            ties_second += 1
        if a * b > 0:
            concordant += 1
        elif a * b < 0:
            discordant += 1
    pairs = len(first) * (len(first) - 1) // 2
    return (concordant - discordant) / ((pairs - ties_first) * (pairs - ties_second)) ** 0.5


FULL = {"a": 0.70, "b": 0.65, "c": 0.60, "d": 0.50, "e": 0.50}
SUBSET = {"a": 0.60, "b": 0.66, "c": 0.62, "d": 0.40, "e": 0.45}


def test_tau_b_with_ties_equals_scipy_and_the_definition():
    fidelity = subset_fidelity(SUBSET, FULL)
    names = sorted(FULL)
    full, subset = [FULL[n] for n in names], [SUBSET[n] for n in names]
    expected = kendalltau(full, subset, variant="b")
    assert fidelity.tau == pytest.approx(expected.statistic, abs=1e-12)
    assert fidelity.p_value == pytest.approx(expected.pvalue, abs=1e-12)
    assert fidelity.tau == pytest.approx(tau_b_by_hand(full, subset), abs=1e-12)
    # a tie on the full side (d, e) is not a discordant pair: tau-b is not the tau-a of 10 pairs
    assert fidelity.tau != pytest.approx((7 - 2) / 10)
    assert fidelity.tau_meaningful


def test_ties_on_both_sides():
    full = {"a": 0.5, "b": 0.5, "c": 0.3, "d": 0.1}
    subset = {"a": 0.4, "b": 0.4, "c": 0.4, "d": 0.2}
    fidelity = subset_fidelity(subset, full)
    names = sorted(full)
    expected = kendalltau([full[n] for n in names], [subset[n] for n in names], variant="b").statistic
    assert fidelity.tau == pytest.approx(expected, abs=1e-12)
    assert fidelity.tau == pytest.approx(tau_b_by_hand([full[n] for n in names], [subset[n] for n in names]))
    assert fidelity.flips == []  # ties are never flips


def test_flips_and_the_largest_one():
    fidelity = subset_fidelity(SUBSET, FULL)
    # a > b by .05 and a > c by .10 on the full dataset; the subset puts b and c above a.
    assert [(flip.better, flip.worse) for flip in fidelity.flips] == [("a", "c"), ("a", "b")]
    largest = fidelity.largest_flip
    assert isinstance(largest, RankFlip)
    assert largest.full_difference == pytest.approx(0.10)
    assert largest.subset_difference == pytest.approx(-0.02)
    # d and e tie on the full dataset: the subset's e > d is no flip
    assert ("e", "d") not in [(flip.better, flip.worse) for flip in fidelity.flips]


def test_bias_per_system_and_mean():
    fidelity = subset_fidelity(SUBSET, FULL)
    assert fidelity.bias == pytest.approx({name: SUBSET[name] - FULL[name] for name in FULL})
    assert fidelity.mean_bias == pytest.approx(sum(SUBSET.values()) / 5 - sum(FULL.values()) / 5)
    # systems keep the full dataset's order, best first
    assert fidelity.systems == ["a", "b", "c", "d", "e"]


def test_systems_on_one_side_only_do_not_count():
    fidelity = subset_fidelity({**SUBSET, "z": 0.9}, {**FULL, "y": 0.1})
    assert sorted(fidelity.systems) == sorted(FULL)
    assert fidelity.tau == pytest.approx(subset_fidelity(SUBSET, FULL).tau)


def test_perfect_agreement_and_full_reversal():
    full = {"a": 0.3, "b": 0.2, "c": 0.1}
    assert subset_fidelity({"a": 0.9, "b": 0.5, "c": 0.4}, full).tau == pytest.approx(1.0)
    reversed_order = subset_fidelity({"a": 0.1, "b": 0.2, "c": 0.3}, full)
    assert reversed_order.tau == pytest.approx(-1.0)
    assert len(reversed_order.flips) == 3
    assert reversed_order.largest_flip.better == "a" and reversed_order.largest_flip.worse == "c"


def test_too_few_systems():
    two = subset_fidelity({"a": 0.1, "b": 0.2}, {"a": 0.3, "b": 0.2})
    assert two.tau == pytest.approx(-1.0) and not two.tau_meaningful
    assert len(two.systems) < MIN_SYSTEMS_FOR_TAU
    one = subset_fidelity({"a": 0.1}, {"a": 0.3})
    assert one.tau is None and not one.tau_meaningful and one.flips == []
    assert one.mean_bias == pytest.approx(-0.2)
    constant = subset_fidelity({"a": 0.1, "b": 0.1, "c": 0.1}, {"a": 0.3, "b": 0.2, "c": 0.1})
    assert constant.tau is None  # a constant list has no order: scipy's NaN is reported as undefined
