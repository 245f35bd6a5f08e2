"""The review queue order and the verdict override (judge.judging._review_queue), by hand."""

from __future__ import annotations

import math

import pytest

from judge.judging import (
    PassageVerdict,
    QueueCandidate,
    apply_label,
    judge_verdict_of,
    rank_discount,
    review_queue,
)


def _c(docno: str, p: float | None, rank: int, verdict: str = "yes", **ranks: int) -> QueueCandidate:
    return QueueCandidate("q1", docno, ranks or {"job": rank}, verdict, p)


def test_nearest_the_threshold_first_weighted_by_rank() -> None:
    # threshold 0.5: flip probability = 1 - P(yes) for a yes, P(yes) for a no
    cands = [
        _c("a", 0.90, 1),  # .10 x 1 = .10
        _c("b", 0.52, 9),  # .48 x 1/log2(10) = .1445
        _c("c", 0.45, 1, "no"),  # .45 x 1 = .45
        _c("d", 0.60, 3),  # .40 x 1/2 = .20
        _c("e", None, 2, "unjudged"),  # 1 x 1/log2(3) = .6309
        _c("f", None, 1, "no"),  # generated verdict: .5 x 1 = .5
    ]
    q = review_queue(cands, threshold=0.5, audit_every=0)
    assert [i.docno for i in q] == ["e", "f", "c", "d", "b", "a"]
    assert q[4].priority == pytest.approx(0.48 / math.log2(10))
    assert [i.position for i in q] == [1, 2, 3, 4, 5, 6] and not any(i.audit for i in q)
    assert rank_discount(1) == 1.0 and rank_discount(3) == 0.5


def test_flip_probability_is_read_relative_to_the_threshold() -> None:
    from judge.judging import flip_probability

    assert flip_probability("no", 0.575, 0.575) == pytest.approx(0.5)
    assert flip_probability("yes", 0.575, 0.575) == pytest.approx(0.5)
    # logit(0.7) - logit(0.575) = 0.8473 - 0.3023 = 0.5450 -> sigmoid 0.6330; a yes flips with 0.3670
    assert flip_probability("yes", 0.7, 0.575) == pytest.approx(0.36703, abs=1e-4)
    assert flip_probability("unjudged", None, 0.5) == 1.0 and flip_probability("no", None, 0.5) == 0.5


def test_an_exact_impact_replaces_the_rank_discount() -> None:
    near = QueueCandidate("q1", "near", {"job": 1}, "no", 0.49, impact=0.01)  # .49 x .01
    far = QueueCandidate("q1", "far", {"job": 9}, "no", 0.2, impact=0.2)  # .2 x .2
    assert [i.docno for i in review_queue([near, far], threshold=0.5, audit_every=0)] == ["far", "near"]


def test_reviewed_items_are_left_out_and_limit_stops() -> None:
    cands = [_c("a", 0.5, 1), _c("b", 0.51, 1), _c("c", 0.6, 1)]
    q = review_queue(cands, threshold=0.5, reviewed={("q1", "a")}, audit_every=0, limit=1)
    assert [i.docno for i in q] == ["b"]
    assert review_queue([], threshold=0.5) == []


def test_in_a_comparison_a_passage_in_one_list_only_weighs_double() -> None:
    both = QueueCandidate("q1", "both", {"A": 1, "B": 1}, "yes", 0.62)  # .38 x 1
    only = QueueCandidate("q1", "only", {"A": 1}, "yes", 0.64)  # .36 x 2
    q = review_queue([both, only], threshold=0.5, lists=2, audit_every=0)
    assert [i.docno for i in q] == ["only", "both"]
    assert q[0].weight == 2.0 and q[1].weight == 1.0


def test_every_fifth_item_is_a_seeded_uniform_audit_draw() -> None:
    cands = [_c(f"d{i:02d}", 0.5 + i / 100, 1) for i in range(20)]
    q = review_queue(cands, threshold=0.5, seed=7)
    assert len(q) == 20 and len({i.docno for i in q}) == 20
    assert [i.position for i in q if i.audit] == [5, 10, 15, 20]
    assert review_queue(cands, threshold=0.5, seed=7) == q
    # the priority items keep their order around the audit slots
    prio = [i.docno for i in q if not i.audit]
    assert prio == sorted(prio)
    other = review_queue(cands, threshold=0.5, seed=8)
    assert [i.docno for i in other if i.audit] != [i.docno for i in q if i.audit]


def test_apply_label_keeps_the_judge_verdict_and_can_be_undone() -> None:
    v = PassageVerdict(
        index=0,
        verdict="no",
        p_yes=0.48,
        confidence=0.52,
        reason="不相关",
        template_id="t",
        template_hash="h",
        backend="fake",
    )
    h = apply_label(v, 1, mode="binary", reviewer="ann", comment="相关")
    assert (h.verdict, h.p_yes, h.source, h.reviewer, h.reason) == ("yes", 1.0, "human", "ann", "相关")
    assert h.replaced is not None and h.replaced.verdict == "no" and h.replaced.p_yes == 0.48
    again = apply_label(h, 0, mode="binary", reviewer="bob")
    assert again.replaced == h.replaced and again.p_yes == 0.0  # never stacked
    assert judge_verdict_of(again) == v
    g = apply_label(v, 2, mode="graded", reviewer="ann", grade_threshold=2)
    assert (g.verdict, g.grade, g.expected_grade) == ("yes", 2, 2.0)
    with pytest.raises(ValueError):
        apply_label(v, 2, mode="binary", reviewer="ann")


def test_comparison_candidates_carry_each_systems_rank() -> None:
    from judge.batch import comparison_review_queue

    verdict = {"template_id": "t", "reason": ""}
    records = [
        {
            "id": "q1",
            "query": "q",
            "docnos": ["x", "y", "z"],
            "verdicts": [
                {**verdict, "verdict": "yes", "p_yes": 0.62},  # in A@1 and B@1: .38 x 1
                {**verdict, "verdict": "yes", "p_yes": 0.66},  # only in A@2: .34 x 2 x .6309 = .429
                {**verdict, "verdict": "no", "p_yes": 0.45},  # only in B@3: .45 x 2 x .5 = .45
            ],
            "conventions": {"p_yes_threshold": 0.5},
        }
    ]
    rankings = {"A": {"q1": ["x", "y"]}, "B": {"q1": ["x", "w", "z"]}}
    q = comparison_review_queue(records, rankings, audit_every=0)
    assert [(i.docno, dict(i.candidate.ranks)) for i in q] == [
        ("z", {"B": 3}),
        ("y", {"A": 2}),
        ("x", {"A": 1, "B": 1}),
    ]
    assert q[1].priority == pytest.approx(0.34 * 2 / math.log2(3))
