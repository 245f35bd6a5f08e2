"""The paired randomization test is exact (every sign assignment counted) while the non-zero
differences are few enough, so its p and every decision on it do not depend on the seed or
the resamples; past the limit it is Monte Carlo with its standard error, carried through
Holm, and a decision within that error of the level is said to be undecided."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from judge.metrics import (
    EXACT_LIMIT,
    compare_scores,
    exact_sign_flip_p,
    holm_adjust,
    holm_with_se,
    permutation_interval,
    permutation_test,
    significance,
)
from judge.systems import SystemComparison
from judge.systems._render import _verdict_sentence


def _brute_p(d: list[float] | np.ndarray) -> float:
    """Every one of the 2^n sign vectors, one by one (the definition, zeros included)."""
    x = np.asarray(d, dtype=np.float64)
    n = x.shape[0]
    threshold = abs(x.mean()) - 1e-12 * max(float(np.abs(x).mean()), 1e-300)
    hits = sum(abs(float(np.dot(s, x)) / n) >= threshold for s in itertools.product((1.0, -1.0), repeat=n))
    return hits / 2**n


def test_exact_p_by_hand_with_a_zero_and_a_tie() -> None:
    # d = 0.3, -0.1, 0.1, 0: the zero cannot move the mean; the 8 assignments of the other three
    # give sums +-(0.3), +-(0.3 + 0.1 - 0.1 = 0.3, a tie up to rounding), +-(0.5), +-(0.1).
    # |sum| >= 0.3 for 6 of 8: p = 0.75, whatever the seed and resamples.
    a = np.zeros(4)
    b = np.array([0.3, -0.1, 0.1, 0.0])
    for seed, resamples in ((0, 10), (1, 2000), (2, 10_000)):
        result = permutation_test(a, b, resamples=resamples, seed=seed)
        assert (result.p_value, result.se, result.method) == (0.75, 0.0, "exact")
    # 0.5, 0.5, 0.25: only +++ and --- reach |sum| 1.25: 2 / 8
    assert exact_sign_flip_p([0.5, 0.5, 0.25]) == 0.25
    # 0.1 + 0.2 - 0.3 is 5.6e-17, zero within the tolerance: every assignment as extreme
    assert exact_sign_flip_p([0.1, 0.2, -0.3]) == 1.0


def test_all_zero_one_difference_and_symmetry() -> None:
    assert permutation_test(np.ones(50), np.ones(50), resamples=3, seed=9).p_value == 1.0  # 0 non-zero
    assert permutation_test([0.2], [0.9]).p_value == 1.0  # +-0.7 are both as extreme
    lone = np.zeros(40)
    lone[7] = 0.4  # one non-zero among 40: exact although n is past the limit
    assert permutation_test(np.zeros(40), lone).method == "exact"
    assert exact_sign_flip_p(lone) == 1.0
    rng = np.random.default_rng(5)
    for _ in range(20):
        a, b = rng.random(12), rng.random(12)
        p = permutation_test(a, b).p_value
        assert permutation_test(b, a).p_value == p  # b vs a: every sum negated, the same |sums|
        assert exact_sign_flip_p(-(b - a)) == p


def test_exact_p_is_the_enumeration_of_every_assignment() -> None:
    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 5, 8, 11):
        for _ in range(15):
            # one decimal: many ties, and a few zeros
            d = np.round(rng.normal(0.1, 0.5, size=n), 1) * (rng.random(n) < 0.8)
            assert exact_sign_flip_p(d) == _brute_p(d), d


def test_exact_agrees_with_monte_carlo_within_its_error() -> None:
    rng = np.random.default_rng(4)
    d = rng.normal(0.08, 0.3, size=EXACT_LIMIT)  # at the limit: exact
    exact = permutation_test(np.zeros(EXACT_LIMIT), d)
    assert exact.method == "exact" and 0.02 < exact.p_value < 0.98
    signs = np.where(rng.random((200_000, EXACT_LIMIT)) < 0.5, -1.0, 1.0)
    threshold = abs(d.mean()) - 1e-12 * float(np.abs(d).mean())
    simulated = float(np.mean(np.abs(signs @ d) / EXACT_LIMIT >= threshold))
    assert abs(simulated - exact.p_value) < 4 * math.sqrt(exact.p_value * (1 - exact.p_value) / 200_000)
    # one more non-zero difference: Monte Carlo, the standard error beside its p
    wide = np.append(d, 0.05)
    mc = permutation_test(np.zeros(wide.shape[0]), wide, resamples=4000, seed=3)
    assert mc.method == "monte carlo"
    assert mc.se == pytest.approx(math.sqrt(mc.p_value * (1 - mc.p_value) / 4000))
    assert abs(mc.p_value - exact.p_value) < 4 * mc.se + 0.01  # 0.05 moves the mean a little


def test_the_interval_inverts_the_exact_test() -> None:
    rng = np.random.default_rng(8)
    for _ in range(6):
        n = int(rng.integers(6, 11))
        a = rng.uniform(size=n)
        b = a + rng.normal(0.15, 0.2, size=n)
        low, high = permutation_interval(a, b, resamples=50, seed=1)
        assert (low, high) == permutation_interval(a, b, resamples=5000, seed=2)  # no seed in it
        assert (low <= 0 <= high) == (permutation_test(a, b).p_value >= 0.05)
        d = b - a
        for bound, outward in ((low, -1.0), (high, 1.0)):
            if math.isfinite(bound):
                step = 1e-9 * float(np.abs(d).max())
                assert _brute_p(d - bound) >= 0.05  # the bound is not rejected
                assert _brute_p(d - (bound + outward * step)) < 0.05  # just past it is


def test_holm_carries_the_monte_carlo_error_with_its_multiplier() -> None:
    # sorted: 0.01 x 3 = 0.03 (se 3 x 0.001), 0.03 x 2 = 0.06 (exact: se 0), 0.04 x 1 -> 0.06 (se 0)
    p, se = holm_with_se([0.01, 0.04, 0.03], [0.001, 0.002, 0.0])
    assert p.tolist() == pytest.approx([0.03, 0.06, 0.06])
    assert se.tolist() == pytest.approx([0.003, 0.0, 0.0])
    a, b = np.zeros(35), np.linspace(-0.02, 0.1, 35)  # 35 non-zero: Monte Carlo
    c = compare_scores(a, b, resamples=1000, seed=0)
    few = np.zeros(35)
    # 4 non-zero: exact. With the first +, sums 0.1 +-0.1 +-0.05 +-0.02 = 0.27, 0.23, 0.17, 0.13,
    # 0.07, 0.03, -0.03, -0.07: 6 of 8 reach |0.07|, p = 0.75
    few[:4] = [0.1, -0.1, 0.05, 0.02]
    adjusted, other = holm_adjust([c, compare_scores(a, few, resamples=1000, seed=0)])
    assert c.p_permutation_method == "monte carlo" and c.p_permutation_se > 0
    assert (other.p_permutation_method, other.p_permutation, other.p_permutation_se) == ("exact", 0.75, 0.0)
    # c's p is the smaller: Holm doubles it, and its error
    assert adjusted.p_permutation_holm == pytest.approx(2 * c.p_permutation)
    assert adjusted.p_permutation_holm_se == pytest.approx(2 * c.p_permutation_se)
    assert other.p_permutation_holm == 0.75 and other.p_permutation_holm_se == 0.0


def test_a_monte_carlo_p_within_its_error_of_alpha_is_undecided() -> None:
    assert significance(0.049, 0.0, 0.05) == "significant"  # exact: decided however close
    assert significance(0.0501, None, 0.05) == "not significant"
    assert significance(0.049, 0.002, 0.05) == "undecided"  # 0.001 from alpha, 2 se = 0.004
    assert significance(0.054, 0.002, 0.05) == "undecided"
    assert significance(0.03, 0.002, 0.05) == "significant"
    assert significance(0.08, 0.002, 0.05) == "not significant"
    assert significance(None, None, 0.05) == "not significant"
    c = SystemComparison(
        baseline="base", system="new", measure="map", n=40, baseline_mean=0.3, system_mean=0.34,
        diff=0.04, p_value=0.0098, p_holm=0.049, t_test_p=0.01, t_test_p_holm=0.05, ci_low=0.01,
        ci_high=0.07, p_method="monte carlo", p_value_se=0.0006, p_holm_se=0.003,
        wins=25, ties=0, losses=15, order_stability=None,
    )  # fmt: skip
    assert c.significance(0.05) == "undecided"
    text = _verdict_sentence(c, 0.05, 5)
    assert text.startswith("new is undecided against base on map (Holm-adjusted over 5 comparisons p=0.0490")
    assert "undecided: p within Monte Carlo error of 0.05; raise --resamples" in text
    assert "randomization test p=0.0098 (Monte Carlo, se 0.0006)" in text
    exact = c.model_copy(update={"p_method": "exact", "p_value_se": 0.0, "p_holm_se": 0.0})
    assert _verdict_sentence(exact, 0.05, 5).startswith("new is better than base on map")


def test_the_experiment_answer_and_the_nightly_drop_say_undecided_too() -> None:
    from types import SimpleNamespace

    from judge.systems._engine_nightly import _measure_rows
    from judge.systems._sweep import _versus_baseline

    near = SystemComparison(
        baseline="base", system="new", measure="ndcg_cut_10", n=40, baseline_mean=0.34, system_mean=0.30,
        diff=-0.04, p_value=0.048, p_holm=0.048, t_test_p=0.01, t_test_p_holm=0.01, ci_low=-0.07,
        ci_high=-0.01, p_method="monte carlo", p_value_se=0.002, p_holm_se=0.002,
        wins=15, ties=0, losses=25, order_stability=None,
    )  # fmt: skip
    exact = near.model_copy(update={"p_method": "exact", "p_value_se": 0.0, "p_holm_se": 0.0})
    report = SimpleNamespace(conventions={"baseline": "base", "confidence": 0.95}, comparisons=[near])
    assert _versus_baseline(report, "new", "ndcg_cut_10") == (  # type: ignore[arg-type]
        "worse by -0.0400 than base, undecided: p within Monte Carlo error of 0.05; raise --resamples "
        "(Holm p 0.0480 ± 0.0020)"
    )
    report.comparisons = [exact]
    assert _versus_baseline(report, "new", "ndcg_cut_10") == (  # type: ignore[arg-type]
        "worse by -0.0400 than base, significant (Holm p 0.0480)"
    )
    rows = _measure_rows(SimpleNamespace(report=SimpleNamespace(comparisons=[near])), 0.05)  # type: ignore[arg-type]
    assert (rows["ndcg_cut_10"]["dropped"], rows["ndcg_cut_10"]["undecided"]) == (False, True)
    rows = _measure_rows(SimpleNamespace(report=SimpleNamespace(comparisons=[exact])), 0.05)  # type: ignore[arg-type]
    assert (rows["ndcg_cut_10"]["dropped"], rows["ndcg_cut_10"]["undecided"]) == (True, False)
