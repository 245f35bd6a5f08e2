"""Comparisons test the judge's probability-weighted (expected) pooled figures.

Values are worked by hand from trec_eval's formulas with each pooled passage's relevance
replaced by its P(yes): nDCG@k = DCG@k of the P(yes) gains over the ideal DCG@k of the
pool's P(yes) gains (log2 discount; rank order = the system's order, scores n..1, so no
ties), P@k = sum of P(yes) in the top k / k, and so on (judge.metrics._expected_pooled).
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import passage_of

from judge.backends import CallPolicy, ChatRequest, ScriptedBackend, make_backend
from judge.io import InputError, JudgedRanking
from judge.judging import JudgeConfig
from judge.metrics import evaluate, expected_pooled_values, has_expected_form, parse_measure_args
from judge.systems import (
    DEFAULT_TEST_FIGURE,
    ComparisonReport,
    SystemsOptions,
    run_comparison,
    systems_options_of,
)

L3 = math.log2(3)


def _binary(p: list[float]) -> np.ndarray:
    return np.array([[1.0 - x, x] for x in p]).reshape(-1, 2)


def test_hand_worked_expected_values_of_one_query() -> None:
    # Pool P(yes) 0.9 / 0.4 / 0.2; system A ranks them so, B the other way round.
    measures = parse_measure_args(["ndcg_cut_2", "P_2", "recall_2", "recip_rank", "map", "success_2"])
    pool = _binary([0.9, 0.4, 0.2])
    a = expected_pooled_values(measures, _binary([0.9, 0.4, 0.2]), pool)
    b = expected_pooled_values(measures, _binary([0.2, 0.4, 0.9]), pool)
    ideal = 0.9 + 0.4 / L3
    by = {m.trec_name: i for i, m in enumerate(measures)}
    assert a[by["ndcg_cut_2"]] == pytest.approx(1.0)
    assert b[by["ndcg_cut_2"]] == pytest.approx((0.2 + 0.4 / L3) / ideal)  # 0.392560
    assert a[by["P_2"]] == pytest.approx(0.65) and b[by["P_2"]] == pytest.approx(0.3)
    assert a[by["recall_2"]] == pytest.approx(1.3 / 1.5)
    # E[RR] = 0.9/1 + 0.1*0.4/2 + 0.1*0.6*0.2/3
    assert a[by["recip_rank"]] == pytest.approx(0.924)
    # (0.9*1/1 + 0.4*(1+0.9)/2 + 0.2*(1+1.3)/3) / 1.5
    assert a[by["map"]] == pytest.approx((0.9 + 0.38 + 0.2 * 2.3 / 3) / 1.5)
    assert a[by["success_2"]] == pytest.approx(1 - 0.1 * 0.6)
    # a passage outside the pool (row of zeros) is not relevant; an empty pool scores 0
    c = expected_pooled_values(measures, np.zeros((2, 2)), np.zeros((0, 2)))
    assert c.tolist() == [0.0] * len(measures)


def test_zero_one_probabilities_are_trec_eval_on_the_grades() -> None:
    # Certainties (human labels, the qrels judge): every expected form is trec_eval's value.
    rng = np.random.default_rng(7)
    measures = parse_measure_args(
        ["ndcg_cut_10", "ndcg", "P_5", "recall_10", "recip_rank", "map", "map_cut_5"]
    )
    assert all(has_expected_form(m) for m in measures)
    for _ in range(30):
        pool_grades = rng.integers(0, 4, size=int(rng.integers(1, 15)))
        n = int(rng.integers(0, len(pool_grades) + 1))
        order = rng.permutation(len(pool_grades))[:n]
        ranked = pool_grades[order]
        onehot = np.eye(4)
        got = expected_pooled_values(measures, onehot[ranked].reshape(-1, 4), onehot[pool_grades], level=2)
        ev = evaluate(
            measures,
            [JudgedRanking(qid="q", grades=ranked.astype(np.int64), qrels=pool_grades)],
            relevance_level=2,
        )
        assert got.tolist() == pytest.approx([float(ev.query_scores(m)[0]) for m in measures])


def test_measures_without_an_expected_form_are_nan() -> None:
    measures = parse_measure_args(["bpref", "Rprec", "ndcg_cut_10(idcg=list)"])
    assert not any(has_expected_form(m) for m in measures)
    got = expected_pooled_values(measures, _binary([0.5]), _binary([0.5]))
    assert all(math.isnan(x) for x in got)


# ---------------------------------------------------------------------------- the comparison
P_YES = {"a": 0.9, "b": 0.4, "c": 0.2, "d": 0.9, "e": 0.4}


def _prob_backend(probabilities: bool = True) -> ScriptedBackend:
    """P(yes) by the passage's mark ``<x>`` (:data:`P_YES`); without probabilities a verdict."""

    def step(request: ChatRequest, _index: int) -> Any:
        text = passage_of(request)
        p = next(v for k, v in P_YES.items() if f"<{k}>" in text)
        if probabilities:
            return {"yes": p, "no": 1.0 - p}
        return json.dumps({"verdict": "yes" if p > 0.5 else "no", "reason": "r"})

    return ScriptedBackend(step, name="fake:probs", supports_probabilities=probabilities)


