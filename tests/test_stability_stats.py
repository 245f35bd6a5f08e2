"""Pure statistics of the stability harness against hand-derived and reference values."""

from __future__ import annotations

import math

import krippendorff
import numpy as np
import pytest

from judge.stability import (
    bootstrap_mean_ci,
    coefficient_of_variation,
    deviation_rate,
    fleiss_kappa,
    fleiss_kappa_from_labels,
    flip_rate,
    krippendorff_alpha,
    queries_needed,
    relative_spread,
)

# Wikipedia, "Fleiss' kappa", worked example: 10 subjects, 14 raters, 5 categories.
WIKIPEDIA_TABLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_wikipedia_worked_example() -> None:
    # P-bar = 0.378, P_e = 0.213, kappa = (0.378 - 0.213) / (1 - 0.213) = 0.210
    assert fleiss_kappa(WIKIPEDIA_TABLE) == pytest.approx(0.20993, abs=5e-5)
    assert round(fleiss_kappa(WIKIPEDIA_TABLE), 3) == 0.210


def test_fleiss_kappa_from_labels_small_hand_example() -> None:
    # 2 raters x 4 subjects. Counts (no, yes): [0,2] [1,1] [2,0] [2,0].
    # P_i = 1, 0, 1, 1 -> P-bar = 3/4; p_no = 5/8, p_yes = 3/8 -> P_e = 34/64.
    # kappa = (3/4 - 34/64) / (1 - 34/64) = 7/15.
    labels = [["yes", "yes", "no", "no"], ["yes", "no", "no", "no"]]
    assert fleiss_kappa_from_labels(labels, ["no", "yes"]) == pytest.approx(7 / 15)
    table = [[0, 2], [1, 1], [2, 0], [2, 0]]
    assert fleiss_kappa(table) == pytest.approx(7 / 15)


def test_fleiss_kappa_perfect_undefined_and_empty() -> None:
    assert fleiss_kappa_from_labels([["yes", "no", "no"], ["yes", "no", "no"]]) == pytest.approx(1.0)
    # all ratings in one category: chance agreement is 1, kappa undefined
    assert math.isnan(fleiss_kappa_from_labels([["no", "no"], ["no", "no"]], ["no", "yes"]))
    assert math.isnan(fleiss_kappa(np.zeros((0, 2))))
    assert math.isnan(fleiss_kappa_from_labels([[], []]))


def test_fleiss_kappa_rejects_bad_tables() -> None:
    with pytest.raises(ValueError, match="same number of ratings"):
        fleiss_kappa([[1, 1], [2, 1]])
    with pytest.raises(ValueError, match="at least 2"):
        fleiss_kappa([[1, 0], [0, 1]])
    with pytest.raises(ValueError, match="not one of the categories"):
        fleiss_kappa_from_labels([["maybe"], ["yes"]], ["no", "yes"])


def test_krippendorff_nominal_hand_derived() -> None:
    # Same data as the kappa example, yes=1 no=0. Coincidences: o_yy = 2, o_yn = o_ny = 1,
    # o_nn = 4; n = 8, n_y = 3, n_n = 5. alpha = 1 - (n - 1) * 2 / (2 * n_y * n_n) = 8/15.
    data = [[1, 1, 0, 0], [1, 0, 0, 0]]
    assert krippendorff_alpha(data, level="nominal") == pytest.approx(8 / 15)


def test_krippendorff_matches_package_and_fleiss_relation() -> None:
    rng = np.random.default_rng(3)
    data = (rng.random((4, 60)) < 0.4).astype(float)
    ours = krippendorff_alpha(data, level="nominal")
    ref = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    assert ours == pytest.approx(ref)
    # Complete nominal data, hand-derived: alpha = 1 - (1 - P-bar) / (1 - sum n_c (n_c - 1) / (n (n - 1)))
    # where P-bar is Fleiss' observed agreement.
    m, n_units = data.shape
    counts = np.stack([(data == 0).sum(axis=0), (data == 1).sum(axis=0)], axis=1)
    p_bar = float(((counts * (counts - 1)).sum(axis=1) / (m * (m - 1))).mean())
    n = m * n_units
    n_c = counts.sum(axis=0)
    d_e = 1 - float((n_c * (n_c - 1)).sum()) / (n * (n - 1))
    assert ours == pytest.approx(1 - (1 - p_bar) / d_e)


