"""Hybrid retrieval's pure functions: normalisation and combination against values worked
out by hand, with ties, empty lists and keys only one list returned."""

from __future__ import annotations

import math

import pytest

from judge.search import SearchError
from judge.search._fusion import check_fusion_params, fuse, normalize

# z-scores of 1, 2, 3 with the sample deviation (OpenSearch's): (x - 2) / 1; at or below the
# mean, OpenSearch's floor 0.001
F = 0.001


@pytest.mark.parametrize(
    ("scores", "method", "expected"),
    [
        ([3.0, 1.0, 2.0], "min_max", [1.0, F, 0.5]),  # the lowest hit floored at 0.001, never 0
        ([-1.0, -3.0, -2.0], "min_max", [1.0, F, 0.5]),  # negative scores: the same arithmetic
        ([2.0, 2.0], "min_max", [1.0, 1.0]),  # ties: all equally best
        ([7.0], "min_max", [1.0]),
        ([1000.0, 0.5, 0.0], "min_max", [1.0, F, F]),  # 0.0005 of the range: the floor, below no other
        ([3.0, 4.0], "l2", [0.6, 0.8]),
        ([-3.0, 4.0], "l2", [-0.6, 0.8]),  # a negative cosine stays negative
        ([0.0, 0.0], "l2", [0.0, 0.0]),
        ([1.0, 2.0, 3.0], "z_score", [F, F, 1.0]),  # sample deviation 1
        ([5.0, 2.0, 1.0], "z_score", [(5 - 8 / 3) / math.sqrt(13 / 3), F, F]),
        ([5.0, 5.0, 5.0], "z_score", [1.0, 1.0, 1.0]),  # no spread: all equally best
        ([4.0], "z_score", [1.0]),
        ([], "min_max", []),
        ([], "l2", []),
        ([], "z_score", []),
    ],
)
def test_normalize_by_hand(scores: list[float], method: str, expected: list[float]) -> None:
    assert normalize(scores, method) == pytest.approx(expected)


def test_unknown_normalization() -> None:
    with pytest.raises(SearchError, match="unknown normalization"):
        normalize([1.0], "max")


# The issue's case: BM25 ranks A > B > C, dense B > C > A (A's cosine negative).
# min_max: BM25 A 1, B (2-1)/4 = .25, C 0 -> 0.001; dense B 1, C (.4+.3)/.8 = .875, A 0 -> 0.001.
BM25 = [("A", 5.0), ("B", 2.0), ("C", 1.0)]
DENSE = [("B", 0.5), ("C", 0.4), ("A", -0.3)]
SQRT30, SQRT_HALF = math.sqrt(30), math.sqrt(0.5)
RRF_ABC = {"A": 0.5 / 61 + 0.5 / 63, "B": 0.5 / 62 + 0.5 / 61, "C": 0.5 / 63 + 0.5 / 62}


