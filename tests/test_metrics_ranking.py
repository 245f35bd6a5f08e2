"""Pure metric functions: hand-derived values, no-ground-truth conventions, edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from judge.metrics import (
    apply_unjudged,
    average_precision,
    binarize,
    dcg,
    f1_at_k,
    hit_rate,
    mean_reciprocal_rank_all_hits,
    ndcg,
    precision_at_k,
    r_precision,
    recall_at_k,
    reciprocal_rank,
    set_precision,
    success_at_k,
)

YES, NO = 1, 0


def _relevant_at(ranks: list[int], length: int) -> np.ndarray:
    rel = np.zeros(length, dtype=np.int64)
    rel[np.asarray(ranks) - 1] = 1
    return rel


# ---------------------------------------------------------------- no ground truth (LLM verdicts)
def test_verdicts_ap_with_relevant_retrieved_denominator() -> None:
    verdicts = np.array([YES, NO, YES, YES, NO, YES])
    # relevant at ranks 1, 3, 4, 6: (1/1 + 2/3 + 3/4 + 4/6) / 4
    expected = (1 + 2 / 3 + 3 / 4 + 4 / 6) / 4
    assert average_precision(verdicts) == pytest.approx(expected, abs=1e-15)
    assert f"{average_precision(verdicts):.4f}" == "0.7708"
    assert f"{set_precision(verdicts):.4f}" == "0.6667"
    assert precision_at_k(verdicts, 6) == pytest.approx(4 / 6)


def test_verdicts_as_bools_give_the_same_ap() -> None:
    verdicts = np.array([True, False, True, True, False, True])
    assert average_precision(verdicts) == average_precision(verdicts.astype(int))


def test_mrr_over_two_queries_is_5_over_12() -> None:
    first = _relevant_at([3], 5)  # RR 1/3
    second = _relevant_at([2, 3], 5)  # RR 1/2
    rrs = [reciprocal_rank(first), reciprocal_rank(second)]
    assert rrs == [1 / 3, 1 / 2]
    assert sum(rrs) / 2 == pytest.approx(5 / 12)


def test_granular_mrr_averages_every_hit() -> None:
    assert mean_reciprocal_rank_all_hits(_relevant_at([2, 3], 5)) == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert mean_reciprocal_rank_all_hits(_relevant_at([2, 3], 5)) == pytest.approx(5 / 12)
    assert mean_reciprocal_rank_all_hits(_relevant_at([3], 5)) == pytest.approx(1 / 3)
    assert mean_reciprocal_rank_all_hits(_relevant_at([2, 3], 5), k=2) == pytest.approx(1 / 2)


def test_ap_ranks_1_3_6_of_three_relevant() -> None:
    rel = _relevant_at([1, 3, 6], 6)
    expected = (1 + 2 / 3 + 3 / 6) / 3
    assert average_precision(rel, n_relevant=3) == pytest.approx(expected, abs=1e-15)
    assert average_precision(rel) == pytest.approx(expected, abs=1e-15)  # all three retrieved


def test_ap_ranks_2_5_7_8_of_five_relevant() -> None:
    rel = _relevant_at([2, 5, 7, 8], 10)
    expected = (1 / 2 + 2 / 5 + 3 / 7 + 4 / 8 + 0) / 5
    assert average_precision(rel, n_relevant=5) == pytest.approx(expected, abs=1e-15)
    # without ground truth the missing fifth relevant is unknown: denominator 4
    assert average_precision(rel) == pytest.approx((1 / 2 + 2 / 5 + 3 / 7 + 4 / 8) / 4, abs=1e-15)


def test_graded_dcg_and_ndcg_against_sorted_list() -> None:
    grades = np.array([3, 2, 3, 0, 1])
    expected_dcg = 3 / math.log2(2) + 2 / math.log2(3) + 3 / math.log2(4) + 0 + 1 / math.log2(6)
    assert dcg(grades, k=5) == pytest.approx(expected_dcg, abs=1e-12)
    assert f"{dcg(grades, k=5):.4f}" == "6.1487"
    ideal = 3 / math.log2(2) + 3 / math.log2(3) + 2 / math.log2(4) + 1 / math.log2(5)
    assert ndcg(grades, k=5) == pytest.approx(expected_dcg / ideal, abs=1e-12)
    assert ndcg(grades, k=5, ideal=grades) == ndcg(grades, k=5)


def test_exponential_gain() -> None:
    grades = np.array([3, 2, 3, 0, 1])
    expected = 7 / math.log2(2) + 3 / math.log2(3) + 7 / math.log2(4) + 0 + 1 / math.log2(6)
    assert dcg(grades, gain="exponential") == pytest.approx(expected, abs=1e-12)
    ideal = 7 + 7 / math.log2(3) + 3 / math.log2(4) + 1 / math.log2(5)
    assert ndcg(grades, gain="exponential") == pytest.approx(expected / ideal, abs=1e-12)


def test_ndcg_ideal_from_qrels_counts_unretrieved_relevant() -> None:
    grades = np.array([2, 0])
    qrels = np.array([2, 2, 1, 0])
    ideal = 2 + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg(grades, ideal=qrels) == pytest.approx(2 / ideal)
    assert ndcg(grades, ideal=qrels, k=1) == pytest.approx(1.0)


def test_unjudged_policies() -> None:
    grades = np.array([-1, 2, -2, 1])
    assert apply_unjudged(grades, "nonrelevant").tolist() == [0, 2, 0, 1]
    assert apply_unjudged(grades, "drop").tolist() == [2, 1]
    assert average_precision(binarize(apply_unjudged(grades, "drop"))) == 1.0
    assert average_precision(binarize(apply_unjudged(grades, "nonrelevant"))) == pytest.approx(
        (1 / 2 + 2 / 4) / 2
    )
    assert binarize(grades, 2).tolist() == [False, True, False, False]
    with pytest.raises(ValueError, match="unjudged"):
        apply_unjudged(grades, "keep")  # type: ignore[arg-type]


def test_precision_recall_rprec_success_f1_hit_rate() -> None:
    rel = _relevant_at([1, 3], 4)
    assert precision_at_k(rel, 2) == 0.5
    assert recall_at_k(rel, 4, 3) == 0.5
    assert recall_at_k(rel, 4) == 0.5
    assert r_precision(rel, 3) == pytest.approx(2 / 3)
    assert success_at_k(rel, 1) == 1.0
    assert success_at_k(_relevant_at([3], 4), 2) == 0.0
    p, r = 2 / 4, 2 / 5
    assert f1_at_k(rel, 5, 4) == pytest.approx(2 * p * r / (p + r))
    assert hit_rate(rel, 4, k=3) == 0.5
    assert hit_rate(rel, 2) == 1.0


# ---------------------------------------------------------------- edge cases, defined results
EMPTY = np.array([], dtype=np.int64)


def test_empty_list_scores_zero_everywhere() -> None:
    assert average_precision(EMPTY) == 0.0
    assert average_precision(EMPTY, n_relevant=3) == 0.0
    assert dcg(EMPTY) == 0.0
    assert ndcg(EMPTY) == 0.0
    assert ndcg(EMPTY, ideal=np.array([2, 1])) == 0.0
    assert reciprocal_rank(EMPTY) == 0.0
    assert precision_at_k(EMPTY, 5) == 0.0
    assert set_precision(EMPTY) == 0.0
    assert recall_at_k(EMPTY, 3, 5) == 0.0
    assert r_precision(EMPTY, 3) == 0.0
    assert success_at_k(EMPTY, 5) == 0.0
    assert f1_at_k(EMPTY, 3, 5) == 0.0
    assert hit_rate(EMPTY, 3) == 0.0
    assert mean_reciprocal_rank_all_hits(EMPTY) == 0.0


def test_no_relevant_passage_scores_zero() -> None:
    rel = np.zeros(4, dtype=np.int64)
    assert average_precision(rel) == 0.0
    assert average_precision(rel, n_relevant=0) == 0.0
    assert ndcg(rel) == 0.0
    assert ndcg(rel, ideal=np.zeros(3)) == 0.0
    assert recall_at_k(rel, 0, 10) == 0.0
    assert r_precision(rel, 0) == 0.0
    assert reciprocal_rank(rel) == 0.0
    assert hit_rate(rel, 0) == 0.0


def test_k_larger_than_the_list() -> None:
    rel = _relevant_at([1], 3)
    assert precision_at_k(rel, 10) == 0.1  # trec_eval: always divided by k
    assert recall_at_k(rel, 2, 10) == 0.5
    assert average_precision(rel, n_relevant=2, k=10) == 0.5
    assert ndcg(np.array([1, 0, 2]), k=10) == ndcg(np.array([1, 0, 2]))
    assert dcg(np.array([1, 0, 2]), k=10) == dcg(np.array([1, 0, 2]))
    assert success_at_k(rel, 10) == 1.0


def test_cutoff_must_be_positive() -> None:
    with pytest.raises(ValueError, match="cutoff"):
        precision_at_k(np.array([1]), 0)
    with pytest.raises(ValueError, match="cutoff"):
        ndcg(np.array([1]), k=0)


def test_rejects_non_1d_input() -> None:
    with pytest.raises(ValueError, match="1-d"):
        average_precision(np.ones((2, 2)))
