"""``judge.compare_systems``: pooled metrics derived by hand, pooling rules, human labels,
depth, queries missing from a system, order stability, bad input. Fake backends only."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import passage_of

import judge
from judge.backends import ChatRequest, RuleBackend, ScriptedBackend
from judge.io import InputError, read_qrels, read_run
from judge.judging import JudgeConfig
from judge.metrics import parse_measure_args
from judge.systems import SystemsReport
from judge.systems._inputs import read_systems
from judge.systems._pool import build_pool, read_pool_verdicts
from judge.systems._scoring import (
    _DrawScorer,
    _QueryModel,
    _system_index,
    evaluate_files,
    pool_qrels,
    stability_models,
)

REL = "[相关]"


def _write(path: Path, rows: list[dict[str, Any]], *, gz: bool = False) -> Path:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if gz:
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _p(pid: str, relevant: bool, qid: str = "q1") -> dict[str, str]:
    return {"id": pid, "text": f"{qid} 的段落 {pid}" + (f" {REL}" if relevant else "")}


def _keyword() -> RuleBackend:
    return RuleBackend.keyword(REL, text_of=passage_of)


def _run(tmp_path: Path, systems: dict[str, list[dict[str, Any]]], **kwargs: Any) -> SystemsReport:
    paths = {name: _write(tmp_path / f"{name}.jsonl", rows) for name, rows in systems.items()}
    kwargs.setdefault("backend", _keyword())
    kwargs.setdefault("cache", False)
    kwargs.setdefault("resamples", 2000)
    return judge.compare_systems(paths, tmp_path / "report", **kwargs)


def _asked(backend: ScriptedBackend) -> list[str]:
    return [passage_of(r) for r in backend.requests]


def test_pooled_ap_ndcg_recall_by_hand(tmp_path: Path) -> None:
    # Pool of q1: r1, r2, r3 relevant; n1, n2 not. A = [r1 n1 r2], B = [n2 r3 r1].
    a = [
        {
            "id": "q1",
            "query": "问题一",
            "retrieval_context": [_p("r1", True), _p("n1", False), _p("r2", True)],
        }
    ]
    b = [
        {
            "id": "q1",
            "query": "问题一",
            "retrieval_context": [_p("n2", False), _p("r3", True), _p("r1", True)],
        }
    ]
    fake = _keyword()
    report = _run(tmp_path, {"A": a, "B": b}, backend=fake)
    A, B = report.systems["A"].measures, report.systems["B"].measures
    # AP against the pool's 3 relevant: A (1/1 + 2/3) / 3, B (1/2 + 2/3) / 3.
    assert A["map"] == pytest.approx((1 + 2 / 3) / 3, abs=1e-12)
    assert B["map"] == pytest.approx((1 / 2 + 2 / 3) / 3, abs=1e-12)
    # Recall@10: A found 2 of 3, B 2 of 3; P@5: 2/5 each; RR: 1 and 1/2.
    assert A["recall_10"] == pytest.approx(2 / 3) and B["recall_10"] == pytest.approx(2 / 3)
    assert A["P_5"] == pytest.approx(0.4) and B["P_5"] == pytest.approx(0.4)
    assert A["recip_rank"] == 1.0 and B["recip_rank"] == 0.5
    # NDCG@10, binary gains; the ideal list holds the pool's 3 relevant passages.
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert A["ndcg_cut_10"] == pytest.approx((1 + 1 / math.log2(4)) / idcg, abs=1e-12)
    assert B["ndcg_cut_10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / idcg, abs=1e-12)
    # Isolated AP (judge score's): the denominator is what each list found.
    assert A["map_isolated"] == pytest.approx(round((1 + 2 / 3) / 2, 6))
    assert B["map_isolated"] == pytest.approx(round((1 / 2 + 2 / 3) / 2, 6))
    # One call per unique pair: r1 is in both lists and asked once.
    assert fake.calls == 5 and len(set(_asked(fake))) == 5
    pool = report.pool
    assert (pool.queries, pool.pairs, pool.unique_pairs, pool.judged, pool.calls, pool.calls_saved) == (
        1, 6, 5, 5, 5, 1,
    )  # fmt: skip
    # Without probabilities there is no order stability.
    assert all(c.order_stability is None for c in report.comparisons)
    # report.json is the model, schema first, and reads back into it.
    text = (tmp_path / "report" / "report.json").read_text(encoding="utf-8")
    assert next(iter(json.loads(text))) == "schema" and json.loads(text)["schema"] == "judge.systems/1"
    assert SystemsReport.model_validate_json(text) == report
    # The files: binary grades 1/0, runs in input order.
    qrels = read_qrels(tmp_path / "report" / "pool.qrels").to_dict()
    assert qrels == {"q1": {"r1": 1, "r2": 1, "r3": 1, "n1": 0, "n2": 0}}
    assert [d for d, _ in read_run(tmp_path / "report" / "runs" / "B.run").ranking("q1")] == [
        "n2",
        "r3",
        "r1",
    ]


def test_graded_pool_uses_grades_and_the_judges_threshold(tmp_path: Path) -> None:
    def p(pid: str, marker: str) -> dict[str, str]:
        return {"id": pid, "text": f"段落 {pid} {marker}"}

    a = [{"id": "q1", "query": "问题", "retrieval_context": [p("x", "[g3]"), p("y", "[g1]")]}]
    b = [{"id": "q1", "query": "问题", "retrieval_context": [p("z", "[g2]"), p("x", "[g3]")]}]
    fake = RuleBackend.keyword(
        [], grades={"[g3]": 3, "[g2]": 2, "[g1]": 1}, mode="graded", text_of=passage_of
    )
    report = _run(tmp_path, {"A": a, "B": b}, backend=fake, mode="graded")
    assert read_qrels(tmp_path / "report" / "pool.qrels").to_dict() == {"q1": {"x": 3, "y": 1, "z": 2}}
    A, B = report.systems["A"].measures, report.systems["B"].measures
    # Relevant = grade >= 2 (the judge's threshold): x, z. A finds x at 1; B z at 1, x at 2.
    assert report.conventions["relevance_level"] == 2
    assert A["map"] == pytest.approx(1 / 2) and B["map"] == pytest.approx(1.0)
    # NDCG gains are the grades; ideal = [3, 2, 1].
    idcg = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert A["ndcg_cut_10"] == pytest.approx((3 + 1 / math.log2(3)) / idcg, abs=1e-12)
    assert B["ndcg_cut_10"] == pytest.approx((2 + 3 / math.log2(3)) / idcg, abs=1e-12)


def test_isolated_ap_ties_while_pooled_ap_separates(tmp_path: Path) -> None:
    # The example: one relevant at rank 1 vs four relevant at ranks 1-4.
    one, four = [], []
    for i in range(6):
        q = f"q{i}"
        rel = [_p(f"{q}-r{j}", True, q) for j in range(4)]
        irr = [_p(f"{q}-n{j}", False, q) for j in range(3)]
        one.append({"id": q, "query": f"问题 {i}", "retrieval_context": [rel[0], *irr]})
        four.append({"id": q, "query": f"问题 {i}", "retrieval_context": rel})
    report = _run(tmp_path, {"one": one, "four": four})
    assert report.systems["one"].measures["map_isolated"] == 1.0
    assert report.systems["four"].measures["map_isolated"] == 1.0
    assert report.systems["one"].measures["map"] == pytest.approx(0.25)
    assert report.systems["four"].measures["map"] == pytest.approx(1.0)
    c = next(c for c in report.comparisons if c.measure == "map")
    assert (c.baseline, c.system, c.wins, c.ties, c.losses) == ("one", "four", 6, 0, 0)
    assert c.diff == pytest.approx(0.75)
    # recip_rank does not separate them: every query a tie, p = 1.
    rr = next(c for c in report.comparisons if c.measure == "recip_rank")
    assert (rr.wins, rr.ties, rr.losses, rr.p_value) == (0, 6, 0, 1.0)


def test_depth_pools_only_each_systems_top_n(tmp_path: Path) -> None:
    a = [{"id": "q1", "query": "问题", "retrieval_context": [_p("a1", True), _p("a2", False), _p("r", True)]}]
    b = [{"id": "q1", "query": "问题", "retrieval_context": [_p("a1", True), _p("b2", True), _p("b3", True)]}]
    fake = _keyword()
    report = _run(tmp_path, {"A": a, "B": b}, backend=fake, depth=2)
    # Pooled: a1, a2 (A's top 2) and b2 (B's top 2 after a1). r and b3 are never asked.
    assert sorted(_asked(fake)) == sorted(
        f"q1 的段落 {x}" + (f" {REL}" if x != "a2" else "") for x in ("a1", "a2", "b2")
    )
    assert (report.pool.pairs, report.pool.unique_pairs, report.pool.calls) == (4, 3, 3)
    assert read_qrels(tmp_path / "report" / "pool.qrels").to_dict() == {"q1": {"a1": 1, "a2": 0, "b2": 1}}
    # Unpooled passages count as not relevant (trec_eval): A = a1 only of 2 relevant.
    assert report.systems["A"].measures["map"] == pytest.approx(0.5)
    assert report.systems["B"].measures["map"] == pytest.approx(1.0)
    # The runs keep every passage (scored in full; unpooled = not relevant).
    assert len(read_run(tmp_path / "report" / "runs" / "A.run").ranking("q1")) == 3
    assert report.conventions["depth"] == 2


def test_human_qrels_fill_the_pool_and_only_holes_are_judged(tmp_path: Path) -> None:
    a = [{"id": "q1", "query": "问题", "retrieval_context": [_p("h1", False), _p("x", True)]}]
    b = [{"id": "q1", "query": "问题", "retrieval_context": [_p("h2", True), _p("y", False)]}]
    human = tmp_path / "human.qrels"
    # Humans overrule what the judge would say (h1 relevant, h2 not); u is relevant but
    # retrieved by nobody; q9 is not in any system.
    human.write_text("q1 0 h1 2\nq1 0 h2 0\nq1 0 u 1\nq9 0 z 1\n", encoding="utf-8")
    fake = _keyword()
    # Graded labels meet the binary judge at a stated level: grade >= 1 is relevant.
    report = _run(tmp_path, {"A": a, "B": b}, backend=fake, qrels=human, qrels_level=1)
    assert sorted(_asked(fake)) == [f"q1 的段落 x {REL}", "q1 的段落 y"]
    assert (report.pool.human_labels, report.pool.judged, report.pool.calls) == (2, 2, 2)
    assert read_qrels(tmp_path / "report" / "pool.qrels").to_dict() == {
        "q1": {"h1": 1, "h2": 0, "u": 1, "x": 1, "y": 0}
    }
    # Relevant: h1, x, u (3). A = [h1 x]: AP (1 + 1) / 3; B = [h2 y]: 0.
    assert report.systems["A"].measures["map"] == pytest.approx(2 / 3)
    assert report.systems["A"].measures["recall_10"] == pytest.approx(2 / 3)
    assert report.systems["B"].measures["map"] == 0.0
    # The human labels count in the isolated AP too (h1 yes, h2 no).
    assert report.systems["A"].measures["map_isolated"] == 1.0
    assert report.systems["B"].measures["map_isolated"] == 0.0
    # Labelled pairs are not in the judged pool; everything labelled -> no line at all.
    judged = [json.loads(x) for x in (tmp_path / "report" / "pool.judged.jsonl").read_text().splitlines()]
    assert [r["docnos"] for r in judged] == [["x", "y"]]


def test_query_missing_from_one_system_is_listed_and_left_out_of_paired_tests(tmp_path: Path) -> None:
    a, b = [], []
    for i in range(4):
        q = f"q{i}"
        a.append({"id": q, "query": f"问题 {i}", "retrieval_context": [_p(f"{q}-r", True, q)]})
        if i != 2:
            b.append({"id": q, "query": f"问题 {i}", "retrieval_context": [_p(f"{q}-n", False, q)]})
    report = _run(tmp_path, {"A": a, "B": b})
    assert report.not_in_all_systems == ["q2"]
    assert report.systems["A"].queries == 4 and report.systems["B"].queries == 3
    assert report.systems["A"].queries_in_file == 4 and report.systems["B"].queries_in_file == 3
    for c in report.comparisons:
        assert c.n == 3 and c.wins + c.ties + c.losses == 3
    c = next(c for c in report.comparisons if c.measure == "map")
    assert (c.baseline_mean, c.system_mean, c.losses) == (1.0, 0.0, 3)


def test_passages_without_id_are_identified_by_exact_text_and_gzip_works(tmp_path: Path) -> None:
    a = [{"id": 7, "query": "问题", "retrieval_context": [f"同一段 {REL}", "另一段"]}]
    b = [{"id": 7, "query": "问题", "retrieval_context": [f"同一段 {REL}", "另一段。"]}]
    fake = _keyword()
    paths = {
        "A": _write(tmp_path / "a.jsonl.gz", a, gz=True),
        "B": _write(tmp_path / "b.jsonl", b),
    }
    report = judge.compare_systems(paths, tmp_path / "out", backend=fake, cache=False)
    assert fake.calls == 3  # the shared text once, the two different texts once each
    assert report.pool.unique_pairs == 3 and report.pool.pairs == 4
    assert report.systems["A"].measures["map"] == report.systems["B"].measures["map"] == 1.0


def _prob_backend(p_yes: dict[str, float]) -> ScriptedBackend:
    """Probability-mode judge: P(yes) of each passage from a table keyed by its text."""

    def step(request: ChatRequest, _index: int) -> Any:
        p = p_yes[passage_of(request)]
        return {"yes": p, "no": 1.0 - p}

    return ScriptedBackend(step, name="fake:probs", supports_probabilities=True)


def test_order_stability_from_known_p_yes(tmp_path: Path) -> None:
    # One query; A retrieves only a (P(yes) 0.1), B only b (P(yes) 0.9). Observed: a no,
    # b yes -> B ahead on map. Redrawn: B ahead iff (a no, b yes): 0.9 * 0.9 = 0.81; both
    # yes or both no give a tie (AP 1/2 each, or 0 each), a yes b no puts A ahead.
    a = [{"id": "q1", "query": "问题", "retrieval_context": [{"id": "a", "text": "段落 a"}]}]
    b = [{"id": "q1", "query": "问题", "retrieval_context": [{"id": "b", "text": "段落 b"}]}]
    config = JudgeConfig(probability=True, explain=False)
    report = _run(
        tmp_path,
        {"A": a, "B": b},
        backend=_prob_backend({"段落 a": 0.1, "段落 b": 0.9}),
        config=config,
        stability_resamples=2000,
        measures=["map"],
    )
    (c,) = report.comparisons
    # The tested (expected) map: P(relevant) over the pool's expected relevant count 0.1 + 0.9:
    # A 0.1 / 1.0, B 0.9 / 1.0; thresholded (a no, b yes): A 0, B 1.
    assert c.diff == pytest.approx(0.8)
    assert report.systems["B"].thresholded == {"map": 1.0} and report.systems["A"].thresholded == {"map": 0.0}
    # 2000 Bernoulli(0.81) draws: standard error 0.0088; the seed fixes the figure.
    assert c.order_stability == pytest.approx(0.81, abs=0.035)
    again = _run(
        tmp_path,
        {"A": a, "B": b},
        backend=_prob_backend({"段落 a": 0.1, "段落 b": 0.9}),
        config=config,
        stability_resamples=2000,
        measures=["map"],
    )
    assert again.comparisons[0].order_stability == c.order_stability  # seeded


def test_order_stability_is_one_when_the_judge_is_certain(tmp_path: Path) -> None:
    a = [{"id": "q1", "query": "问题", "retrieval_context": [{"id": "a", "text": "段落 a"}]}]
    b = [{"id": "q1", "query": "问题", "retrieval_context": [{"id": "b", "text": "段落 b"}]}]
    report = _run(
        tmp_path,
        {"A": a, "B": b},
        backend=_prob_backend({"段落 a": 0.0, "段落 b": 1.0}),
        config=JudgeConfig(probability=True, explain=False),
        stability_resamples=200,
        measures=["map", "P_5"],
    )
    assert [c.order_stability for c in report.comparisons] == [1.0, 1.0]


def test_strict_refuses_before_any_call_and_names_the_line(tmp_path: Path) -> None:
    good = [{"id": "q1", "query": "问题", "retrieval_context": [_p("x", True)]}]
    bad = tmp_path / "B.jsonl"
    bad.write_text(
        json.dumps(good[0], ensure_ascii=False) + '\n{"id": "q2", "query": 5, "retrieval_context": ["t"]}\n'
    )
    fake = _keyword()
    with pytest.raises(InputError) as info:
        judge.compare_systems(
            {"A": _write(tmp_path / "A.jsonl", good), "B": bad},
            tmp_path / "r",
            backend=fake,
            strict=True,
            cache=False,
        )
    assert "--strict" in str(info.value)
    assert fake.calls == 0
    rejects = [json.loads(x) for x in (tmp_path / "r" / "input.rejects.jsonl").read_text().splitlines()]
    assert rejects == [
        {
            "path": str(bad),
            "line": 2,
            "field": "query",
            "error": "must be a string, got int",
            "action": "rejected",
        }
    ]
    # Without --strict the bad line is rejected and the rest is compared.
    report = judge.compare_systems(
        {"A": tmp_path / "A.jsonl", "B": bad}, tmp_path / "r2", backend=_keyword(), cache=False
    )
    assert report.pool.queries == 1 and any("rejected" in w for w in report.warnings)


def test_missing_file_and_bad_names_are_input_errors(tmp_path: Path) -> None:
    good = _write(tmp_path / "A.jsonl", [{"id": "q1", "query": "问题", "retrieval_context": ["t"]}])
    with pytest.raises(InputError) as info:
        judge.compare_systems({"A": good, "B": tmp_path / "nope.jsonl"}, tmp_path / "r", backend=_keyword())
    assert str(tmp_path / "nope.jsonl") in str(info.value)
    assert not (tmp_path / "r").exists()  # refused before anything was written
    with pytest.raises(InputError, match="at least two"):
        judge.compare_systems({"A": good}, tmp_path / "r", backend=_keyword())
    with pytest.raises(InputError, match="system name"):
        judge.compare_systems({"A": good, "a/b": good}, tmp_path / "r", backend=_keyword())
    with pytest.raises(InputError, match="no per-query mean"):
        judge.compare_systems({"A": good, "B": good}, tmp_path / "r", backend=_keyword(), measures=["runid"])


def test_rerun_asks_nothing_and_a_new_system_asks_only_its_new_pairs(tmp_path: Path) -> None:
    rows_a = [{"id": "q1", "query": "问题", "retrieval_context": [_p("x", True), _p("y", False)]}]
    rows_b = [{"id": "q1", "query": "问题", "retrieval_context": [_p("y", False), _p("z", True)]}]
    rows_c = [{"id": "q1", "query": "问题", "retrieval_context": [_p("w", True), _p("x", True)]}]
    paths = {n: _write(tmp_path / f"{n}.jsonl", r) for n, r in (("A", rows_a), ("B", rows_b), ("C", rows_c))}
    cache = tmp_path / "cache.sqlite"
    first = _keyword()
    report = judge.compare_systems(
        {"A": paths["A"], "B": paths["B"]}, tmp_path / "r", backend=first, cache=cache
    )
    assert first.calls == 3 and report.pool.calls == 3
    again = _keyword()
    rerun = judge.compare_systems(
        {"A": paths["A"], "B": paths["B"]}, tmp_path / "r", backend=again, cache=cache
    )
    assert again.calls == 0 and rerun.pool.calls == 0
    assert rerun.systems == report.systems and rerun.comparisons == report.comparisons
    # A third system changes q1's pool: the query is judged again, its old pairs from the cache.
    third = _keyword()
    grown = judge.compare_systems(paths, tmp_path / "r", backend=third, cache=cache)
    assert _asked(third) == [f"q1 的段落 w {REL}"]
    assert grown.pool.unique_pairs == 4 and grown.pool.judged == 4
    records = (tmp_path / "r" / "pool.judged.jsonl").read_text().splitlines()
    assert len(records) == 1 and json.loads(records[0])["docnos"] == ["x", "y", "z", "w"]


def _graded_prob_backend(probs: dict[str, dict[str, float]]) -> ScriptedBackend:
    def step(request: ChatRequest, _index: int) -> Any:
        return probs[passage_of(request)]

    return ScriptedBackend(step, name="fake:grade-probs", supports_probabilities=True)


def test_order_stability_redraws_grades_from_their_probabilities(tmp_path: Path) -> None:
    # Graded, relevant = grade >= 2. a: P(grade >= 2) = 0.2 (argmax 0); b: 0.8 (argmax: 2 and
    # 3 tie at 0.4 -> the lower, 2). B ahead iff a < 2 and b >= 2: 0.8 * 0.8 = 0.64.
    a = [{"id": "q1", "query": "问题", "retrieval_context": [{"id": "a", "text": "段落 a"}]}]
    b = [{"id": "q1", "query": "问题", "retrieval_context": [{"id": "b", "text": "段落 b"}]}]
    backend = _graded_prob_backend(
        {
            "段落 a": {"0": 0.5, "1": 0.3, "2": 0.1, "3": 0.1},
            "段落 b": {"0": 0.1, "1": 0.1, "2": 0.4, "3": 0.4},
        }
    )
    report = _run(
        tmp_path,
        {"A": a, "B": b},
        backend=backend,
        mode="graded",
        config=JudgeConfig(probability=True, explain=False),
        stability_resamples=2000,
        measures=["map"],
    )
    assert read_qrels(tmp_path / "report" / "pool.qrels").to_dict() == {"q1": {"a": 0, "b": 2}}
    (c,) = report.comparisons
    # Expected map: P(grade >= 2) over the pool's expected relevant count 0.2 + 0.8: A 0.2,
    # B 0.8; thresholded (argmax grades 0 and 2): A 0, B 1.
    assert c.diff == pytest.approx(0.6)
    assert report.systems["B"].thresholded == {"map": 1.0}
    assert c.order_stability == pytest.approx(0.64, abs=0.04)  # standard error 0.011


def test_redraw_scorer_equals_judge_trec_on_the_observed_pool(tmp_path: Path) -> None:
    # The in-memory evaluation order_stability uses, fed the observed grades, gives the
    # per-query values the file-based (judge trec) evaluation gives.

    rows: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    for i in range(5):
        q = f"q{i}"
        ctx = [_p(f"{q}-d{j}", (i + j) % 3 == 0, q) for j in range(6)]
        rows["A"].append({"id": q, "query": f"问题 {i}", "retrieval_context": ctx[:4]})
        rows["B"].append({"id": q, "query": f"问题 {i}", "retrieval_context": ctx[2:][::-1]})
    _run(tmp_path, rows)
    paths = {n: tmp_path / f"{n}.jsonl" for n in rows}
    inputs = read_systems(paths)
    pool = build_pool(inputs, depth=None, human=None)
    verdicts = read_pool_verdicts(tmp_path / "report" / "pool.judged.jsonl")
    qrels = pool_qrels(pool, verdicts, "binary")
    models = stability_models(pool, verdicts, qrels, "binary", 2)
    assert models is None  # no probabilities in this pool
    observed = [
        _QueryModel(t, list(d), np.array(list(d.values()), dtype=np.int64), np.array([], dtype=np.intp),
                    np.array([]), None, None)
        for t, d in qrels.items()
    ]  # fmt: skip
    measures = parse_measure_args(["map", "ndcg_cut_10", "P_5", "recall_10", "recip_rank", "Rprec"])
    for system in inputs.systems:
        run = tmp_path / "report" / "runs" / f"{system.name}.run"
        ev = evaluate_files(tmp_path / "report" / "pool.qrels", run, measures, 1)
        assert ev is not None
        scorer = _DrawScorer(_system_index(system, observed, inputs.tokens), measures, 1)
        values = scorer.score({m.token: m.grades for m in observed})
        for qid in ev.qids:
            assert [ev.per_query[qid][m.trec_name] for m in measures] == values[qid].tolist()


def test_unjudged_pairs_stay_out_of_the_qrels_until_retry_unjudged(tmp_path: Path) -> None:
    a = [{"id": "q1", "query": "问题", "retrieval_context": [_p("x", True), _p("y", True)]}]
    b = [{"id": "q1", "query": "问题", "retrieval_context": [_p("y", True)]}]
    keyword = _keyword()

    def flaky(request: ChatRequest, _index: int) -> Any:
        if "段落 y" in passage_of(request):
            return "我无法判断。"  # never valid JSON: re-asked, then unjudged
        return keyword.rule(request)

    broken = ScriptedBackend(flaky, name="fake:keyword")
    cache = tmp_path / "cache.sqlite"
    report = _run(tmp_path, {"A": a, "B": b}, backend=broken, cache=cache)
    assert (report.pool.judged, report.pool.unjudged) == (1, 1)
    assert read_qrels(tmp_path / "report" / "pool.qrels").to_dict() == {"q1": {"x": 1}}
    assert any("--retry-unjudged" in w for w in report.warnings)
    # A plain re-run keeps it unjudged and asks nothing.
    quiet = _keyword()
    again = _run(tmp_path, {"A": a, "B": b}, backend=quiet, cache=cache)
    assert quiet.calls == 0 and again.pool.unjudged == 1
    # --retry-unjudged asks only for y.
    fixed = _keyword()
    retried = _run(tmp_path, {"A": a, "B": b}, backend=fixed, cache=cache, retry_unjudged=True)
    assert _asked(fixed) == [f"q1 的段落 y {REL}"]
    assert (retried.pool.judged, retried.pool.unjudged, retried.pool.calls) == (2, 0, 1)
    assert read_qrels(tmp_path / "report" / "pool.qrels").to_dict() == {"q1": {"x": 1, "y": 1}}
    assert retried.systems["B"].measures["map"] == pytest.approx(0.5)