@pytest.mark.parametrize(
    ("normalization", "combination", "order", "scores"),
    [
        # (1 - w) a + w b: A (1 + .001) / 2, B (.25 + 1) / 2, C (.001 + .875) / 2
        ("min_max", "arithmetic", "BAC", {"A": 0.5005, "B": 0.625, "C": 0.438}),
        # exp(sum w ln s / sum w): A sqrt(.001), B sqrt(.25), C sqrt(.000875)
        ("min_max", "geometric", "BAC", {"A": math.sqrt(F), "B": 0.5, "C": math.sqrt(F * 0.875)}),
        # sum w / sum(w / s): A 1 / (1/2 + 1000/2), B 1 / (4/2 + 1/2), C 1 / (1000/2 + (1/.875)/2)
        (
            "min_max",
            "harmonic",
            "BAC",
            {"A": 2 / 1001, "B": 0.4, "C": 2 / (1000 + 1 / 0.875)},
        ),
        # l2: BM25 / sqrt(30), dense / sqrt(.5); A's -.3 / sqrt(.5) lowers it
        (
            "l2",
            "arithmetic",
            "BCA",
            {
                "A": (5 / SQRT30 - 0.3 / SQRT_HALF) / 2,
                "B": (2 / SQRT30 + 0.5 / SQRT_HALF) / 2,
                "C": (1 / SQRT30 + 0.4 / SQRT_HALF) / 2,
            },
        ),
        # z (sample sd): BM25 mean 8/3, sd sqrt(13/3): A 1.1209, B and C below the mean -> .001;
        # dense mean .2, sd sqrt(.19): B .6882, C .4588, A below -> .001
        (
            "z_score",
            "arithmetic",
            "ABC",
            {
                "A": ((5 - 8 / 3) / math.sqrt(13 / 3) + F) / 2,
                "B": (F + 0.3 / math.sqrt(0.19)) / 2,
                "C": (F + 0.2 / math.sqrt(0.19)) / 2,
            },
        ),
        # .5/(60 + rank): A 1 and 3, B 2 and 1, C 3 and 2 (scores and normalisation unused)
        ("min_max", "rrf", "BAC", RRF_ABC),
        ("l2", "rrf", "BAC", RRF_ABC),
        ("z_score", "rrf", "BAC", RRF_ABC),
    ],
)
def test_the_issue_case_for_every_pair_by_hand(
    normalization: str, combination: str, order: str, scores: dict[str, float]
) -> None:
    got = fuse(BM25, DENSE, weight=0.5, normalization=normalization, combination=combination)
    assert "".join(k for k, _ in got) == order
    assert dict(got) == pytest.approx(scores)


def test_min_max_geometric_and_harmonic_never_put_the_shared_second_last() -> None:
    """The passage both lists rank second is never last (the old code gave A, C, B: each
    list's lowest hit normalised to 0, taken for missing, kept the other list's full score)."""
    for combination in ("geometric", "harmonic"):
        for weight in (0.3, 0.5, 0.7):
            got = [k for k, _ in fuse(BM25, DENSE, weight=weight, combination=combination)]
            assert got[0] == "B" and got[-1] != "B", (combination, weight, got)


# first: a 4, b 2, c 0 -> min_max a 1, b .5, c .001; second: b 10, a 5, d 0 -> b 1, a .5, d .001
FIRST = [("a", 4.0), ("b", 2.0), ("c", 0.0)]
SECOND = [("b", 10.0), ("a", 5.0), ("d", 0.0)]


def test_arithmetic_by_hand_with_ties_broken_by_the_heavier_list() -> None:
    got = fuse(FIRST, SECOND, weight=0.25)
    # a .75*1 + .25*.5 = .875; b .75*.5 + .25*1 = .625; c .75*.001; d .25*.001 (missing counts 0)
    assert [k for k, _ in got] == ["a", "b", "c", "d"]
    assert [s for _, s in got] == pytest.approx([0.875, 0.625, 0.00075, 0.00025])
    got = fuse(FIRST, SECOND, weight=0.75)
    # a .25 + .375 = .625; b .125 + .75 = .875; d .00075 before c .00025 now
    assert [k for k, _ in got] == ["b", "a", "d", "c"]
    assert [s for _, s in got] == pytest.approx([0.875, 0.625, 0.00075, 0.00025])
    # equal combined scores at weight .5 (a and b .75, c and d .0005): the second list's rank decides
    got = fuse(FIRST, SECOND, weight=0.5)
    assert [k for k, _ in got] == ["b", "a", "d", "c"]
    assert dict(got)["c"] == dict(got)["d"] == pytest.approx(0.0005)


