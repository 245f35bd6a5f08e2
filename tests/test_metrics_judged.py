"""Registry measures on judge verdicts: the label-free conventions as measure parameters."""

from __future__ import annotations

import math

import pytest

from judge.judging import JudgeConfig, PassageVerdict
from judge.judging._summary import judged_list, summarize, with_measures
from judge.metrics import (
    LABEL_FREE,
    JudgedList,
    judge_measure,
    parse_measure,
    parse_measures,
    parse_named_measures,
    split_measure_list,
    truth_values,
)


def _log2(x: float) -> float:
    return math.log2(x)


# ---- parsing with the label-free defaults ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("AP", "map(denominator=retrieved,unjudged=drop)"),
        ("map", "map(denominator=retrieved,unjudged=drop)"),
        ("P@3", "P_3(unjudged=drop)"),
        ("ndcg@5", "ndcg_cut_5(unjudged=drop)"),
        ("recip_rank", "recip_rank(unjudged=drop)"),
        ("set_P", "set_P(unjudged=drop)"),
        # a parameter written in the text beats the default
        ("AP(denominator=qrels)", "map(unjudged=drop)"),
        ("P(unjudged=nonrelevant)@3", "P_3"),
        ("AP(rel=2)@10", "map_cut_10(rel=2,denominator=retrieved,unjudged=drop)"),
        ("nDCG(gain=exp)@5", "ndcg_cut_5(gain=exponential,unjudged=drop)"),
    ],
)
def test_judge_measures_take_the_label_free_defaults(text: str, key: str) -> None:
    assert judge_measure(text).trec_name == key
    assert parse_measure(text, defaults=LABEL_FREE).trec_name == key


def test_defaults_apply_only_where_the_family_takes_them() -> None:
    # P has no AP denominator; ndcg_cut takes gain/idcg defaults; trec parsing is unchanged.
    assert parse_measure("P@5", defaults={"ap_denominator": "retrieved"}).trec_name == "P_5"
    assert parse_measure("ndcg@5", defaults={"idcg": "list"}).trec_name == "ndcg_cut_5(idcg=list)"
    assert parse_measure("AP").trec_name == "map"
    assert [m.trec_name for m in parse_measures("P.1,2", defaults=LABEL_FREE)] == [
        "P_1(unjudged=drop)",
        "P_2(unjudged=drop)",
    ]
    with pytest.raises(ValueError, match="unknown measure convention 'ties'"):
        parse_measure("AP", defaults={"ties": "first"})


def test_split_measure_list_keeps_parenthesised_commas() -> None:
    assert split_measure_list(["P@3,AP(rel=2,denominator=qrels)", " ndcg@5 ", "MRR,"]) == [
        "P@3",
        "AP(rel=2,denominator=qrels)",
        "ndcg@5",
        "MRR",
    ]
    assert split_measure_list([]) == []


def test_named_measures_keep_the_names_given() -> None:
    named = parse_named_measures(["P@3,AP(rel=2)", "P@3", "P"])
    assert [m.name for m in named][:2] == ["P@3", "AP(rel=2)"]
    # a family with default cutoffs expands under the trec_eval keys; the duplicate is dropped
    assert [m.name for m in named][2:] == [
        "P_5",
        "P_10",
        "P_15",
        "P_20",
        "P_30",
        "P_100",
        "P_200",
        "P_500",
        "P_1000",
    ]
    p3 = named[0]
    assert p3.judge.trec_name == "P_3(unjudged=drop)" and p3.truth.trec_name == "P_3"
    assert p3.judge_conventions["rel"] == "verdict yes" and p3.judge_conventions["unjudged"] == "drop"
    assert p3.truth_conventions == {
        "key": "P_3",
        "measure": "P",
        "cutoff": 3,
        "rel": 1,
        "unjudged": "nonrelevant",
    }
    assert parse_named_measures("MRR")[0].judge.name == "recip_rank"


@pytest.mark.parametrize("text", ["relstring", "runid", "num_q", "P", "nonsense@3", "AP(gain=exp)"])
def test_measures_without_a_per_query_value_or_malformed_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        judge_measure(text)


# ---- values by hand -----------------------------------------------------------------------


