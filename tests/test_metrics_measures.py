"""Measures as parsed values: names, short forms, conventions, per-query computation."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from judge.metrics import (
    NICKNAMES,
    Measure,
    average_precision,
    ndcg,
    parse_measure,
    parse_measure_args,
    parse_measures,
)


@pytest.mark.parametrize(
    ("text", "trec_name"),
    [
        ("map", "map"),
        ("ndcg", "ndcg"),
        ("ndcg_cut_10", "ndcg_cut_10"),
        ("P_5", "P_5"),
        ("recall_100", "recall_100"),
        ("recip_rank", "recip_rank"),
        ("Rprec", "Rprec"),
        ("success_1", "success_1"),
        ("ndcg@10", "ndcg_cut_10"),
        ("nDCG@10", "ndcg_cut_10"),
        ("P@5", "P_5"),
        ("AP", "map"),
        ("AP(rel=2)", "map(rel=2)"),
        ("AP(rel=2)@100", "map_cut_100(rel=2)"),
        ("MRR", "recip_rank"),
        ("RR@10", "recip_rank_cut_10"),
        ("R@100", "recall_100"),
        ("map@100", "map_cut_100"),
        ("R-prec", "Rprec"),
        ("Success@1", "success_1"),
        ("IPrec@0.1", "iprec_at_recall_0.10"),
        ("iprec_at_recall_0.10", "iprec_at_recall_0.10"),
        ("Rprec_mult_0.20", "Rprec_mult_0.20"),
        ("nDCG(gain=exponential)@10", "ndcg_cut_10(gain=exponential)"),
        ("nDCG(gain=exp, idcg=list)@10", "ndcg_cut_10(gain=exponential,idcg=list)"),
        ("AP(denominator=retrieved)", "map(denominator=retrieved)"),
        ("P(rel=2, unjudged=drop)@5", "P_5(rel=2,unjudged=drop)"),
        ("F1@10", "F1_10"),
        ("hit_rate@5", "hit_rate_5"),
        ("mrr_all_hits", "mrr_all_hits"),
        ("bpref", "bpref"),
        ("num_rel_ret", "num_rel_ret"),
        ("gm_map", "gm_map"),
    ],
)
def test_parses_names_and_short_forms(text: str, trec_name: str) -> None:
    measure = parse_measure(text)
    assert measure.trec_name == trec_name
    assert parse_measure(measure.trec_name) == measure  # the printed key parses back


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo", "foo"),
        ("P", "needs a cutoff"),
        ("P@0", "positive"),
        ("AP(rel=x)", "rel must be"),
        ("AP(bogus=1)", "bogus"),
        ("P(gain=exponential)@5", "gain"),
        ("ndcg(rel=2)", "rel=2"),
        ("recip_rank(denominator=retrieved)", "denominator"),
        ("", "empty"),
        ("map@10@20", "map@10@20"),
    ],
)
def test_bad_measure_names_raise_value_error_naming_the_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_measure(text)
    if text:
        assert text in str(info.value)


def test_measures_are_frozen_hashable_values() -> None:
    a, b = parse_measure("P@5"), parse_measure("P_5")
    assert a == b and hash(a) == hash(b)
    assert {a: 1}[b] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.cutoff = 10  # type: ignore[misc]
    assert parse_measure("AP(rel=2)") != parse_measure("AP")


def test_params_echo_every_convention() -> None:
    params = parse_measure("nDCG(gain=exponential)@10").params
    assert params == {
        "measure": "ndcg_cut",
        "cutoff": 10,
        "gain": "exponential",
        "idcg": "qrels",
        "unjudged": "nonrelevant",
    }
    assert parse_measure("AP(rel=2)").params["rel"] == 2
    assert parse_measure("map").params["ap_denominator"] == "qrels"


def test_trec_parameter_syntax_expands() -> None:
    assert [m.trec_name for m in parse_measures("P.5,10")] == ["P_5", "P_10"]
    assert [m.trec_name for m in parse_measures("ndcg_cut.10,20,23.4")] == [
        "ndcg_cut_10",
        "ndcg_cut_20",
        "ndcg_cut_23",
    ]
    assert [m.trec_name for m in parse_measures("iprec_at_recall..5,.1")] == [
        "iprec_at_recall_0.10",
        "iprec_at_recall_0.50",
    ]
    assert [m.trec_name for m in parse_measures("utility.2,-1,0,0")] == ["utility_2,-1,0,0"]
    assert [m.trec_name for m in parse_measures("ndcg.1=3,2=9")] == ["ndcg_1=3,2=9"]
    assert [m.trec_name for m in parse_measures("P")][:2] == ["P_5", "P_10"]
    with pytest.raises(ValueError, match="duplicate"):
        parse_measures("P.5,5")
    with pytest.raises(ValueError, match="4 coefficients"):
        parse_measures("utility.1,2")


def test_nicknames() -> None:
    official = [m.trec_name for m in parse_measures("official")]
    assert official[:6] == ["runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map"]
    assert len(official) == 5 + 5 + 11 + 9
    all_trec = {m.name for m in parse_measures("all_trec")}
    assert {"ndcg_cut", "success", "rbp", "unj", "relstring"} <= all_trec
    assert not {"dcg", "ideal_dcg", "F1"} & all_trec
    assert set(NICKNAMES) == {"official", "all_trec", "set"}


def test_explicit_parameters_replace_nickname_defaults() -> None:
    names = [m.trec_name for m in parse_measure_args(["all_trec", "relstring.20"])]
    assert "relstring_20" in names and "relstring" not in names
    names = [m.trec_name for m in parse_measure_args(["P", "P.7", "P_3"])]
    assert names == ["P_3", "P_7"]
    # output order is trec_eval's table order, whatever the order asked
    assert [m.trec_name for m in parse_measure_args(["ndcg@10", "map", "P@5"])] == [
        "map",
        "P_5",
        "ndcg_cut_10",
    ]


# ---------------------------------------------------------------- per-query computation
VERDICT_GRADES = np.array([1, 0, 1, 1, 0, 1])


def test_no_ground_truth_ap_needs_the_retrieved_denominator() -> None:
    ap = parse_measure("AP(denominator=retrieved)")
    assert ap.compute(VERDICT_GRADES) == pytest.approx(0.7708, abs=5e-5)
    with pytest.raises(ValueError, match="qrels"):
        parse_measure("AP").compute(VERDICT_GRADES)


def test_no_ground_truth_ndcg_uses_the_list_as_ideal() -> None:
    grades = np.array([3, 2, 3, 0, 1])
    assert parse_measure("nDCG(idcg=list)@5").compute(grades) == ndcg(grades, k=5)
    assert parse_measure("nDCG(idcg=list)").compute(grades) == ndcg(grades)


def test_trec_conventions_with_qrels() -> None:
    # ranked: judged 2, unjudged (-1), judged 0, judged 1; qrels also hold an unretrieved 2
    grades = np.array([2, -1, 0, 1])
    qrels = np.array([2, 0, 1, 2])
    assert parse_measure("map").compute(grades, qrels=qrels) == pytest.approx((1 + 2 / 4) / 3)
    assert parse_measure("AP(rel=2)").compute(grades, qrels=qrels) == pytest.approx(1 / 2)
    assert parse_measure("map").compute(grades, qrels=qrels, relevance_level=2) == pytest.approx(1 / 2)
    dropped = parse_measure("AP(unjudged=drop)").compute(grades, qrels=qrels)
    assert dropped == pytest.approx((1 + 2 / 3) / 3)
    assert parse_measure("num_rel").compute(grades, qrels=qrels) == 3
    assert parse_measure("Rprec").compute(grades, qrels=qrels) == pytest.approx(1 / 3)
    assert parse_measure("ndcg_cut_4").compute(grades, qrels=qrels) == ndcg(
        np.array([2, 0, 0, 1]), ideal=qrels, k=4
    )
    assert parse_measure("relstring").compute_string(grades, qrels=qrels) == "2-01"
    assert average_precision(grades >= 1, n_relevant=3) == parse_measure("map").compute(grades, qrels=qrels)


def test_direct_construction_validates() -> None:
    assert Measure("P", cutoff=5).trec_name == "P_5"
    with pytest.raises(ValueError, match="needs a cutoff"):
        Measure("P")
    with pytest.raises(ValueError, match="unknown measure"):
        Measure("nope")
    with pytest.raises(ValueError, match="exponential"):
        Measure("ndcg", gains=((1, 3.0),), gain="exponential")


def test_combine_aggregates_as_trec_eval() -> None:
    # mean and sum left to right; geometric mean with trec_eval's 1e-5 floor for zeros
    assert parse_measure("map").combine([0.5, 0.25, 0.0]) == pytest.approx(0.25)
    assert parse_measure("num_rel_ret").combine([3, 0, 2]) == 5.0
    assert parse_measure("gm_map").combine([0.5, 0.0]) == pytest.approx(math.sqrt(0.5 * 1e-5))
    assert parse_measure("P@1").combine([1.0]) == 1.0
    with pytest.raises(ValueError, match="no per-query values"):
        parse_measure("map").combine([])
    with pytest.raises(ValueError, match="no per-query numeric value"):
        parse_measure("relstring").combine([1.0])


def test_uses_level_tells_binary_from_gain_measures() -> None:
    assert parse_measure("P@5").uses_level and parse_measure("map").uses_level
    assert not parse_measure("ndcg@5").uses_level and not parse_measure("rbp").uses_level
