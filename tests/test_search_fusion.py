"""Hybrid retrieval's pure functions: normalisation and combination against values worked
out by hand, with ties, empty lists and keys only one list returned."""

from __future__ import annotations

import math

import pytest

from judge.search import SearchError
from judge.search._fusion import check_fusion_params, fuse, normalize

R = math.sqrt(1.5)  # z-scores of 1, 2, 3: (x - 2) / sqrt(2/3)


@pytest.mark.parametrize(
    ("scores", "method", "expected"),
    [
        ([3.0, 1.0, 2.0], "min_max", [1.0, 0.0, 0.5]),
        ([2.0, 2.0], "min_max", [1.0, 1.0]),  # ties: all equally best
        ([7.0], "min_max", [1.0]),
        ([3.0, 4.0], "l2", [0.6, 0.8]),
        ([0.0, 0.0], "l2", [0.0, 0.0]),
        ([1.0, 2.0, 3.0], "z_score", [-R, 0.0, R]),
        ([5.0, 5.0, 5.0], "z_score", [0.0, 0.0, 0.0]),
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


# first: a 4, b 2, c 0 -> min_max a 1, b .5, c 0; second: b 10, a 5, d 0 -> b 1, a .5, d 0
FIRST = [("a", 4.0), ("b", 2.0), ("c", 0.0)]
SECOND = [("b", 10.0), ("a", 5.0), ("d", 0.0)]


def test_arithmetic_by_hand_with_ties_broken_by_the_heavier_list() -> None:
    got = fuse(FIRST, SECOND, weight=0.25)
    # a .75*1 + .25*.5 = .875; b .75*.5 + .25*1 = .625; c and d 0, c first (first list weighs more)
    assert [k for k, _ in got] == ["a", "b", "c", "d"]
    assert [s for _, s in got] == pytest.approx([0.875, 0.625, 0.0, 0.0])
    got = fuse(FIRST, SECOND, weight=0.75)
    # a .25 + .375 = .625; b .125 + .75 = .875; d before c now
    assert got == [("b", pytest.approx(0.875)), ("a", pytest.approx(0.625)), ("d", 0.0), ("c", 0.0)]


def test_weights_0_and_1_give_each_list_back_in_its_own_order() -> None:
    assert [k for k, _ in fuse(FIRST, SECOND, weight=0.0)] == ["a", "b", "c", "d"]
    assert [k for k, _ in fuse(FIRST, SECOND, weight=1.0)] == ["b", "a", "d", "c"]
    # equal scores within one list keep that list's order
    tied = [("x", 1.0), ("y", 1.0), ("z", 0.5)]
    assert [k for k, _ in fuse(tied, [], weight=0.0)] == ["x", "y", "z"]


def test_geometric_and_harmonic_by_hand() -> None:
    got = dict(fuse(FIRST, SECOND, weight=0.25, combination="geometric"))
    assert got["a"] == pytest.approx(0.5**0.25)  # 1^.75 * .5^.25
    assert got["b"] == pytest.approx(0.5**0.75)
    assert got["c"] == got["d"] == 0.0  # 0 on the one side that has them
    got = dict(fuse(FIRST, SECOND, weight=0.25, combination="harmonic"))
    assert got["a"] == pytest.approx(1 / (0.75 / 1 + 0.25 / 0.5))  # 0.8
    assert got["b"] == pytest.approx(1 / (0.75 / 0.5 + 0.25 / 1))  # 1/1.75


def test_one_sided_hits_keep_their_score_in_geometric_and_harmonic() -> None:
    first = [("x", 1.0), ("y", 0.5), ("z", 0.0)]  # min_max: x 1, y .5, z 0
    for combination in ("geometric", "harmonic"):
        got = fuse(first, [], weight=0.5, combination=combination)
        assert got == [("x", 1.0), ("y", pytest.approx(0.5)), ("z", 0.0)]
    # a side of weight 0 counts for nothing: y only in the second list, weight 0
    got = dict(fuse([("x", 2.0), ("w", 1.0)], [("y", 3.0)], weight=0.0, combination="geometric"))
    assert got == {"x": 1.0, "w": 0.0, "y": 0.0}


def test_rrf_by_hand() -> None:
    got = fuse(FIRST, SECOND, weight=0.5, combination="rrf", rrf_k=60)
    # a: .5/61 + .5/62 = b: .5/62 + .5/61 (tie: b, first in the second list); c .5/63 = d .5/63
    assert [k for k, _ in got] == ["b", "a", "d", "c"]
    assert dict(got)["a"] == pytest.approx(0.5 / 61 + 0.5 / 62)
    assert dict(got)["c"] == pytest.approx(0.5 / 63)
    got = dict(fuse(FIRST, SECOND, weight=0.2, combination="rrf", rrf_k=0))
    assert got["a"] == pytest.approx(0.8 / 1 + 0.2 / 2)
    assert got["d"] == pytest.approx(0.2 / 3)


def test_z_score_floor_for_a_key_the_other_list_missed() -> None:
    got = fuse([("a", 1.0), ("b", 2.0), ("c", 3.0)], [("a", 5.0)], weight=0.5, normalization="z_score")
    # first: a -R, b 0, c R; second: a 0 (no spread), floor 0
    assert got == [("c", pytest.approx(R / 2)), ("b", 0.0), ("a", pytest.approx(-R / 2))]
    # the floor is the list's lowest z-score: d (second only) gets first's -R
    got = dict(fuse([("a", 1.0), ("b", 2.0), ("c", 3.0)], [("d", 1.0)], weight=0.5, normalization="z_score"))
    assert got["d"] == pytest.approx(-R / 2)


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
        ({"fusion_depth": 0}, "params.fusion_depth"),
        ({"ann": "yes"}, "params.ann"),
        ({"normalization": "z_score", "combination": "geometric"}, "params.normalization"),
    ],
)
def test_bad_knobs_name_their_field(params: dict[str, object], field: str) -> None:
    with pytest.raises(SearchError) as caught:
        check_fusion_params(params, "c.toml")  # type: ignore[arg-type]
    assert caught.value.field == field and caught.value.path == "c.toml"
