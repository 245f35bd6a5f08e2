"""Judge-vs-people agreement and threshold calibration (judge.metrics._label_agreement), checked
against hand-derived values."""

from __future__ import annotations

import numpy as np
import pytest

from judge.metrics import (
    MIN_CALIBRATION_LABELS,
    AgreementItem,
    CalibrationError,
    agreement_figures,
    calibrate_threshold,
    label_agreement,
    reviewer_agreement,
)

# judge, human, P(yes), template, audit
_ITEMS = [
    AgreementItem(1, 1, 0.9, "a", True),
    AgreementItem(1, 1, 0.8, "a", False),
    AgreementItem(0, 0, 0.2, "a", True),
    AgreementItem(1, 0, 0.6, "b", False),
    AgreementItem(0, 1, 0.3, "b", True),
    AgreementItem(0, 0, 0.1, "b", False),
]


def test_figures_equal_a_hand_computation() -> None:
    f = agreement_figures(_ITEMS, resamples=200, seed=1)
    # rows human 0/1, columns judge 0/1
    assert f.confusion == [[2, 1], [1, 2]]
    assert f.accuracy == pytest.approx(4 / 6, abs=1e-6)
    # p_o = 4/6, p_e = (3*3 + 3*3) / 36 = 0.5 -> kappa = (2/3 - 1/2) / (1/2) = 1/3
    assert f.kappa == pytest.approx(1 / 3, abs=1e-6)
    # relevant P(yes) .9 .8 .3 vs not .2 .6 .1: 8 of 9 pairs ordered right
    assert f.auc == pytest.approx(8 / 9, abs=1e-6)
    assert f.kappa_ci is not None and f.kappa_ci[0] <= f.kappa <= f.kappa_ci[1]
    assert agreement_figures(_ITEMS, resamples=200, seed=1) == f  # seeded


def test_report_per_template_audit_subset_and_note() -> None:
    r = label_agreement(_ITEMS, resamples=100)
    assert set(r.per_template) == {"a", "b"}
    assert r.per_template["a"].accuracy == 1.0 and r.per_template["a"].n == 3
    assert r.per_template["b"].accuracy == pytest.approx(1 / 3, abs=1e-6)
    # audit items: (1,1) (0,0) (0,1) -> accuracy 2/3
    assert r.audit.n == 3 and r.audit.accuracy == pytest.approx(2 / 3, abs=1e-6)
    assert "audit" in r.note and "understates" in r.note
    d = r.as_dict()
    assert d["overall"]["confusion"]["matrix"] == [[2, 1], [1, 2]]


def test_undefined_figures_say_why() -> None:
    f = agreement_figures([AgreementItem(1, 1, None), AgreementItem(1, 1, None)], resamples=10)
    assert f.kappa is None and "undefined" in f.undefined["kappa"]
    assert f.auc is None and "P(yes)" in f.undefined["auc"]
    empty = agreement_figures([], resamples=10)
    assert empty.n == 0 and empty.accuracy is None and empty.confusion == [[0, 0], [0, 0]]


def test_human_human_kappa_on_shared_items() -> None:
    labels = {
        "i1": {"ann": 1, "bob": 1},
        "i2": {"ann": 0, "bob": 1},
        "i3": {"ann": 0, "bob": 0, "cy": 0},
        "i4": {"ann": 1, "bob": 1},
    }
    pairs = reviewer_agreement(labels)
    ab = pairs[0]
    # ann 1 0 0 1, bob 1 1 0 1: p_o = 3/4, p_e = (2*3 + 2*1)/16 = 0.5 -> kappa 0.5
    assert (ab.a, ab.b, ab.n, ab.agreement) == ("ann", "bob", 4, 0.75)
    assert ab.kappa == pytest.approx(0.5)
    ann_cy = next(p for p in pairs if (p.a, p.b) == ("ann", "cy"))
    assert ann_cy.n == 1 and ann_cy.kappa is None and ann_cy.agreement == 1.0


def test_calibration_finds_the_known_optimal_threshold_on_a_separable_set() -> None:
    p = [i / 40 for i in range(40)]
    y = [1 if x >= 0.7 else 0 for x in p]
    r = calibrate_threshold(p, y, current_threshold=0.5, folds=5, seed=0)
    # every threshold in (0.675, 0.7] separates the classes; the candidate is the midpoint
    assert r.threshold == pytest.approx(0.6875)
    # at 0.5: 20 predicted yes, 12 truly yes -> p_o = 32/40, p_e = (20*12 + 20*28)/1600 = 0.5 -> 0.6
    assert r.kappa_before == pytest.approx(0.6)
    # held out, a fold that lacks the boundary items fits 0.675 or 0.7 and misses one of them
    assert r.kappa_after is not None and 0.9 < r.kappa_after <= 1.0
    assert r.n == 40 and r.positives == 12 and r.folds == 5


def test_calibration_recovers_a_noisy_threshold() -> None:
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 1, 600)
    y = (rng.uniform(0, 1, 600) < 1 / (1 + np.exp(-(p - 0.7) * 40))).astype(int)
    r = calibrate_threshold(p, y, current_threshold=0.5, folds=5, seed=0)
    assert abs(r.threshold - 0.7) < 0.05
    assert r.kappa_after is not None and r.kappa_before is not None and r.kappa_after > r.kappa_before


def test_calibration_refuses_too_few_labels_or_one_class() -> None:
    n = MIN_CALIBRATION_LABELS - 1
    with pytest.raises(CalibrationError, match="at least 30"):
        calibrate_threshold([0.5] * n, [1, 0] * (n // 2) + [1])
    with pytest.raises(CalibrationError, match="both classes"):
        calibrate_threshold([0.1 * (i % 10) for i in range(40)], [1] * 40)