def test_krippendorff_ordinal_with_missing_matches_package() -> None:
    data = np.array(
        [
            [3, 2, 0, 1, np.nan, 3, 2, 0],
            [3, 1, 0, 1, 2, 3, 2, 1],
            [2, 2, 0, np.nan, 2, 3, 3, 0],
        ]
    )
    ours = krippendorff_alpha(data, level="ordinal", value_domain=[0, 1, 2, 3])
    ref = krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal", value_domain=[0, 1, 2, 3])
    assert ours == pytest.approx(ref)
    assert 0.5 < ours < 1.0


def test_krippendorff_undefined_cases_are_nan() -> None:
    assert math.isnan(krippendorff_alpha([[1, 1, 1], [1, 1, 1]]))  # one value only
    assert math.isnan(krippendorff_alpha([[1, np.nan], [np.nan, 0]]))  # no unit rated twice
    with pytest.raises(ValueError, match="level"):
        krippendorff_alpha([[1, 0]], level="fuzzy")


def test_relative_spread_and_cv() -> None:
    assert relative_spread([0.5, 0.5, 0.5]) == 0.0
    assert relative_spread([0.49, 0.51]) == pytest.approx(0.04)
    assert relative_spread([0.0, 0.0]) == 0.0  # mean 0, nothing moved
    assert relative_spread([0.1, -0.1]) == math.inf  # mean 0, something moved
    assert relative_spread([]) == 0.0
    assert coefficient_of_variation([1.0, 2.0, 3.0]) == pytest.approx(0.5)  # sd 1 (ddof=1) / mean 2
    assert coefficient_of_variation([0.7]) == 0.0
    assert coefficient_of_variation([0.0, 0.0]) == 0.0
    assert coefficient_of_variation([0.1, -0.1]) == math.inf
    with pytest.raises(ValueError, match="finite"):
        relative_spread([0.1, math.nan])


def test_flip_and_deviation_rates() -> None:
    labels = [["y", "y", "n"], ["y", "n", "n"], ["y", "y", "y"]]
    # columns: (y,y,y) stable; (y,n,y) and (n,n,y) unstable -> 2/3; one off-mode label each -> 2/9
    assert flip_rate(labels) == pytest.approx(2 / 3)
    assert deviation_rate(labels) == pytest.approx(2 / 9)
    # a tie (2 raters, 2 labels) is one deviation whichever label is the mode
    assert deviation_rate([["a"], ["b"]]) == pytest.approx(1 / 2)
    assert flip_rate([[], []]) == 0.0
    assert deviation_rate([]) == 0.0
    with pytest.raises(ValueError, match="same number"):
        flip_rate([["a"], ["a", "b"]])


def test_bootstrap_interval_is_seeded_and_sensible() -> None:
    rng = np.random.default_rng(11)
    values = rng.normal(0.5, 0.2, size=400)
    a = bootstrap_mean_ci(values, seed=5)
    b = bootstrap_mean_ci(values, seed=5)
    assert a == b
    assert a.low < a.estimate < a.high
    assert a.estimate == pytest.approx(float(values.mean()))
    # bootstrap SE of a mean ~ s / sqrt(n); the 95% half-width ~ 1.96 SE
    se = float(values.std(ddof=1)) / math.sqrt(values.size)
    assert a.se == pytest.approx(se, rel=0.1)
    assert a.half_width == pytest.approx(1.96 * se, rel=0.15)
    assert a.n == 400 and a.confidence == 0.95


def test_bootstrap_degenerate_cases() -> None:
    const = bootstrap_mean_ci([0.3, 0.3, 0.3])
    assert (const.low, const.high, const.se, const.half_width) == (0.3, 0.3, 0.0, 0.0)
    one = bootstrap_mean_ci([0.8])
    assert (one.low, one.high, one.n) == (0.8, 0.8, 1)
    empty = bootstrap_mean_ci([])
    assert empty.n == 0 and math.isnan(empty.low) and math.isnan(empty.estimate)
    with pytest.raises(ValueError):
        bootstrap_mean_ci([0.1, 0.2], confidence=1.0)


def test_queries_needed_formula() -> None:
    # ceil(n * (h / t)^2)
    assert queries_needed(50, 0.04, 0.01) == 800
    assert queries_needed(50, 0.005, 0.01) == 13
    assert queries_needed(10, 0.01, 0.01) == 10
    assert queries_needed(10, 0.0, 0.01) == 2  # never below two queries
    assert queries_needed(1, 0.04, 0.01) is None
    assert queries_needed(50, 0.04, 0.0) is None
    assert queries_needed(50, math.nan, 0.01) is None
