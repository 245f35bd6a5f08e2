"""Relevance scales and the stated mapping between them."""

from __future__ import annotations

import pytest

from judge.metrics import ScaleError, ScaleMapping, check_label, check_scale, resolve_mapping, scale_of_labels


def test_scale_of_labels() -> None:
    assert scale_of_labels([]) == "binary"
    assert scale_of_labels([0, 1, 1]) == "binary"
    assert scale_of_labels([0, 1, -1]) == "binary"
    assert scale_of_labels([0, 2]) == "graded"


def test_same_scale_is_identity() -> None:
    m = resolve_mapping("graded", "graded")
    assert m.identity and [m.apply(g) for g in (0, 1, 2, 3)] == [0, 1, 2, 3]
    assert m.describe() == "graded labels used as they are"
    # a stated level the scales do not need is not applied
    assert resolve_mapping("binary", "binary", level=2).level is None


def test_graded_to_binary_needs_a_level_naming_both_scales() -> None:
    with pytest.raises(ScaleError) as err:
        resolve_mapping(
            "graded", "binary", source_name="qrels", target_name="the judge", level_field="qrels_level"
        )
    assert err.value.field == "qrels_level"
    assert "qrels are graded" in str(err.value) and "the judge is binary" in str(err.value)
    m = resolve_mapping("graded", "binary", level=2)
    assert [m.apply(g) for g in (-1, 0, 1, 2, 3)] == [-1, 0, 0, 1, 1]
    assert m.describe() == "graded labels made binary: grade >= 2 is relevant"
    assert m.as_dict()["level"] == 2


def test_binary_to_graded_needs_a_yes_grade() -> None:
    with pytest.raises(ScaleError) as err:
        resolve_mapping("binary", "graded")
    assert err.value.field == "yes_grade"
    m = resolve_mapping("binary", "graded", yes_grade=2)
    assert [m.apply(g) for g in (0, 1)] == [0, 2]


@pytest.mark.parametrize("level", [0, 4])
def test_level_out_of_range(level: int) -> None:
    with pytest.raises(ScaleError):
        resolve_mapping("graded", "binary", level=level)


def test_check_label_and_scale() -> None:
    assert check_label(1, "binary") == 1
    assert check_label(3, "graded") == 3
    for bad, scale in ((2, "binary"), (4, "graded"), (-1, "graded"), (True, "binary")):
        with pytest.raises(ScaleError):
            check_label(bad, scale)  # type: ignore[arg-type]
    with pytest.raises(ScaleError):
        check_scale("ternary")
    assert ScaleMapping("binary", "binary").identity