def _systems(tmp_path: Path) -> dict[str, Path]:
    ranks = {"A": {"q1": "abc", "q2": "ed"}, "B": {"q1": "cba", "q2": "de"}}
    paths = {}
    for name, queries in ranks.items():
        rows = [
            {
                "id": qid,
                "query": f"问题 {qid}",
                "retrieval_context": [{"id": f"{qid}-{m}", "text": f"{qid} 段 <{m}>"} for m in marks],
            }
            for qid, marks in queries.items()
        ]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        paths[name] = path
    return paths


def _compare(tmp_path: Path, options: SystemsOptions, probabilities: bool = True) -> ComparisonReport:
    backend = make_backend(_prob_backend(probabilities), policy=CallPolicy(max_retries=0))
    config = JudgeConfig(probability=probabilities, explain=False)

    async def go() -> ComparisonReport:
        try:
            return await run_comparison(
                _systems(tmp_path), tmp_path / "report", backend, config, options=options
            )
        finally:
            await backend.aclose()

    return asyncio.run(go())


# q1: pool 0.9/0.4/0.2, A ranks a b c, B c b a; q2: pool 0.9/0.4, A ranks e d, B d e.
EXPECTED = {
    "A": {"q1": 1.0, "q2": (0.4 + 0.9 / L3) / (0.9 + 0.4 / L3)},
    "B": {"q1": (0.2 + 0.4 / L3) / (0.9 + 0.4 / L3), "q2": 1.0},
}
# Thresholded (only 0.9 is yes): q1 A [1, 0] -> 1, B [0, 0] -> 0; q2 A [0, 1] -> 1/log2(3), B 1.
THRESHOLDED = {"A": {"q1": 1.0, "q2": 1 / L3}, "B": {"q1": 0.0, "q2": 1.0}}


def _options(**kw: Any) -> SystemsOptions:
    return SystemsOptions(measures=("ndcg_cut_2", "bpref"), relevance_level=1, resamples=200, **kw)


def test_the_comparison_tests_the_expected_figure_and_keeps_the_thresholded_beside(tmp_path: Path) -> None:
    run = _compare(tmp_path, _options())
    r = run.report
    assert DEFAULT_TEST_FIGURE == "expected"
    assert r.conventions["tested_figure"] == "expected"
    assert r.conventions["expected_measures"] == ["ndcg_cut_2"]  # bpref: no expected form
    assert r.conventions["per_query_measure"] == "ndcg_cut_2"
    for name in ("A", "B"):
        s = r.systems[name]
        assert s.per_query == pytest.approx(EXPECTED[name])
        assert s.measures["ndcg_cut_2"] == pytest.approx(sum(EXPECTED[name].values()) / 2)
        assert s.thresholded is not None
        assert s.thresholded["ndcg_cut_2"] == pytest.approx(sum(THRESHOLDED[name].values()) / 2)
        assert s.thresholded["bpref"] == s.measures["bpref"]
    (c,) = [c for c in r.comparisons if c.measure == "ndcg_cut_2"]
    expected_diff = (sum(EXPECTED["B"].values()) - sum(EXPECTED["A"].values())) / 2
    assert c.diff == pytest.approx(expected_diff)  # the test read the expected values
    assert (c.wins, c.losses) == (1, 1)
    md = run.markdown()
    assert "Tested figure: expected" in md and "Thresholded figures" in md
    assert "Per-query ndcg_cut_2" in md
    # loaded back from the folder: the same figures (the loader recomputes the tested figure)
    loaded = ComparisonReport.load(tmp_path / "report", _options())
    assert loaded.markdown() == md and loaded.html() == run.html()


def test_asked_thresholded_tests_the_thresholded_figure(tmp_path: Path) -> None:
    r = _compare(tmp_path, _options(test_figure="thresholded")).report
    assert r.conventions["tested_figure"] == "thresholded"
    assert r.systems["A"].per_query == pytest.approx(THRESHOLDED["A"])
    assert r.systems["A"].thresholded is None
    (c,) = [c for c in r.comparisons if c.measure == "ndcg_cut_2"]
    assert c.diff == pytest.approx((1.0 - (1.0 + 1 / L3)) / 2)


