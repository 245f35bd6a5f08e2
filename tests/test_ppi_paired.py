"""The prediction-powered paired difference: values derived by hand on 1-3 queries."""

from __future__ import annotations

import math

import pytest

from judge.metrics import dcg, differing_pairs, paired_difference, precision_at_k

LOG3 = 1.0 / math.log2(3.0)  # the discount of rank 2


def test_p_at_k_shared_pairs_cancel_and_a_full_sample_is_exact() -> None:
    # q1: A = [a, b], B = [b, c]: b cancels, a +1/(2*2), c -1/(2*2); q2: the same top 2.
    pairs = differing_pairs({"q1": ["a", "b"], "q2": ["x", "y"]}, {"q1": ["b", "c"], "q2": ["y", "x"]}, 2)
    assert pairs.keys == (("q1", "a"), ("q1", "c"))
    assert pairs.weights.tolist() == [0.25, -0.25]
    assert pairs.queries == 2
    # judge says both relevant: difference 0; labels a=1, c=0: true difference
    # ((1 + Yb)/2 - (Yb + 0)/2) / 2 = 0.25, exact with every differing pair labelled.
    r = paired_difference(pairs, {("q1", "a"): 1, ("q1", "c"): 1}, {("q1", "a"): 1, ("q1", "c"): 0})
    assert r.judge == 0.0
    assert r.estimate == pytest.approx(0.25)
    assert r.se == 0.0 and r.low == pytest.approx(0.25) and r.high == pytest.approx(0.25)
    assert (r.labels, r.population) == (2, 2)
    assert r.as_dict() == {
        "estimate": 0.25,
        "low": 0.25,
        "high": 0.25,
        "judge": 0.0,
        "labels": 2,
        "differing_pairs": 2,
    }


def test_uniform_partial_sample_by_hand() -> None:
    # P@1 over 3 queries: a +1/3, b -1/3, c +1/3, d -1/3 (q3 tied); N = 4.
    pairs = differing_pairs(
        {"q1": ["a"], "q2": ["c"], "q3": ["e"]}, {"q1": ["b"], "q2": ["d"], "q3": ["e"]}, 1
    )
    assert len(pairs) == 4
    judge = dict.fromkeys(pairs.keys, 1)
    # labels a=0, b=1 (n=2): effects -1/3 and 0, mean -1/6; estimate 0 + 4 * (-1/6) = -2/3;
    # var(ddof=1) = 1/18, se = 4 sqrt((1 - 2/4) (1/18) / 2) = sqrt(2)/3; t(0.975, 1 df).
    r = paired_difference(pairs, judge, {("q1", "a"): 0, ("q1", "b"): 1, ("zz", "outside"): 1})
    assert r.labels == 2  # the label outside the differing pairs is ignored
    assert r.estimate == pytest.approx(-2.0 / 3.0)
    assert r.se == pytest.approx(math.sqrt(2.0) / 3.0)
    assert r.high == pytest.approx(-2.0 / 3.0 + 12.706204736174707 * math.sqrt(2.0) / 3.0)
    assert r.low == pytest.approx(-2.0 / 3.0 - 12.706204736174707 * math.sqrt(2.0) / 3.0)


def test_inclusion_probabilities_horvitz_thompson_by_hand() -> None:
    pairs = differing_pairs(
        {"q1": ["a"], "q2": ["c"], "q3": ["e"]}, {"q1": ["b"], "q2": ["d"], "q3": ["e"]}, 1
    )
    judge = dict.fromkeys(pairs.keys, 1)
    labels = {("q1", "a"): 0, ("q1", "b"): 1}
    # sum(e / pi) = (-1/3) / 0.5 + 0 = -2/3; se = sqrt((1 - 0.5) (1/9) / 0.25) = sqrt(2)/3.
    r = paired_difference(pairs, judge, labels, inclusion={("q1", "a"): 0.5, ("q1", "b"): 0.5})
    assert r.estimate == pytest.approx(-2.0 / 3.0)
    assert r.se == pytest.approx(math.sqrt(2.0) / 3.0)
    assert r.high == pytest.approx(-2.0 / 3.0 + 1.959963984540054 * math.sqrt(2.0) / 3.0)
    with pytest.raises(ValueError, match="inclusion probability"):
        paired_difference(pairs, judge, labels, inclusion={("q1", "a"): 0.5})


