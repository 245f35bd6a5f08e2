"""Agreement measures against values derived by hand (derivations in the comments)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from judge.metrics import (
    AgreementUndefinedError,
    binary_kappa,
    cohen_kappa,
    confusion_matrix,
    exact_agreement,
    kendall_tau,
    krippendorff_alpha,
    roc_auc,
    spearman_rho,
)

# Small example used throughout: A = [0, 1, 2], B = [0, 2, 2].
A = [0, 1, 2]
B = [0, 2, 2]


def test_confusion_matrix_rows_are_first_rater() -> None:
    assert confusion_matrix(A, B).tolist() == [[1, 0, 0], [0, 0, 1], [0, 0, 1]]
    # An explicit label set adds empty rows/columns.
    assert confusion_matrix(A, B, labels=[0, 1, 2, 3]).tolist() == [
        [1, 0, 0, 0],
        [0, 0, 1, 0],
        [0, 0, 1, 0],
        [0, 0, 0, 0],
    ]


def test_confusion_matrix_empty_and_unknown_label() -> None:
    assert confusion_matrix([], []).shape == (0, 0)
    assert confusion_matrix([], [], labels=[0, 1]).tolist() == [[0, 0], [0, 0]]
    with pytest.raises(ValueError, match="not in 'labels'"):
        confusion_matrix([0, 5], [0, 1], labels=[0, 1])


def test_exact_agreement() -> None:
    assert exact_agreement(A, B) == pytest.approx(2 / 3)
    with pytest.raises(AgreementUndefinedError):
        exact_agreement([], [])


def test_cohen_kappa_unweighted_by_hand() -> None:
    # po = 2/3; marginals A = (1/3, 1/3, 1/3), B = (1/3, 0, 2/3); pe = 1/9 + 2/9 = 1/3;
    # kappa = (2/3 - 1/3) / (1 - 1/3) = 1/2.
    assert cohen_kappa(A, B) == pytest.approx(0.5)


def test_cohen_kappa_weighted_by_hand() -> None:
    # Quadratic: observed sum w*O/n = 1/3 (one item off by 1).
    # Expected: (1/3) * [pB0 * (0+1+4) + pB2 * (4+1+0)] = (1/3) * (5/3 + 10/3) = 5/3.
    # kappa_w = 1 - (1/3)/(5/3) = 0.8.
    assert cohen_kappa(A, B, weights="quadratic") == pytest.approx(0.8)
    # Linear: observed 1/3; expected (1/3) * [1/3 * 3 + 2/3 * 3] = 1; kappa = 2/3.
    assert cohen_kappa(A, B, weights="linear") == pytest.approx(2 / 3)


def test_weights_use_label_values_not_indices() -> None:
    # Labels {0, 1, 3}: A = [0, 1, 3], B = [1, 1, 3]. Observed (0-1)^2 / 3 = 1/3.
    # Expected (1/3) * [2/3 * (1+0+4) + 1/3 * (9+4+0)] = 23/9, so kappa = 1 - 3/23 = 20/23
    # (index-based weights, as in scikit-learn, would give 2/3).
    assert cohen_kappa([0, 1, 3], [1, 1, 3], weights="quadratic") == pytest.approx(20 / 23)


def test_unused_labels_do_not_change_kappa() -> None:
    for weights in ("none", "linear", "quadratic"):
        base = cohen_kappa(A, B, weights=weights)  # type: ignore[arg-type]
        wide = cohen_kappa(A, B, weights=weights, labels=[0, 1, 2, 3])  # type: ignore[arg-type]
        assert wide == pytest.approx(base)


def test_cohen_kappa_krippendorff_binary_example() -> None:
    # Krippendorff (2011), two observers, binary: 5 (0,0), 3 (0,1), 1 (1,0), 1 (1,1).
    # po = 0.6; pA1 = 0.2, pB1 = 0.4; pe = 0.8*0.6 + 0.2*0.4 = 0.56; kappa = 0.04/0.44 = 1/11.
    a = [0, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    b = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    assert cohen_kappa(a, b) == pytest.approx(1 / 11)
    # alpha: coincidences o00 = 10, o01 = o10 = 4, o11 = 2; n0 = 14, n1 = 6, n = 20;
    # alpha = 1 - (n-1) * o01 / (n0 * n1) = 1 - 19*4/84 = 2/21 (Krippendorff's 0.095).
    assert krippendorff_alpha([a, b], level="nominal") == pytest.approx(2 / 21)


def test_kappa_perfect_and_opposite() -> None:
    assert cohen_kappa([0, 1, 2, 3], [0, 1, 2, 3]) == 1.0
    assert cohen_kappa([0, 1, 2, 3], [0, 1, 2, 3], weights="quadratic") == 1.0
    # Each rater used a single but different label: po = 0, pe = 0 -> kappa = 0.
    assert cohen_kappa([0, 0, 0], [1, 1, 1]) == 0.0


def test_kappa_undefined_raises_not_nan() -> None:
    # Both raters gave every item the same label: expected disagreement 0, kappa = 0/0.
    with pytest.raises(AgreementUndefinedError, match="expected disagreement is zero"):
        cohen_kappa([2, 2, 2], [2, 2, 2])
    with pytest.raises(AgreementUndefinedError, match="expected disagreement is zero"):
        cohen_kappa([2, 2], [2, 2], weights="quadratic")
    with pytest.raises(AgreementUndefinedError, match="no items"):
        cohen_kappa([], [])


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        cohen_kappa([0, 1], [0])
    with pytest.raises(ValueError, match="integers"):
        cohen_kappa([0.5, 1.0], [0, 1])
    with pytest.raises(ValueError, match="unknown kappa weights"):
        cohen_kappa([0, 1], [0, 1], weights="cubic")  # type: ignore[arg-type]


def test_binary_kappa_at_level() -> None:
    # Level 2: A -> [0,0,1,1], B -> [0,1,1,1]; po = 3/4; pA1 = 1/2, pB1 = 3/4;
    # pe = 1/2*1/4 + 1/2*3/4 = 1/2; kappa = (3/4 - 1/2) / (1/2) = 1/2.
    assert binary_kappa([0, 1, 2, 3], [1, 2, 2, 3], level=2) == pytest.approx(0.5)
    # Level 1: A -> [0,1,1,1], B -> [1,1,1,1]: B constant, pe = pA1 = 3/4, po = 3/4 -> 0.
    assert binary_kappa([0, 1, 2, 3], [1, 2, 2, 3], level=1) == pytest.approx(0.0)
    with pytest.raises(AgreementUndefinedError):
        binary_kappa([2, 3], [3, 2], level=2)  # all relevant on both sides


def test_alpha_levels_by_hand() -> None:
    # Coincidences for A, B: o00 = 2, o12 = o21 = 1, o22 = 2; n0 = 2, n1 = 1, n2 = 3, n = 6.
    data = [A, B]
    # nominal: 1 - (n-1) * 2 / (n^2 - sum n_c^2) = 1 - 5*2/22 = 6/11.
    assert krippendorff_alpha(data, level="nominal") == pytest.approx(6 / 11)
    # interval: delta = (c-k)^2; sum o*delta = 2; sum n_c n_k delta = 2*(2*1*1 + 2*3*4 + 1*3*1) = 58;
    # alpha = 1 - 5*2/58 = 24/29.
    assert krippendorff_alpha(data, level="interval") == pytest.approx(24 / 29)
    # ordinal: delta(c,k) = (sum_{g=c..k} n_g - (n_c + n_k)/2)^2:
    # d(0,1) = 1.5^2 = 2.25, d(0,2) = 3.5^2 = 12.25, d(1,2) = 2^2 = 4.
    # sum o*delta = 2*4 = 8; sum n_c n_k delta = 2*(2*2.25 + 6*12.25 + 3*4) = 180;
    # alpha = 1 - 5*8/180 = 7/9.
    assert krippendorff_alpha(data, level="ordinal") == pytest.approx(7 / 9)


def test_alpha_missing_values_and_unpairable_units() -> None:
    # Three raters, NaN = not labelled. Unit 2 has one label only and drops out.
    # Unit 1 (0, 0): o00 += 2. Unit 3 (0, 1, 1): ordered pairs weighted 1/(3-1):
    # o01 += 1, o10 += 1, o11 += 1. n0 = 3, n1 = 2, n = 5.
    # alpha = 1 - (n-1) * (o01 + o10) / (2 * n0 * n1) = 1 - 4*2/12 = 1/3 (any level: two values).
    nan = math.nan
    data = [[0, 1, 0], [0, nan, 1], [nan, nan, 1]]
    for level in ("nominal", "ordinal", "interval"):
        assert krippendorff_alpha(data, level=level) == pytest.approx(1 / 3)  # type: ignore[arg-type]


def test_alpha_undefined() -> None:
    with pytest.raises(AgreementUndefinedError, match="every pairable label"):
        krippendorff_alpha([[1, 1, 1], [1, 1, 1]], level="ordinal")
    with pytest.raises(AgreementUndefinedError, match="two raters"):
        krippendorff_alpha([[1, math.nan], [math.nan, 2]], level="ordinal")
    with pytest.raises(AgreementUndefinedError):
        krippendorff_alpha(np.zeros((2, 0)), level="ordinal")


def test_alpha_value_domain_orders_ordinal_values() -> None:
    # A domain containing an unused value changes nothing (zero counts add nothing).
    assert krippendorff_alpha([A, B], level="ordinal", value_domain=[0, 1, 2, 3]) == pytest.approx(7 / 9)
    with pytest.raises(ValueError, match="value_domain"):
        krippendorff_alpha([A, B], level="ordinal", value_domain=[0, 1])


def test_kendall_and_spearman_by_hand() -> None:
    # One discordant pair of six: tau = (5 - 1)/6 = 2/3. d = (0,1,1,0): rho = 1 - 6*2/(4*15) = 0.8.
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(2 / 3)
    assert spearman_rho([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    # Ties in y: nc = 2, nd = 0, one tie in y: tau-b = 2 / sqrt(3 * 2).
    assert kendall_tau([1, 2, 3], [1, 1, 2]) == pytest.approx(2 / math.sqrt(6))
    # rho on average ranks: x ranks (1,2,3), y ranks (1.5,1.5,3): Pearson = sqrt(3)/2.
    assert spearman_rho([1, 2, 3], [1, 1, 2]) == pytest.approx(math.sqrt(3) / 2)


def test_correlations_undefined() -> None:
    with pytest.raises(AgreementUndefinedError, match="constant"):
        kendall_tau([1, 2, 3], [0.5, 0.5, 0.5])
    with pytest.raises(AgreementUndefinedError, match="fewer than two"):
        spearman_rho([1.0], [2.0])


def test_roc_auc_rank_formula_with_ties() -> None:
    # Relevant scores {0.9, 0.8}, non-relevant {0.8, 0.1}: pairs win, win, tie (1/2), win -> 3.5/4.
    assert roc_auc([1, 0, 1, 0], [0.9, 0.8, 0.8, 0.1]) == pytest.approx(0.875)
    assert roc_auc([True, False], [0.2, 0.7]) == 0.0
    with pytest.raises(AgreementUndefinedError, match="need both"):
        roc_auc([1, 1], [0.2, 0.7])
    with pytest.raises(ValueError, match="0/1"):
        roc_auc([2, 0], [0.2, 0.7])