def test_a_judge_without_probabilities_keeps_the_thresholded_figure_and_says_so(tmp_path: Path) -> None:
    r = _compare(tmp_path, _options(), probabilities=False).report
    assert r.conventions["tested_figure"] == "thresholded"
    assert r.conventions["test_figure_asked"] == "expected"
    assert "no probabilities" in r.conventions["tested_figure_reason"]
    assert r.systems["B"].per_query == pytest.approx(THRESHOLDED["B"])
    assert r.systems["B"].thresholded is None


def test_the_option_reaches_every_entry_point(tmp_path: Path) -> None:
    from judge.cli import build_parser
    from judge.cli._pooled_flags import pooled_keywords
    from judge.server._comparisons import systems_options
    from judge.server._schemas import CompareOptions
    from judge.systems._engine_nightly import load_search_nightly

    for command in ("compare-systems", "experiment"):
        extra = (
            ["A=a.jsonl", "B=b.jsonl"] if command == "compare-systems" else ["q.jsonl", "--config", "c.toml"]
        )
        extra += ["-o", "out"]
        args = build_parser().parse_args([command, *extra, "--test-figure", "thresholded"])
        assert systems_options_of(pooled_keywords(args)).test_figure == "thresholded"
        args = build_parser().parse_args([command, *extra])
        assert systems_options_of(pooled_keywords(args)).test_figure == "expected"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["compare-systems", "A=a.jsonl", "-o", "out", "--test-figure", "median"])
    # the Python API's keyword
    assert systems_options_of({"test_figure": "thresholded"}).test_figure == "thresholded"
    with pytest.raises(InputError, match="test_figure"):
        systems_options_of({"test_figure": "median"})
    # the service's option
    opts = CompareOptions(test_figure="thresholded").model_dump()
    opts["max_passage_chars"] = 1000
    assert systems_options(tmp_path, opts).test_figure == "thresholded"
    assert systems_options(tmp_path, {"max_passage_chars": 1000}).test_figure == "expected"
    with pytest.raises(ValueError):
        CompareOptions(test_figure="median")
    # the search nightly's config
    cfg = tmp_path / "nightly.json"
    cfg.write_text(
        json.dumps({"search": {"queries": "q.jsonl", "config": "e.toml", "test_figure": "thresholded"}})
    )
    assert load_search_nightly(cfg).test_figure == "thresholded"
    cfg.write_text(json.dumps({"search": {"queries": "q.jsonl", "config": "e.toml", "test_figure": "x"}}))
    with pytest.raises(InputError, match=r"search\.test_figure"):
        load_search_nightly(cfg)


# ---------------------------------------------------------------------------- every pair, the tie group
def _evaluation(values: list[float]) -> Any:
    """An evaluation whose per-query P_1 is ``values`` (query i relevant at rank 1 iff 1)."""
    rankings = [
        JudgedRanking(qid=f"q{i:02d}", grades=np.array([int(v)], dtype=np.int64), qrels=np.array([1]))
        for i, v in enumerate(values)
    ]
    return evaluate(parse_measure_args(["P_1"]), rankings)


def test_every_pair_is_tested_with_holm_over_all_pairs_and_the_best_has_a_tie_group() -> None:
    from judge.systems._model import PairDifference
    from judge.systems._pairwise import pairwise_differences, tie_group

    (p1,) = parse_measure_args(["P_1"])
    ones, zeros = [1.0] * 20, [0.0] * 20
    evaluations = {"A": _evaluation(zeros), "B": _evaluation(ones), "C": _evaluation(ones), "D": None}
    pairs = pairwise_differences(
        ["A", "B", "C", "D"], evaluations, p1, {"q00"}, seed=0, resamples=2000, confidence=0.95
    )
    # D has no evaluation: not tested; q00 is excluded (not in every configuration): n = 19
    assert [(p.a, p.b, p.n, p.diff) for p in pairs] == [
        ("A", "B", 19, 1.0),
        ("A", "C", 19, 1.0),
        ("B", "C", 19, 0.0),
    ]
    assert pairs[2].p_value == 1.0 and pairs[2].p_holm == 1.0  # equal everywhere: p = 1
    assert pairs[0].p_value < 0.01 and pairs[0].p_holm is not None and pairs[0].p_holm >= pairs[0].p_value
    # B's tie group: C (p 1), not A (separated)
    assert tie_group("B", pairs, 0.05) == ["B", "C"]
    assert tie_group(None, pairs, 0.05) is None
    # a pair without a Holm p (not adjusted) cannot separate
    loose = [PairDifference(a="X", b="Y", n=3, diff=0.5, p_value=0.01, p_holm=None)]
    assert tie_group("Y", loose, 0.05) == ["Y", "X"]