def test_weights_0_and_1_give_each_list_back_in_its_own_order() -> None:
    assert [k for k, _ in fuse(FIRST, SECOND, weight=0.0)] == ["a", "b", "c", "d"]
    assert [k for k, _ in fuse(FIRST, SECOND, weight=1.0)] == ["b", "a", "d", "c"]
    for combination in ("geometric", "harmonic", "rrf"):
        assert [k for k, _ in fuse(FIRST, SECOND, weight=0.0, combination=combination)][:3] == ["a", "b", "c"]
    # equal scores within one list keep that list's order
    tied = [("x", 1.0), ("y", 1.0), ("z", 0.5)]
    assert [k for k, _ in fuse(tied, [], weight=0.0)] == ["x", "y", "z"]


def test_geometric_and_harmonic_by_hand() -> None:
    got = dict(fuse(FIRST, SECOND, weight=0.25, combination="geometric"))
    assert got["a"] == pytest.approx(0.5**0.25)  # 1^.75 * .5^.25
    assert got["b"] == pytest.approx(0.5**0.75)
    assert got["c"] == got["d"] == pytest.approx(F)  # one side each: that side's floor
    got = dict(fuse(FIRST, SECOND, weight=0.25, combination="harmonic"))
    assert got["a"] == pytest.approx(1 / (0.75 / 1 + 0.25 / 0.5))  # 0.8
    assert got["b"] == pytest.approx(1 / (0.75 / 0.5 + 0.25 / 1))  # 1/1.75
    assert got["c"] == got["d"] == pytest.approx(F)


def test_one_sided_hits_by_hand() -> None:
    # first: x 1, y (2-1)/3, z .001; second: x 1, w .001
    first = [("x", 4.0), ("y", 2.0), ("z", 1.0)]
    second = [("x", 0.9), ("w", 0.5)]
    got = fuse(first, second, weight=0.5)
    assert [k for k, _ in got] == ["x", "y", "w", "z"]  # w and z tie at .0005: the second list first
    assert [s for _, s in got] == pytest.approx([1.0, 1 / 6, 0.0005, 0.0005])
    for combination in ("geometric", "harmonic"):
        # a key one side returned keeps that side's score (OpenSearch: the mean over scores > 0)
        got = fuse(first, second, weight=0.5, combination=combination)
        assert [k for k, _ in got] == ["x", "y", "w", "z"]
        assert [s for _, s in got] == pytest.approx([1.0, 1 / 3, F, F])
        got = fuse(first, [], weight=0.5, combination=combination)
        assert got == [("x", pytest.approx(1.0)), ("y", pytest.approx(1 / 3)), ("z", pytest.approx(F))]
    # a side of weight 0 counts for nothing: y only in the second list, weight 0
    got = dict(fuse([("x", 2.0), ("w", 1.0)], [("y", 3.0)], weight=0.0, combination="geometric"))
    assert got == {"x": 1.0, "w": pytest.approx(F), "y": 0.0}


def test_one_sided_hits_under_l2_and_z_score_by_hand() -> None:
    first = [("x", 4.0), ("y", 2.0), ("z", 1.0)]
    second = [("x", 0.9), ("w", 0.5)]
    # l2: first / sqrt(21), second / sqrt(1.06); a missing side 0
    n1, n2 = math.sqrt(21), math.sqrt(1.06)
    got = fuse(first, second, weight=0.5, normalization="l2")
    assert [k for k, _ in got] == ["x", "w", "y", "z"]
    expected = {"x": (4 / n1 + 0.9 / n2) / 2, "w": 0.5 / n2 / 2, "y": 2 / n1 / 2, "z": 0.5 / n1}
    assert dict(got) == pytest.approx(expected)
    # z_score (sample sd): first mean 7/3, sd sqrt(7/3): x 1.091, y and z .001; second mean .7,
    # sd sqrt(.08): x .707, w .001
    got = fuse(first, second, weight=0.5, normalization="z_score")
    zx = (4 - 7 / 3) / math.sqrt(7 / 3) / 2 + (0.2 / math.sqrt(0.08)) / 2
    # y, z and w tie at .0005: w first (the second list, of weight .5, ranks it), then y, z
    assert [k for k, _ in got] == ["x", "w", "y", "z"]
    assert [s for _, s in got] == pytest.approx([zx, F / 2, F / 2, F / 2])