def test_unjudged_passages_are_dropped_not_irrelevant() -> None:
    # verdicts: yes, unjudged, no, yes  ->  judged list yes, no, yes
    listed = JudgedList.of([1, -1, 0, 1], [1, -1, 0, 1])
    assert listed.judged == 3
    assert listed.value(judge_measure("P@3")) == pytest.approx(2 / 3)
    assert listed.value(judge_measure("P@2")) == pytest.approx(1 / 2)
    assert listed.value(judge_measure("AP")) == pytest.approx((1 + 2 / 3) / 2)
    assert listed.value(judge_measure("RR")) == 1.0
    assert listed.value(judge_measure("set_P")) == pytest.approx(2 / 3)
    assert listed.value(judge_measure("num_ret")) == 3.0
    # asked for explicitly, unjudged counts as irrelevant in place: yes, -, no, yes
    assert listed.value(judge_measure("P(unjudged=nonrelevant)@3")) == pytest.approx(1 / 3)
    assert listed.value(judge_measure("AP(unjudged=nonrelevant)")) == pytest.approx((1 + 2 / 4) / 2)


def test_binary_measures_use_the_verdict_gain_measures_the_grade() -> None:
    # graded: grades 3, 1, 2 with threshold 2 -> verdicts yes, no, yes
    listed = JudgedList.of([1, 0, 1], [3, 1, 2])
    assert listed.value(judge_measure("P@2")) == pytest.approx(0.5)
    assert listed.value(judge_measure("AP(rel=3)")) == 1.0  # only rank 1 has grade >= 3
    assert listed.value(judge_measure("AP(rel=1)")) == 1.0  # every passage has grade >= 1
    dcg = 3 + 1 / _log2(3) + 2 / _log2(4)
    idcg = 3 + 2 / _log2(3) + 1 / _log2(4)
    assert listed.value(judge_measure("ndcg@3")) == pytest.approx(dcg / idcg)
    exp_dcg = 7 + 1 / _log2(3) + 3 / _log2(4)
    exp_idcg = 7 + 3 / _log2(3) + 1 / _log2(4)
    assert listed.value(judge_measure("nDCG(gain=exp)@3")) == pytest.approx(exp_dcg / exp_idcg)


def test_the_pool_adds_unretrieved_qrels_to_the_ideal() -> None:
    # judged: no, yes; two relevant qrels passages were not retrieved
    listed = JudgedList.of([0, 1], [0, 1], pool_relevant=[1, 1, 0], pool_gains=[1, 1, 0])
    ideal = 1 + 1 / _log2(3) + 1 / _log2(4)
    assert listed.value(judge_measure("ndcg@5")) == pytest.approx((1 / _log2(3)) / ideal)
    assert listed.value(judge_measure("R@5")) == pytest.approx(1 / 3)
    assert listed.value(judge_measure("AP")) == pytest.approx(1 / 2)  # retrieved denominator
    assert listed.value(judge_measure("AP(denominator=qrels)")) == pytest.approx((1 / 2) / 3)


def test_nothing_judged_has_no_value_and_empty_lists() -> None:
    assert JudgedList.of([-1, -1], [-1, -1]).value(judge_measure("AP")) is None
    assert JudgedList.of([], []).value(judge_measure("P@3")) is None
    assert JudgedList.of([0], [0]).value(judge_measure("AP")) == 0.0
    with pytest.raises(ValueError, match="differ in length"):
        JudgedList.of([1, 0], [1])
    with pytest.raises(ValueError, match="unjudged"):
        JudgedList.of([1, -1], [1, 0])


def test_ties_keep_the_input_order() -> None:
    # The ranking is the input order: equal grades are not re-sorted.
    listed = JudgedList.of([0, 1, 1], [0, 1, 1])
    assert listed.value(judge_measure("RR")) == 0.5
    assert listed.value(judge_measure("P@1")) == 0.0


