"""Expected (probability-weighted) metrics: hand-derived values, brute force, threshold
independence and robustness to a small perturbation of every P(yes)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from judge.batch._records import summarize_records
from judge.judging._expected_verdicts import borderline_verdicts, expected_metrics, is_borderline
from judge.metrics import average_precision, ndcg
from judge.metrics._expected_ranking import (
    borderline_count,
    expected_average_precision,
    expected_gain_ndcg,
    expected_ndcg,
    poisson_binomial,
)


def _brute_force_eap(p: list[float]) -> float:
    """E[AP] by enumerating all 2^n labelings (label-free denominator; AP = 0 with none)."""
    total = 0.0
    for labels in itertools.product((0, 1), repeat=len(p)):
        weight = float(np.prod([q if r else 1.0 - q for q, r in zip(p, labels, strict=True)]))
        total += weight * average_precision(np.array(labels))
    return total


def test_expected_ap_three_passages_by_hand() -> None:
    # AP of each labeling (label-free denominator): 100 -> 1, 010 -> 1/2, 001 -> 1/3,
    # 110 -> 1, 101 -> (1 + 2/3)/2 = 5/6, 011 -> (1/2 + 2/3)/2 = 7/12, 111 -> 1, 000 -> 0.
    # p = (0.5, 0.5, 0.5): every labeling has weight 1/8 -> (12+6+4+12+10+7+12)/12/8 = 21/32.
    assert expected_average_precision([0.5, 0.5, 0.5]) == pytest.approx(21 / 32, abs=1e-12)
    # p = (0.8, 0.5, 0.25): weights 100 .3, 010 .075, 001 .025, 110 .3, 101 .1, 011 .025,
    # 111 .1, 000 .075 -> .3 + .0375 + .025/3 + .3 + .1*5/6 + .025*7/12 + .1 = 27/32.
    assert expected_average_precision([0.8, 0.5, 0.25]) == pytest.approx(27 / 32, abs=1e-12)


def test_expected_ap_matches_enumeration_and_hard_ap() -> None:
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 9):
        p = rng.uniform(0, 1, n).round(3).tolist()
        assert expected_average_precision(p) == pytest.approx(_brute_force_eap(p), abs=1e-12)
    # 0/1 probabilities are the hard AP; empty and all-zero lists are 0.
    rel = [1, 0, 0, 1, 1, 0]
    assert expected_average_precision(rel) == pytest.approx(average_precision(np.array(rel)), abs=1e-15)
    assert expected_average_precision([]) == 0.0
    assert expected_average_precision([0.0, 0.0]) == 0.0
    with pytest.raises(ValueError):
        expected_average_precision([0.2, 1.5])


def test_poisson_binomial_and_ndcg() -> None:
    assert poisson_binomial([0.5, 0.5]).tolist() == pytest.approx([0.25, 0.5, 0.25])
    assert poisson_binomial([]).tolist() == [1.0]
    # expected-gain NDCG: DCG(0.9, 0.1, 0.6) / DCG(0.9, 0.6, 0.1), log2 discounts
    dcg = 0.9 + 0.1 / np.log2(3) + 0.6 / 2
    ideal = 0.9 + 0.6 / np.log2(3) + 0.1 / 2
    assert expected_gain_ndcg([0.9, 0.1, 0.6]) == pytest.approx(dcg / ideal)
    assert expected_gain_ndcg([0.9, 0.1, 0.6], 1) == pytest.approx(1.0)
    assert expected_gain_ndcg([1, 0, 1], 10) == pytest.approx(ndcg(np.array([1, 0, 1]), k=10))
    assert expected_gain_ndcg([0.0, 0.0]) == 0.0


# Fixed P(yes) values of 4 queries, several close to the thresholds 0.55 and 0.60.
P_YES = [
    [0.93, 0.58, 0.21, 0.61, 0.05],
    [0.57, 0.12, 0.88, 0.59, 0.45, 0.66],
    [0.31, 0.56, 0.97, 0.08],
    [0.62, 0.54, 0.58, 0.11, 0.76],
]


def _record(qid: str, p_yes: list[float], threshold: float) -> dict[str, object]:
    verdicts = [
        {"index": i, "passage_id": f"{qid}-{i}", "verdict": "yes" if p >= threshold else "no", "p_yes": p}
        for i, p in enumerate(p_yes)
    ]
    rel = np.array([1 if v["verdict"] == "yes" else 0 for v in verdicts])
    return {
        "id": qid,
        "mode": "binary",
        "n_passages": len(verdicts),
        "unjudged": 0,
        "score": float(rel.mean()),
        "ap": average_precision(rel),
        "ndcg": {"5": ndcg(rel, k=5), "10": ndcg(rel, k=10)},
        "verdicts": verdicts,
        "expected": expected_metrics(verdicts, "binary", (5, 10)),
    }


def _summary(p_yes: list[list[float]], threshold: float) -> dict[str, object]:
    return summarize_records([_record(f"q{i}", p, threshold) for i, p in enumerate(p_yes)], (5, 10))["judge"]


def test_expected_metrics_do_not_depend_on_the_threshold() -> None:
    low, high = _summary(P_YES, 0.55), _summary(P_YES, 0.60)
    assert low["map"] != pytest.approx(high["map"], abs=0.01)  # the hard mAP moves
    assert low["expected"] == high["expected"]
    assert low["expected"]["queries"] == 4
    assert set(low["expected"]["ndcg"]) == {"5", "10"}


def test_a_small_perturbation_moves_expected_map_far_less_than_hard_map() -> None:
    """Every P(yes) moved by exactly 0.01 (all up, all down, or random signs)."""
    threshold = 0.575
    base = _summary(P_YES, threshold)
    rng = np.random.default_rng(3)
    shifts = [1.0, -1.0] + [None] * 20
    worst_hard = worst_expected = 0.0
    for sign in shifts:
        shifted = [
            [
                min(1.0, max(0.0, p + 0.01 * (sign if sign is not None else rng.choice((-1.0, 1.0)))))
                for p in q
            ]
            for q in P_YES
        ]
        moved = _summary(shifted, threshold)
        worst_hard = max(worst_hard, abs(moved["map"] - base["map"]))
        worst_expected = max(worst_expected, abs(moved["expected"]["map"] - base["expected"]["map"]))
    assert worst_hard >= 0.05
    assert worst_expected <= 0.01
    assert worst_expected * 5 < worst_hard


def test_borderline_counts() -> None:
    p = [0.555, 0.575, 0.594, 0.60, 0.7, 0.2]
    assert borderline_count(p, 0.575, 0.02) == 3  # 0.555, 0.575, 0.594 (|dp| <= 0.02)
    assert borderline_count(p, 0.575, 0.0) == 1
    records = [_record("a", [0.56, 0.9], 0.575), _record("b", [0.58, 0.1, 0.59], 0.575)]
    listed = borderline_verdicts(records, 0.575, 0.02)
    assert [(b["query_id"], b["index"]) for b in listed] == [("a", 0), ("b", 0), ("b", 2)]
    # graded: the best grades on either side of grade_threshold 2 are 0.40 (grade 2) vs 0.38
    graded = {"verdict": "yes", "probs": {"0": 0.02, "1": 0.38, "2": 0.40, "3": 0.20}, "p_yes": 0.6}
    assert is_borderline(graded, 0.5, 0.02)
    assert not is_borderline(graded, 0.5, 0.01)
    assert not is_borderline({"verdict": "unjudged", "p_yes": 0.575}, 0.575, 0.02)


def test_expected_metrics_of_verdicts() -> None:
    verdicts = [
        {"verdict": "yes", "p_yes": 0.8},
        {"verdict": "unjudged", "p_yes": None},
        {"verdict": "no", "p_yes": 0.5},
        {"verdict": "no", "p_yes": 0.25},
    ]
    block = expected_metrics(verdicts, "binary", (5,))
    assert block is not None
    assert block["map"] == pytest.approx(27 / 32, abs=1e-6)  # unjudged dropped
    # generation-mode verdicts carry no probability: no expected block
    assert expected_metrics([{"verdict": "yes", "p_yes": None}], "binary", (5,)) is None
    graded = [
        {"verdict": "yes", "grade": 3, "p_yes": 0.9, "expected_grade": 2.7},
        {"verdict": "no", "grade": 0, "p_yes": 0.2, "expected_grade": 0.5},
    ]
    out = expected_metrics(graded, "graded", (5,))
    assert out is not None and out["ndcg"]["5"] == pytest.approx(1.0)


def _brute_force_endcg(dist: np.ndarray, k: int | None, ideal: tuple[int, ...] = ()) -> float:
    """E[NDCG@k] by enumerating every labeling (label-free ideal of the labeling + ideal)."""
    total = 0.0
    for labels in itertools.product(range(dist.shape[1]), repeat=dist.shape[0]):
        weight = float(np.prod([dist[i, g] for i, g in enumerate(labels)]))
        if weight:
            total += weight * ndcg(np.array(labels), ideal=np.array([*labels, *ideal]), k=k)
    return total


def test_expected_ndcg_three_passages_by_hand() -> None:
    # p = (0.5, 0.5, 0.5): 8 equally likely labelings; d2 = 1/log2(3), d3 = 1/2. NDCG of each
    # (ideal = the labeling sorted): 000 -> 0, 100 110 111 -> 1, 010 -> d2, 001 -> d3,
    # 101 -> (1 + d3) / (1 + d2), 011 -> (d2 + d3) / (1 + d2).
    d2, d3 = 1 / np.log2(3), 0.5
    by_hand = (3 + d2 + d3 + (1 + d3) / (1 + d2) + (d2 + d3) / (1 + d2)) / 8
    e = expected_ndcg([0.5, 0.5, 0.5], 3)
    assert e.method == "exact" and e.stderr == 0.0
    assert e.value == pytest.approx(by_hand, abs=1e-12)  # 0.7180...
    # The NDCG of the expected gains calls every ordering of equal probabilities perfect.
    assert expected_gain_ndcg([0.5, 0.5, 0.5], 3) == pytest.approx(1.0)
    # @1: only labelings with rank 1 relevant score (1), and a lone relevant passage below
    # rank 1 scores 0 at cutoff 1: E = P(r1) = 0.5.
    assert expected_ndcg([0.5, 0.5, 0.5], 1).value == pytest.approx(0.5, abs=1e-12)
    # Graded, by hand: rank 1 certainly grade 1, rank 2 grade 3 or 0 with 1/2 each.
    # 3 present: DCG = 1 + 3 d2, IDCG = 3 + d2; absent: 1.
    graded = np.array([[0, 1, 0, 0], [0.5, 0, 0, 0.5]])
    assert expected_ndcg(graded, 2).value == pytest.approx(((1 + 3 * d2) / (3 + d2) + 1) / 2, abs=1e-12)


def test_expected_ndcg_matches_enumeration_and_hard_ndcg() -> None:
    rng = np.random.default_rng(11)
    for n in (1, 2, 4, 6):
        p = rng.uniform(0, 1, n)
        binary = np.stack([1 - p, p], axis=1)
        graded = rng.dirichlet(np.ones(4), size=n)
        for k in (1, 3, 10, None):
            assert expected_ndcg(p, k).value == pytest.approx(_brute_force_endcg(binary, k), abs=1e-12)
            assert expected_ndcg(graded, k).value == pytest.approx(_brute_force_endcg(graded, k), abs=1e-12)
            extra = expected_ndcg(graded, k, ideal=(3, 1)).value
            assert extra == pytest.approx(_brute_force_endcg(graded, k, (3, 1)), abs=1e-12)
    # 0/1 probabilities are the hard label-free NDCG; empty is 0
    rel = [1, 0, 0, 1, 1, 0]
    assert expected_ndcg(rel, 5).value == pytest.approx(ndcg(np.array(rel), k=5), abs=1e-15)
    assert expected_ndcg([], 5).value == 0.0
    with pytest.raises(ValueError):
        expected_ndcg([0.2, 1.5], 5)


def test_monte_carlo_is_within_its_stated_error_of_the_exact_value() -> None:
    rng = np.random.default_rng(5)
    graded = rng.dirichlet(np.ones(4), size=8)
    exact = expected_ndcg(graded, 5, method="exact")
    mc = expected_ndcg(graded, 5, method="monte_carlo", samples=4000, seed=1)
    assert mc.method == "monte_carlo" and (mc.samples, mc.seed) == (4000, 1) and mc.stderr > 0
    assert abs(mc.value - exact.value) <= 4 * mc.stderr
    # seeded: the same estimate again
    assert expected_ndcg(graded, 5, method="monte_carlo", samples=4000, seed=1) == mc
    # the automatic choice falls back to Monte Carlo only beyond the exact limit
    assert expected_ndcg(rng.dirichlet(np.ones(4), size=60), None).method == "monte_carlo"
    assert expected_ndcg(rng.uniform(size=200), None).method == "exact"