def test_ties_within_a_list_under_every_normalization() -> None:
    tied = [("p", 3.0), ("q", 3.0), ("r", 3.0)]
    for normalization, each in (("min_max", 1.0), ("z_score", 1.0), ("l2", 1 / math.sqrt(3))):
        got = fuse(tied, [("q", 1.0)], weight=0.5, normalization=normalization)
        # q: both sides; p and r tie: the first list's order
        assert [k for k, _ in got] == ["q", "p", "r"]
        assert [s for _, s in got] == pytest.approx([(each + 1.0) / 2, each / 2, each / 2])


def test_rrf_by_hand() -> None:
    got = fuse(FIRST, SECOND, weight=0.5, combination="rrf", rrf_k=60)
    # a: .5/61 + .5/62 = b: .5/62 + .5/61 (tie: b, first in the second list); c .5/63 = d .5/63
    assert [k for k, _ in got] == ["b", "a", "d", "c"]
    assert dict(got)["a"] == pytest.approx(0.5 / 61 + 0.5 / 62)
    assert dict(got)["c"] == pytest.approx(0.5 / 63)
    got = dict(fuse(FIRST, SECOND, weight=0.2, combination="rrf", rrf_k=1))
    assert got["a"] == pytest.approx(0.8 / 2 + 0.2 / 3)
    assert got["d"] == pytest.approx(0.2 / 4)


def test_z_score_missing_key_counts_0_as_in_opensearch() -> None:
    got = fuse([("a", 1.0), ("b", 2.0), ("c", 3.0)], [("a", 5.0)], weight=0.5, normalization="z_score")
    # first (sample sd 1): a .001, b .001, c 1; second: one hit, 1.0; b and c miss the second (0)
    assert [k for k, _ in got] == ["a", "c", "b"]
    assert [s for _, s in got] == pytest.approx([(F + 1) / 2, 0.5, F / 2])
    got = dict(fuse([("a", 1.0), ("b", 2.0), ("c", 3.0)], [("d", 1.0)], weight=0.5, normalization="z_score"))
    assert got["d"] == pytest.approx(0.5)  # 0 (missing from the first) and 1.0


def test_negative_scores_on_both_sides_by_hand() -> None:
    first = [("p", -1.0), ("q", -2.0), ("r", -4.0)]  # min_max: p 1, q 2/3, r .001
    second = [("r", -0.1), ("q", -0.2), ("p", -0.5)]  # min_max: r 1, q .75, p .001
    got = fuse(first, second, weight=0.5, combination="geometric")
    assert [k for k, _ in got] == ["q", "r", "p"]  # r and p tie: the second list (r first) decides
    assert dict(got) == pytest.approx({"q": math.sqrt(2 / 3 * 0.75), "p": math.sqrt(F), "r": math.sqrt(F)})
    # l2 and arithmetic: p -1/sqrt21 and -.5/sqrt.3; q -2/sqrt21 and -.2/sqrt.3; r -4/sqrt21 and -.1/sqrt.3
    got = fuse(first, second, weight=0.5, normalization="l2")
    n1, n2 = math.sqrt(21), math.sqrt(0.3)
    expected = {"p": (-1 / n1 - 0.5 / n2) / 2, "q": (-2 / n1 - 0.2 / n2) / 2, "r": (-4 / n1 - 0.1 / n2) / 2}
    assert dict(got) == pytest.approx(expected)
    assert [k for k, _ in got] == sorted(expected, key=lambda k: -expected[k])