def test_truth_values_use_trec_eval_conventions() -> None:
    named = parse_named_measures(["P@3", "AP", "ndcg@3"])
    # ranking d1 (grade 1), d4 (absent: grade 0), d2 (grade 2); d3 relevant, not retrieved
    qrels = {"d1": 1, "d2": 2, "d3": 1}
    grades = [qrels.get(d, 0) for d in ("d1", "d4", "d2")]
    values = truth_values(grades, qrels, {m.name: m.truth for m in named})
    assert values["P@3"] == pytest.approx(2 / 3)
    assert values["AP"] == pytest.approx((1 + 2 / 3) / 3)
    assert values["ndcg@3"] == pytest.approx((1 + 2 / 2) / (2 + 1 / _log2(3) + 1 / 2))


# ---- JudgeResult: every figure is a registry measure -----------------------------------


def _verdicts(labels: list[str], grades: list[int | None] | None = None) -> list[PassageVerdict]:
    out = []
    for i, label in enumerate(labels):
        grade = grades[i] if grades else None
        out.append(
            PassageVerdict(
                index=i,
                passage_id=f"d{i}",
                verdict=label,  # type: ignore[arg-type]
                grade=grade if label != "unjudged" else None,
                reason="r" if label != "unjudged" else "",
                error=None if label != "unjudged" else "timeout",
                template_id="t",
                template_hash="h",
                backend="fake",
            )
        )
    return out


def test_summarize_reports_chosen_measures_with_their_conventions() -> None:
    verdicts = _verdicts(["yes", "unjudged", "no", "yes"])
    result = summarize("q", verdicts, JudgeConfig(), "fake", k=(3,), measures=["P@3", "AP,MRR"])
    assert result.measures == {"P@3": pytest.approx(2 / 3), "AP": result.ap, "MRR": 1.0}
    assert result.ap == pytest.approx((1 + 2 / 3) / 2)
    assert result.measure_conventions["AP"]["ap_denominator"] == "retrieved"
    assert result.measure_conventions["P@3"]["key"] == "P_3(unjudged=drop)"
    # the same as computing them afterwards
    plain = summarize("q", verdicts, JudgeConfig(), "fake", k=(3,))
    assert plain.measures == {} and plain.measure_conventions == {}
    assert with_measures(plain, ["P@3", "AP,MRR"]) == result
    with pytest.raises(ValueError, match="bogus"):
        summarize("q", verdicts, JudgeConfig(), "fake", measures=["bogus@3"])


def test_judged_list_of_graded_verdicts_and_qrels_pool() -> None:
    verdicts = _verdicts(["yes", "no", "unjudged"], [3, 1, None])
    listed = judged_list(verdicts, "graded", qrels={"d0": 3, "d2": 2, "d9": 1, "d8": -1}, grade_threshold=2)
    assert listed.relevant.tolist() == [1, 0, -1] and listed.gains.tolist() == [3, 1, -1]
    # d2 was retrieved but not judged: it stays in the pool, as d9; d8 (negative) is left out
    assert listed.pool_gains.tolist() == [2, 1] and listed.pool_relevant.tolist() == [1, 0]
    binary = judged_list(_verdicts(["yes", "no"]), "binary", qrels={"d5": 2, "d6": 0})
    assert binary.pool_gains.tolist() == [1, 0] and binary.pool_relevant.tolist() == [1, 0]
    with pytest.raises(ValueError, match="no grade"):
        judged_list(_verdicts(["yes"]), "graded")


def test_stability_figures_recompute_the_judge_result_fields() -> None:
    """A stability figure computes its measure on the verdicts: the same numbers as the
    JudgeResult fields summarize computed with the same registry measures."""
    from judge.stability import parse_metric

    labels = [["yes", "no", "yes"], ["no", "unjudged", "yes", "yes"], ["unjudged"], ["no", "no"]]
    for row in labels:
        result = summarize("q", _verdicts(row), JudgeConfig(), "fake", k=(2, 5))
        assert parse_metric("map", (2, 5)).per_query(result) == result.ap
        assert parse_metric("score", (2, 5)).per_query(result) == result.score
        assert parse_metric("ndcg@2", (2, 5)).per_query(result) == result.ndcg.get(2)
    result = summarize("q", _verdicts(["no", "unjudged", "yes"]), JudgeConfig(), "fake")
    assert parse_metric("P@2", (5,)).per_query(result) == 0.5  # judged list: no, yes
    assert parse_metric("MRR", (5,)).per_query(result) == 0.5
