"""Significance tests: hand-checked permutation p-values, t-test, bootstrap, Holm."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from judge.metrics import (
    PairedTest,
    bootstrap_ci,
    compare_scores,
    holm,
    holm_adjust,
    paired_t_test,
    permutation_test,
)


def test_permutation_p_on_a_tiny_hand_example() -> None:
    # differences 1, 2, 3: of the 8 equally likely sign patterns only +++ and --- reach
    # |mean| >= 2, so the exact two-sided p is 2/8.
    a = np.array([0.0, 0.0, 0.0])
    b = np.array([1.0, 2.0, 3.0])
    result = permutation_test(a, b, resamples=20_000, seed=7)
    assert result.statistic == pytest.approx(2.0)
    assert (result.p_value, result.se, result.method) == (0.25, 0.0, "exact")  # every pattern counted


def test_permutation_p_formula_counts_ties_and_adds_one() -> None:
    # every flip of a zero difference is as extreme as the observed 0: p = 1
    assert permutation_test([0.3, 0.5], [0.3, 0.5], resamples=10, seed=1).p_value == 1.0
    # one query: every flip gives |mean| = 5 = observed
    assert permutation_test([1.0], [6.0], resamples=99, seed=1).p_value == 1.0
    # past the exact limit (40 non-zero differences) Monte Carlo: p is never below 1/(R+1)
    big = permutation_test(np.zeros(40), np.ones(40), resamples=999, seed=3)
    assert big.p_value == pytest.approx(1 / 1000) and big.method == "monte carlo"
    assert big.se == pytest.approx(math.sqrt(0.001 * 0.999 / 999))


def test_same_seed_same_p_values() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.random(30), rng.random(30)
    first = permutation_test(a, b, resamples=5000, seed=42)
    assert permutation_test(a, b, resamples=5000, seed=42) == first
    assert bootstrap_ci(b - a, seed=42, resamples=2000) == bootstrap_ci(b - a, seed=42, resamples=2000)
    assert compare_scores(a, b, seed=3, resamples=500) == compare_scores(a, b, seed=3, resamples=500)


def test_paired_t_test_matches_hand_computation() -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b = np.array([2.0, 4.0, 5.0, 5.0])
    d = b - a  # 1, 2, 2, 1: mean 1.5, sd sqrt(1/3)
    t = 1.5 / (math.sqrt(1 / 3) / 2)
    result = paired_t_test(a, b)
    assert result.statistic == pytest.approx(t)
    assert result.p_value == pytest.approx(2 * stats.t.sf(t, df=3))
    assert d.mean() == 1.5


def test_paired_t_test_degenerate_cases() -> None:
    assert paired_t_test([1.0, 2.0], [1.0, 2.0]) == PairedTest(statistic=0.0, p_value=1.0)
    single = paired_t_test([1.0], [2.0])
    assert math.isnan(single.p_value) and math.isnan(single.statistic)


def test_bootstrap_ci_brackets_the_mean_difference() -> None:
    d = np.array([0.1, 0.2, -0.05, 0.3, 0.15, 0.0, 0.25, 0.1])
    low, high = bootstrap_ci(d, resamples=4000, seed=0)
    assert d.min() <= low < d.mean() < high <= d.max()
    assert bootstrap_ci(np.array([0.2, 0.2, 0.2])) == (pytest.approx(0.2), pytest.approx(0.2))
    assert bootstrap_ci(np.array([0.5])) == (0.5, 0.5)


def test_holm_hand_checked() -> None:
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> max(0.06, 0.04)=0.06
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted.tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]).tolist() == [1.0, 1.0]
    assert holm([]).tolist() == []
    with_nan = holm([0.01, float("nan"), 0.02])
    assert (
        with_nan[0] == pytest.approx(0.02) and math.isnan(with_nan[1]) and with_nan[2] == pytest.approx(0.02)
    )


def test_compare_scores_and_holm_adjust() -> None:
    a = np.array([0.2, 0.4, 0.1, 0.5, 0.3])
    b = np.array([0.3, 0.5, 0.2, 0.6, 0.2])
    c = compare_scores(a, b, measure="map", baseline_name="A", system_name="B", resamples=1000, seed=0)
    assert (c.mean_baseline, c.mean_system) == (pytest.approx(0.3), pytest.approx(0.36))
    assert c.difference == pytest.approx(0.06)
    assert c.n == 5 and c.ci_low <= 0.06 <= c.ci_high
    adjusted = holm_adjust([c, c])
    assert adjusted[0].p_permutation_holm == pytest.approx(min(1.0, 2 * c.p_permutation))
    assert adjusted[0].p_t_test_holm == pytest.approx(min(1.0, 2 * c.p_t_test))


def test_input_validation() -> None:
    with pytest.raises(ValueError, match="equal length"):
        permutation_test([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no paired"):
        paired_t_test([], [])
    with pytest.raises(ValueError, match="resamples"):
        permutation_test([1.0], [2.0], resamples=0)