@pytest.mark.parametrize("normalization", ["l2", "z_score"])
@pytest.mark.parametrize("combination", ["geometric", "harmonic"])
def test_means_refuse_l2_and_z_score(normalization: str, combination: str) -> None:
    with pytest.raises(SearchError) as caught:
        fuse(BM25, DENSE, weight=0.5, normalization=normalization, combination=combination)
    assert caught.value.field == "params.normalization"
    with pytest.raises(SearchError) as caught:
        check_fusion_params({"normalization": normalization, "combination": combination}, "c.toml")
    assert caught.value.field == "params.normalization" and caught.value.path == "c.toml"


def test_empty_lists_and_repeated_keys() -> None:
    assert fuse([], [], weight=0.5) == []
    assert fuse([("a", 1.0), ("a", 0.0)], [], weight=0.0) == [("a", 1.0)]  # first place counts


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"weight": 1.5}, "params.weight"),
        ({"weight": -0.1}, "params.weight"),
        ({"weight": "half"}, "params.weight"),
        ({"normalization": "max"}, "params.normalization"),
        ({"combination": "median"}, "params.combination"),
        ({"retriever": "splade"}, "params.retriever"),
        ({"rrf_k": -1}, "params.rrf_k"),
        ({"rrf_k": 0}, "params.rrf_k"),
        ({"rrf_k": math.inf}, "params.rrf_k"),
        ({"fusion_depth": 0}, "params.fusion_depth"),
        ({"ann": "yes"}, "params.ann"),
        ({"normalization": "z_score", "combination": "geometric"}, "params.normalization"),
        ({"normalization": "l2", "combination": "harmonic"}, "params.normalization"),
    ],
)
def test_bad_knobs_name_their_field(params: dict[str, object], field: str) -> None:
    with pytest.raises(SearchError) as caught:
        check_fusion_params(params, "c.toml")  # type: ignore[arg-type]
    assert caught.value.field == field and caught.value.path == "c.toml"


# ---------------------------------------------------------------------------- extreme scores


@pytest.mark.parametrize(
    ("scores", "method", "expected"),
    [
        # squares of 1e160 overflow a double: the old l2 gave 0.0 to every hit
        ([1e160, 1e160], "l2", [1 / math.sqrt(2), 1 / math.sqrt(2)]),
        ([3e160, 4e160], "l2", [0.6, 0.8]),
        ([-3e160, 4e160], "l2", [-0.6, 0.8]),
        # the square of the smallest double is 0: the old l2 gave 0.0
        ([5e-324], "l2", [1.0]),
        ([5e-324, 5e-324], "l2", [1 / math.sqrt(2), 1 / math.sqrt(2)]),
        # max - min of +-1e308 overflows: the old min_max gave NaN
        ([1e308, -1e308, 0.0], "min_max", [1.0, F, 0.5]),
        ([-1e308, 1e308], "min_max", [F, 1.0]),
        ([5e-324, 0.0, 1e-323], "min_max", [0.5, F, 1.0]),  # 1, 0 and 2 times the smallest
        # (x - mean)**2 of +-1e308 overflows: the old z_score raised OverflowError; mean 0, sd 1e308
        ([1e308, -1e308, 0.0], "z_score", [1.0, F, F]),
        # a, a, -a: mean a/3, sd 2a/sqrt(3): the two a's at sqrt(3)/3 (the old fsum overflowed)
        ([1e308, 1e308, -1e308], "z_score", [math.sqrt(3) / 3, math.sqrt(3) / 3, F]),
        ([1e308, 1e308], "z_score", [1.0, 1.0]),  # no spread
        ([1e308, 1e308], "min_max", [1.0, 1.0]),
    ],
)
def test_normalize_extreme_finite_scores_by_hand(
    scores: list[float], method: str, expected: list[float]
) -> None:
    got = normalize(scores, method)
    assert all(math.isfinite(v) for v in got)
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("method", "ends"),
    [
        ("min_max", (1.0, F)),
        ("l2", (1 / math.sqrt(2), -1 / math.sqrt(2))),  # the norm is 1e308 sqrt 2
        ("z_score", (2.0, F)),  # mean 0, sd sqrt(2e616 / 8) = 1e308 / 2
    ],
)
def test_normalize_mixed_magnitudes_is_finite_and_keeps_the_order(
    method: str, ends: tuple[float, float]
) -> None:
    scores = [1e308, 1e160, 1.0, 5e-324, 0.0, -5e-324, -1.0, -1e160, -1e308]  # descending
    got = normalize(scores, method)
    assert len(got) == len(scores) and all(math.isfinite(v) for v in got)
    assert got == sorted(got, reverse=True)  # never out of the scores' order (ties: the floor)
    assert (got[0], got[-1]) == pytest.approx(ends)