def test_until_decided_scores_the_judged_pairs_by_their_probabilities() -> None:
    from judge.systems._adaptive import Problem, ProblemQuery, score_states

    def problem(expected: bool) -> Problem:
        q = ProblemQuery(
            token="q1",
            docnos=["a", "b"],
            labels=np.array([1, 0], dtype=np.int64),  # thresholded: P(yes) 0.9 yes, 0.4 no
            prior=np.full(2, 0.5),
            ranks=[np.array([0, 1], dtype=np.intp), np.array([1, 0], dtype=np.intp)],
            best_rank=np.array([1, 1], dtype=np.int64),
            soft={0: np.array([0.1, 0.9, 0, 0]), 1: np.array([0.6, 0.4, 0, 0])},
        )
        return Problem(
            queries=[q],
            systems=["base", "other"],
            measures=tuple(parse_measure_args(["ndcg_cut_2"])),
            expected=expected,
        )

    states = [np.array([[1, 0]], dtype=np.int64)]
    on_expected = score_states(problem(True), states, 1)[:, 0, 0, 0]
    on_thresholded = score_states(problem(False), states, 1)[:, 0, 0, 0]
    assert on_expected.tolist() == pytest.approx([1.0, (0.4 + 0.9 / L3) / (0.9 + 0.4 / L3)])
    assert on_thresholded.tolist() == pytest.approx([1.0, 1 / L3])  # [0, 1] over the ideal [1]


def test_the_qrels_judge_prints_the_same_figures_on_either_figure(tmp_path: Path) -> None:
    # The README's example: the qrels judge answers P(yes) 0 or 1, so the expected figures are
    # the thresholded ones, to the last digit (the README's strong vs weak diff +0.8542).
    import judge

    root = Path(__file__).resolve().parents[1]
    systems = {n: root / "datasets" / "systems" / f"{n}.jsonl" for n in ("weak", "strong")}
    backend = f"qrels:{root / 'datasets' / 'sample.qrels'}"
    reports = {
        figure: judge.compare_systems(
            systems,
            tmp_path / figure,
            backend=backend,
            config=JudgeConfig(probability=True),  # the qrels judge's P(yes): 1 or 0
            cache=False,
            test_figure=figure,
            stability_resamples=0,
        )
        for figure in ("expected", "thresholded")
    }
    expected, thresholded = reports["expected"], reports["thresholded"]
    assert expected.conventions["tested_figure"] == "expected"
    assert thresholded.conventions["tested_figure"] == "thresholded"
    for name in systems:
        assert expected.systems[name].measures == thresholded.systems[name].measures
        assert expected.systems[name].per_query == thresholded.systems[name].per_query
        beside = expected.systems[name].thresholded
        assert beside is not None and beside == {m: thresholded.systems[name].measures[m] for m in beside}
    assert [c.model_dump() for c in expected.comparisons] == [c.model_dump() for c in thresholded.comparisons]
    (c,) = [c for c in expected.comparisons if c.measure == "map"]
    assert round(c.diff, 4) == 0.8542


def test_a_verdict_the_adapted_rule_decided_counts_at_the_rule_s_probability() -> None:
    from judge.judging import PassageVerdict
    from judge.systems._expected import verdict_row

    base = {"index": 0, "passage_id": "d", "template_id": "t", "template_hash": "h", "backend": "b"}
    judged = PassageVerdict(verdict="no", p_yes=0.3, **base)
    adapted = judged.model_copy(update={"verdict": "yes", "p_adapted": 0.8})
    assert verdict_row(judged, "binary", 4).tolist() == pytest.approx([0.7, 0.3, 0, 0])
    assert verdict_row(adapted, "binary", 4).tolist() == pytest.approx([0.2, 0.8, 0, 0])
    assert verdict_row(judged.model_copy(update={"p_yes": None}), "binary", 4) is None
    # graded: the four grade probabilities, normalised; without them no distribution
    graded = PassageVerdict(verdict="yes", grade=2, probs={"0": 0.1, "1": 0.1, "2": 0.6, "3": 0.2}, **base)
    assert verdict_row(graded, "graded", 4).tolist() == pytest.approx([0.1, 0.1, 0.6, 0.2])
    assert verdict_row(graded.model_copy(update={"probs": {"0": 0.5, "1": 0.5}}), "graded", 4) is None