def test_dcg_with_a_fixed_normaliser_by_hand() -> None:
    # A = [a, b, c], B = [b, a, d], k = 3: a 1 - 1/log2 3, b the opposite, c +1/2, d -1/2;
    # normaliser 2 halves every weight.
    pairs = differing_pairs(
        {"q": ["a", "b", "c"]}, {"q": ["b", "a", "d"]}, 3, measure="dcg", normalisers={"q": 2.0}
    )
    assert pairs.keys == (("q", "a"), ("q", "b"), ("q", "c"), ("q", "d"))
    assert pairs.weights.tolist() == pytest.approx([(1 - LOG3) / 2, (LOG3 - 1) / 2, 0.25, -0.25])
    judge = {("q", "a"): 1, ("q", "b"): 1, ("q", "c"): 0, ("q", "d"): 1}
    truth = {("q", "a"): 1, ("q", "b"): 0, ("q", "c"): 1, ("q", "d"): 0}
    r = paired_difference(pairs, judge, truth)
    assert r.judge == pytest.approx(-0.25)
    # the true difference, from judge.metrics.dcg: (DCG(1,0,1) - DCG(0,1,0)) / 2
    expected = (dcg([1, 0, 1], k=3) - dcg([0, 1, 0], k=3)) / 2.0
    assert expected == pytest.approx((1 - LOG3 + 0.5) / 2)
    assert r.estimate == pytest.approx(expected)
    assert r.se == 0.0


def test_p_at_k_matches_precision_difference_with_every_label() -> None:
    a = {"q1": ["a", "b", "c"], "q2": ["x", "y"]}
    b = {"q1": ["c", "d", "e"], "q2": ["y", "z", "x"]}
    grade = {"a": 1, "b": 0, "c": 1, "d": 1, "e": 0, "x": 0, "y": 1, "z": 1}
    pairs = differing_pairs(a, b, 3)
    truth = {key: grade[key[1]] for key in pairs.keys}
    r = paired_difference(pairs, dict.fromkeys(pairs.keys, 0), truth)
    per_query = [
        precision_at_k([grade[d] for d in a[q]], 3) - precision_at_k([grade[d] for d in b[q]], 3)
        for q in ("q1", "q2")
    ]
    assert r.estimate == pytest.approx(sum(per_query) / 2)


def test_tied_and_empty_need_no_labels() -> None:
    same = {"q1": ["a", "b"], "q2": ["c"]}
    for pairs in (
        differing_pairs(same, dict(same), 2),
        differing_pairs(same, dict(same), 2, measure="dcg"),
        differing_pairs({"q1": ["a", "b"]}, {"q1": ["b", "a"]}, 2),  # P@2: the same set
        differing_pairs({}, {}, 10),
    ):
        assert len(pairs) == 0
        r = paired_difference(pairs, {}, {})
        assert (r.estimate, r.low, r.high, r.judge, r.labels, r.population) == (0.0, 0.0, 0.0, 0.0, 0, 0)
    # the same set in another order still differs in DCG
    assert len(differing_pairs({"q1": ["a", "b"]}, {"q1": ["b", "a"]}, 2, measure="dcg")) == 2


def test_no_labels_or_one_label_gives_no_interval() -> None:
    pairs = differing_pairs({"q": ["a"]}, {"q": ["b"]}, 1)
    judge = {("q", "a"): 1, ("q", "b"): 0}
    none = paired_difference(pairs, judge, {})
    assert (none.estimate, none.low, none.labels) == (1.0, None, 0)
    one = paired_difference(pairs, judge, {("q", "a"): 0})
    # effect 1 * (0 - 1) = -1, scaled by N = 2: 1 - 2 = -1
    assert (one.estimate, one.low, one.labels) == (-1.0, None, 1)


def test_a_query_one_system_lacks_and_bad_input() -> None:
    pairs = differing_pairs({"q1": ["a"], "q2": ["b"]}, {"q1": ["a"]}, 1)
    assert pairs.keys == (("q2", "b"),) and pairs.weights.tolist() == [0.5]
    with pytest.raises(ValueError, match="twice"):
        differing_pairs({"q": ["a", "a"]}, {}, 2)
    with pytest.raises(ValueError, match="k must be"):
        differing_pairs({}, {}, 0)
    with pytest.raises(ValueError, match="normaliser"):
        differing_pairs({"q": ["a"]}, {}, 1, measure="dcg", normalisers={})
    with pytest.raises(ValueError, match="finite and > 0"):
        differing_pairs({"q": ["a"]}, {}, 1, measure="dcg", normalisers={"q": 0.0})
    with pytest.raises(ValueError, match="no prediction"):
        paired_difference(pairs, {}, {})