def test_scaling_leaves_ordinary_scores_bit_for_bit() -> None:
    """The scale is a power of two, so a list the unscaled arithmetic handled gives the same
    doubles: the values the formulas give computed directly."""
    scores = [5.0, 2.0, 1.0, 0.3]
    low, high = 0.3, 5.0
    assert normalize(scores, "min_max") == [max((s - low) / (high - low), F) for s in scores]
    norm = math.sqrt(math.fsum(s * s for s in scores))
    assert normalize(scores, "l2") == [s / norm for s in scores]
    mean = math.fsum(scores) / 4
    sd = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / 3)
    assert normalize(scores, "z_score") == [max((s - mean) / sd, F) for s in scores]


# first: a 1e308, c 0, b -1e308; second: c 4e160, b 3e160
EXTREME_FIRST = [("a", 1e308), ("c", 0.0), ("b", -1e308)]
EXTREME_SECOND = [("c", 4e160), ("b", 3e160)]


@pytest.mark.parametrize(
    ("normalization", "order", "scores"),
    [
        # first a 1, c .5, b .001; second c 1, b .001: a .5, c .75, b .001
        ("min_max", "cab", {"a": 0.5, "c": 0.75, "b": F}),
        # first a 1/sqrt 2, c 0, b -1/sqrt 2; second c .8, b .6
        ("l2", "cab", {"a": 0.5 / math.sqrt(2), "c": 0.4, "b": (0.6 - 1 / math.sqrt(2)) / 2}),
        # first (mean 0, sd 1e308) a 1, c and b .001; second (mean 3.5e160, sd .5e160 sqrt 2)
        # c 1/sqrt 2, b .001; a is missing from the second (0)
        ("z_score", "acb", {"a": 0.5, "c": (F + 1 / math.sqrt(2)) / 2, "b": F}),
    ],
)
def test_fuse_extreme_finite_scores_by_hand(normalization: str, order: str, scores: dict[str, float]) -> None:
    got = fuse(EXTREME_FIRST, EXTREME_SECOND, weight=0.5, normalization=normalization)
    assert all(math.isfinite(s) for _, s in got)
    assert "".join(k for k, _ in got) == order
    assert dict(got) == pytest.approx(scores)


@pytest.mark.parametrize("rrf_k", [0, -1, -60.5, math.inf, math.nan, True, "60"])
def test_fuse_refuses_the_rrf_k_configurations_refuse(rrf_k: object) -> None:
    # -1 divided by zero at rank 1; -60.5 gave negative scores; 0 is below OpenSearch's 1
    with pytest.raises(ValueError, match="rrf_k") as caught:
        fuse(FIRST, SECOND, weight=0.5, combination="rrf", rrf_k=rrf_k)  # type: ignore[arg-type]
    assert isinstance(caught.value, SearchError) and caught.value.field == "params.rrf_k"
    with pytest.raises(SearchError) as again:
        check_fusion_params({"rrf_k": rrf_k}, "c.toml")  # type: ignore[dict-item]
    assert again.value.field == "params.rrf_k"


def test_fuse_takes_any_rrf_k_above_0() -> None:
    got = dict(fuse(FIRST, SECOND, weight=0.5, combination="rrf", rrf_k=0.5))
    assert got["a"] == pytest.approx(0.5 / 1.5 + 0.5 / 2.5)
