"""The batch runner with in-process fake backends: records, summary, cache, resume, retry."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from judge.backends._base import ChatRequest, PermanentError, TransientError
from judge.backends._fake import Reply, RuleBackend
from judge.backends._resilient import ResilientBackend
from judge.batch import (
    BatchOptions,
    LocalExecutor,
    default_output_path,
    retry_unjudged,
    score_dataset,
    sidecar_path,
)
from judge.batch._runner import score_dataset_sync
from judge.io._errors import InputError
from judge.judging import JudgeConfig
from judge.store import SQLiteVerdictStore, recover_output

QUIET = BatchOptions(progress="quiet", fsync=False)


def _dataset(path: Path, rows: list[Any]) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


ROWS: list[dict[str, Any]] = [
    {"id": "q1", "query": "感冒", "retrieval_context": ["RELEVANT a", "b", "RELEVANT c"]},
    {
        "id": "q2",
        "query": "高铁",
        "retrieval_context": [{"id": "d1", "text": "x"}, {"id": "d2", "text": "RELEVANT y"}],
    },
    {"id": "q3", "query": "光合作用", "retrieval_context": ["z"]},
]


def _by_id(record: dict[str, Any]) -> str:
    return str(record["id"])


def _passage_of(request: ChatRequest) -> str:
    text = "\n".join(m.content for m in request.messages if m.role == "user")
    blocks = re.findall(r"<passage>\n(.*?)\n</passage>", text, flags=re.DOTALL)
    return str(blocks[-1]) if blocks else text


def _keyword(**kw: Any) -> RuleBackend:
    return RuleBackend.keyword("RELEVANT", text_of=_passage_of, **kw)


def _binary_ndcg(rel: list[int], k: int) -> float:
    dcg = sum(r / math.log2(i + 2) for i, r in enumerate(rel[:k]))
    ideal = sorted(rel, reverse=True)
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal[:k]))
    return dcg / idcg if idcg else 0.0


async def test_scores_every_query_with_hand_computed_metrics(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    out = tmp_path / "d.judged.jsonl"
    backend = _keyword()
    outcome = await score_dataset(inp, out, backend, JudgeConfig(), options=QUIET)
    recs = {r["id"]: r for r in recover_output(out)}
    assert sorted(recs) == ["q1", "q2", "q3"]
    q1 = recs["q1"]
    assert [v["verdict"] for v in q1["verdicts"]] == ["yes", "no", "yes"]
    assert q1["score"] == pytest.approx(2 / 3, abs=1e-6)
    assert q1["ap"] == pytest.approx((1 + 2 / 3) / 2, abs=1e-6)
    assert q1["ndcg"]["5"] == pytest.approx(_binary_ndcg([1, 0, 1], 5), abs=1e-6)
    assert q1["rr"] == 1.0 and q1["precision"]["5"] == pytest.approx(0.4)
    assert recs["q2"]["rr"] == 0.5 and recs["q2"]["docnos"] == ["d1", "d2"]
    assert recs["q3"]["ap"] == 0.0 and recs["q3"]["score"] == 0.0
    s = outcome.summary
    assert s["queries"] == 3 and s["passages"] == 6 and s["unjudged"] == 0
    assert s["judge"]["map"] == pytest.approx(((1 + 2 / 3) / 2 + 0.5 + 0.0) / 3, abs=1e-6)
    assert s["judge"]["mrr"] == pytest.approx((1 + 0.5 + 0) / 3, abs=1e-6)
    assert s["judge"]["mean_score"] == pytest.approx((2 / 3 + 1 / 2 + 0) / 3, abs=1e-6)
    assert s["verdicts"] == {"no": 3, "yes": 3}
    assert s["score_distribution"]["counts"] == [1, 0, 1, 1, 0]  # 0, 0.5, 0.667
    assert s["ground_truth"] is None
    assert s["this_run"]["queries_scored"] == 3
    saved = json.loads(sidecar_path(out, "summary", "json").read_text(encoding="utf-8"))
    assert saved["judge"] == s["judge"]
    assert len(backend.requests) == 6


async def test_second_run_makes_zero_llm_calls_and_cache_is_shared(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    async with SQLiteVerdictStore(tmp_path / "cache.sqlite") as store:
        first = _keyword()
        await score_dataset(inp, tmp_path / "a.jsonl", first, JudgeConfig(), store=store, options=QUIET)
        assert len(first.requests) == 6
        second = _keyword()
        await score_dataset(inp, tmp_path / "b.jsonl", second, JudgeConfig(), store=store, options=QUIET)
        assert second.requests == []
        # System B retrieves one new passage: only that one is judged.
        other = _dataset(
            tmp_path / "sysb.jsonl",
            [{"id": "q1", "query": "感冒", "retrieval_context": ["b", "new passage", "RELEVANT a"]}],
        )
        third = _keyword()
        await score_dataset(other, tmp_path / "c.jsonl", third, JudgeConfig(), store=store, options=QUIET)
        assert [_passage_of(r).strip() for r in third.requests] == ["new passage"]
    a = recover_output(tmp_path / "a.jsonl")
    b = recover_output(tmp_path / "b.jsonl")
    assert [r["ap"] for r in sorted(a, key=_by_id)] == [r["ap"] for r in sorted(b, key=_by_id)]
    assert all(v["cached"] for r in b for v in r["verdicts"])


async def test_resume_skips_finished_queries_and_repairs_a_torn_line(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    out = tmp_path / "o.jsonl"
    await score_dataset(inp, out, _keyword(), JudgeConfig(), options=QUIET)
    lines = out.read_bytes().splitlines(keepends=True)
    done = json.loads(lines[0])["id"]
    out.write_bytes(lines[0] + lines[1][:20])  # one record kept, one torn by a "kill"
    backend = _keyword()
    outcome = await score_dataset(inp, out, backend, JudgeConfig(), options=QUIET)
    ids = [r["id"] for r in recover_output(out)]
    assert sorted(ids) == ["q1", "q2", "q3"] and len(ids) == 3
    assert outcome.skipped_done == 1 and outcome.scored_now == 2
    asked = {_passage_of(r).strip() for r in backend.requests}
    done_texts = {
        p if isinstance(p, str) else p["text"]
        for row in ROWS
        if row["id"] == done
        for p in row["retrieval_context"]
    }
    assert not asked & done_texts
    assert outcome.summary["queries"] == 3  # the summary covers the earlier run's records too


async def test_resume_refuses_an_output_of_another_mode(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    out = tmp_path / "o.jsonl"
    await score_dataset(inp, out, _keyword(), JudgeConfig(), options=QUIET)
    with pytest.raises(InputError, match="--mode binary"):
        await score_dataset(inp, out, _keyword(), JudgeConfig(mode="graded"), options=QUIET)


def _flaky_rule(broken: set[str]) -> Any:
    healthy = _keyword()

    def rule(request: ChatRequest) -> Reply:
        if any(b in _passage_of(request) for b in broken):
            return TransientError("HTTP 500 (simulated)")
        return healthy.rule(request)

    return rule


async def _no_sleep(_: float) -> None:
    await asyncio.sleep(0)


async def test_unjudged_passages_are_kept_explicit_and_retry_clears_them(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    out = tmp_path / "o.jsonl"
    store = SQLiteVerdictStore(tmp_path / "c.sqlite")
    try:
        flaky = ResilientBackend(
            RuleBackend(_flaky_rule({"RELEVANT c", "z"})), max_retries=2, sleep=_no_sleep
        )
        outcome = await score_dataset(inp, out, flaky, JudgeConfig(), store=store, options=QUIET)
        assert flaky.stats.retries == 4 and flaky.stats.failures == 2
        recs = {r["id"]: r for r in recover_output(out)}
        assert sorted(recs) == ["q1", "q2", "q3"]  # no query dropped
        q1 = recs["q1"]
        assert [v["verdict"] for v in q1["verdicts"]] == ["yes", "no", "unjudged"]
        assert q1["verdicts"][2]["error"]
        assert q1["unjudged"] == 1
        # Dropped, not counted as irrelevant: AP over [yes, no] = 1.0.
        assert q1["ap"] == 1.0
        assert [p["text"] for p in q1["unjudged_passages"]] == ["RELEVANT c"]
        assert recs["q3"]["ap"] is None and recs["q3"]["score"] is None
        assert outcome.summary["unjudged"] == 2 and outcome.summary["queries_without_judged"] == 1

        healthy = _keyword()
        again = await retry_unjudged(out, healthy, JudgeConfig(), store=store, options=QUIET)
        assert sorted(_passage_of(r).strip() for r in healthy.requests) == ["RELEVANT c", "z"]
        recs2 = {r["id"]: r for r in recover_output(out)}
        assert [r["id"] for r in recover_output(out)] == [r["id"] for r in recs.values()]  # order kept
        assert recs2["q1"]["unjudged"] == 0 and recs2["q1"]["unjudged_passages"] == []
        assert recs2["q1"]["ap"] == pytest.approx((1 + 2 / 3) / 2, abs=1e-6)
        assert recs2["q3"]["ap"] == 0.0
        assert recs2["q2"] == recs["q2"]  # untouched
        assert again.summary["unjudged"] == 0
        assert again.summary["this_run"]["passages_retried"] == 2
        # Nothing left: a second retry asks nothing.
        idle = _keyword()
        await retry_unjudged(out, idle, JudgeConfig(), store=store, options=QUIET)
        assert idle.requests == []
    finally:
        await store.aclose()


async def test_permanent_error_propagates_and_keeps_finished_queries(tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "query": "q", "retrieval_context": [f"p{i}"]} for i in range(5)]
    inp = _dataset(tmp_path / "d.jsonl", rows)
    out = tmp_path / "o.jsonl"
    ok = _keyword()

    def rule(request: ChatRequest) -> Reply:
        if "p3" in _passage_of(request):
            return PermanentError("HTTP 401: invalid key")
        return ok.rule(request)

    opts = BatchOptions(progress="quiet", concurrency=1, window=1, fsync=False)
    with pytest.raises(PermanentError, match="401"):
        await score_dataset(inp, out, RuleBackend(rule), JudgeConfig(), options=opts)
    ids = [r["id"] for r in recover_output(out)]
    # Every query finished before the failure is kept, and whole. q4 was already in flight
    # (queries in flight = window + 1): if it finished judging before the cancellation
    # reached it, its line is kept too (its verdicts were paid for); q3 never is.
    assert ids[:3] == ["q0", "q1", "q2"]
    assert ids in (["q0", "q1", "q2"], ["q0", "q1", "q2", "q4"])
    # A rerun after fixing the key judges only what is missing.
    backend = _keyword()
    await score_dataset(inp, out, backend, JudgeConfig(), options=opts)
    assert sorted(r["id"] for r in recover_output(out)) == ["q0", "q1", "q2", "q3", "q4"]
    assert len(backend.requests) == 5 - len(ids)


async def test_bad_lines_are_reported_and_the_rest_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[Any] = [
        ROWS[0],
        "{oops",
        {"id": "q2", "query": "x", "retrieval_context": []},
        {"id": "q1", "query": "dup", "retrieval_context": ["a"]},
        {"id": "q5", "query": "long", "retrieval_context": ["RELEVANT " + "x" * 50]},
    ]
    inp = _dataset(tmp_path / "d.jsonl", rows)
    out = tmp_path / "o.jsonl"
    opts = BatchOptions(progress="quiet", max_passage_chars=20, fsync=False)
    outcome = await score_dataset(inp, out, _keyword(), JudgeConfig(), options=opts)
    err = capsys.readouterr().err
    assert f"{inp}:2: not valid JSON" in err
    assert f"{inp}:3: field 'retrieval_context': is an empty list" in err
    assert f"{inp}:4: field 'id': duplicate id 'q1'" in err
    assert f"{inp}:5: field 'retrieval_context[0]': passage of 59 characters truncated to 20" in err
    rejects = [json.loads(x) for x in sidecar_path(out, "rejects", "jsonl").read_text().splitlines()]
    assert [(r["line"], r["field"], r["action"]) for r in rejects] == [
        (2, None, "rejected"),
        (3, "retrieval_context", "rejected"),
        (4, "id", "rejected"),
        (5, "retrieval_context[0]", "truncated"),
    ]
    recs = {r["id"]: r for r in recover_output(out)}
    assert sorted(recs) == ["q1", "q5"]
    assert recs["q5"]["verdicts"][0]["truncated"] is True and recs["q5"]["truncated"] == 1
    assert outcome.rejected == 3


async def test_strict_refuses_before_any_call(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", [ROWS[0], {"id": "x", "retrieval_context": ["a"]}, ROWS[1]])
    out = tmp_path / "o.jsonl"
    backend = _keyword()
    opts = BatchOptions(progress="quiet", strict=True, fsync=False)
    with pytest.raises(InputError, match="--strict refuses"):
        await score_dataset(inp, out, backend, JudgeConfig(), options=opts)
    assert backend.requests == []
    assert not out.exists()
    [rej] = [json.loads(x) for x in sidecar_path(out, "rejects", "jsonl").read_text().splitlines()]
    assert (rej["line"], rej["field"]) == (2, "query")


async def test_ground_truth_metrics_beside_the_judges(tmp_path: Path) -> None:
    row = {
        "id": "g1",
        "query": "q",
        "retrieval_context": [
            {"id": "d1", "text": "RELEVANT 1"},
            {"id": "d2", "text": "RELEVANT 2"},
            {"id": "d3", "text": "c"},
        ],
        "qrels": {"d1": 2, "d9": 1},
    }
    row2 = {
        "id": "g2",
        "query": "q",
        "retrieval_context": [{"id": "e1", "text": "n"}, {"id": "e2", "text": "RELEVANT"}],
        "expected_ids": ["e2"],
    }
    inp = _dataset(tmp_path / "d.jsonl", [row, row2])
    outcome = await score_dataset(inp, tmp_path / "o.jsonl", _keyword(), JudgeConfig(), options=QUIET)
    recs = {r["id"]: r for r in recover_output(tmp_path / "o.jsonl")}
    gt = recs["g1"]["ground_truth"]
    assert gt["ap"] == 0.5  # d1 at rank 1 found; d9 never retrieved: (1/1) / 2
    idcg = 2 + 1 / math.log2(3)
    assert gt["ndcg"]["5"] == pytest.approx(2 / idcg, abs=1e-6)
    assert gt["recall"]["5"] == 0.5 and gt["rr"] == 1.0 and gt["precision"]["5"] == pytest.approx(0.2)
    assert gt["agreement"] == {"tp": 1, "fp": 1, "fn": 0, "tn": 1}
    gt2 = recs["g2"]["ground_truth"]
    assert (gt2["ap"], gt2["rr"]) == (0.5, 0.5)
    s = outcome.summary["ground_truth"]
    assert s["queries"] == 2 and s["map"] == 0.5
    assert s["judge_agreement"]["accuracy"] == pytest.approx(4 / 5)


def test_default_paths() -> None:
    assert default_output_path("data/x.jsonl") == Path("data/x.judged.jsonl")
    assert default_output_path("data/x.jsonl.gz") == Path("data/x.judged.jsonl")
    assert sidecar_path("o/x.judged.jsonl", "summary", "json") == Path("o/x.judged.summary.json")
    assert sidecar_path("o/x.judged.jsonl", "rejects", "jsonl") == Path("o/x.judged.rejects.jsonl")


def test_sync_wrapper_agrees_with_async(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    a = score_dataset_sync(inp, tmp_path / "a.jsonl", _keyword(), JudgeConfig(), options=QUIET)
    b = asyncio.run(score_dataset(inp, tmp_path / "b.jsonl", _keyword(), JudgeConfig(), options=QUIET))
    assert a.summary["judge"] == b.summary["judge"]

    def strip(r: dict[str, Any]) -> dict[str, Any]:  # verdict latencies differ between runs
        return {k: v for k, v in r.items() if k != "verdicts"}

    ra = [strip(r) for r in sorted(recover_output(tmp_path / "a.jsonl"), key=_by_id)]
    rb = [strip(r) for r in sorted(recover_output(tmp_path / "b.jsonl"), key=_by_id)]
    assert ra == rb


async def test_graded_mode_records_grades(tmp_path: Path) -> None:
    inp = _dataset(
        tmp_path / "d.jsonl", [{"id": "g", "query": "q", "retrieval_context": ["HIGH", "MID", "LOW", "none"]}]
    )
    backend = RuleBackend.keyword("HIGH", grades={"HIGH": 3, "MID": 2, "LOW": 1}, text_of=_passage_of)
    outcome = await score_dataset(
        inp, tmp_path / "o.jsonl", backend, JudgeConfig(mode="graded"), options=QUIET
    )
    [rec] = recover_output(tmp_path / "o.jsonl")
    assert [v["grade"] for v in rec["verdicts"]] == [3, 2, 1, 0]
    assert [v["verdict"] for v in rec["verdicts"]] == ["yes", "yes", "no", "no"]
    assert rec["ndcg"]["5"] == 1.0  # already ideally ordered
    assert outcome.summary["grades"] == {"0": 1, "1": 1, "2": 1, "3": 1}


def _listwise_rule(skip: int | None = None) -> RuleBackend:
    """Listwise prompts get one verdict per numbered passage (``skip`` leaves one out, so
    that passage falls back to pointwise); pointwise prompts the keyword verdict."""
    pointwise = _keyword()

    def rule(request: ChatRequest) -> Reply:
        text = "\n".join(m.content for m in request.messages if m.role == "user")
        items = re.findall(r'<passage id="(\d+)">\n(.*?)\n</passage>', text, flags=re.DOTALL)
        if not items:
            return pointwise.rule(request)
        verdicts = [
            {"id": int(i), "verdict": "yes" if "RELEVANT" in body else "no", "reason": "理由"}
            for i, body in items
            if int(i) != skip
        ]
        return json.dumps({"verdicts": verdicts}, ensure_ascii=False)

    return RuleBackend(rule)


async def test_listwise_run_makes_one_call_per_query_and_agrees_with_pointwise(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    pointwise = await score_dataset(inp, tmp_path / "p.jsonl", _keyword(), JudgeConfig(), options=QUIET)
    backend = _listwise_rule()
    opts = BatchOptions(progress="quiet", fsync=False, listwise=True)
    listwise = await score_dataset(inp, tmp_path / "l.jsonl", backend, JudgeConfig(), options=opts)
    assert len(backend.requests) == 3  # one per query instead of one per passage (6)
    assert listwise.summary["judge"] == pointwise.summary["judge"]
    assert listwise.summary["config"]["judging"] == "listwise"
    recs = {r["id"]: r for r in recover_output(tmp_path / "l.jsonl")}
    assert [v["verdict"] for v in recs["q1"]["verdicts"]] == ["yes", "no", "yes"]
    assert {v["template_id"] for v in recs["q1"]["verdicts"]} == {"listwise.zh.v1"}


async def test_listwise_reply_missing_a_passage_falls_back_to_pointwise(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS[:1])
    backend = _listwise_rule(skip=2)
    opts = BatchOptions(progress="quiet", fsync=False, listwise=True)
    config = JudgeConfig(language="zh", max_reasks=1)
    out = await score_dataset(inp, tmp_path / "l.jsonl", backend, config, options=opts)
    # One listwise call, one re-ask (still missing #2), then passage 2 alone.
    assert len(backend.requests) == 3
    (rec,) = recover_output(tmp_path / "l.jsonl")
    assert [v["verdict"] for v in rec["verdicts"]] == ["yes", "no", "yes"]
    assert [v["template_id"] for v in rec["verdicts"]] == ["listwise.zh.v1", "binary.zh.v2", "listwise.zh.v1"]
    assert out.summary["unjudged"] == 0


async def test_listwise_refuses_probability_mode(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    opts = BatchOptions(progress="quiet", fsync=False, listwise=True)
    with pytest.raises(InputError, match="listwise"):
        await score_dataset(
            inp, tmp_path / "l.jsonl", _keyword(), JudgeConfig(probability=True), options=opts
        )


async def test_listwise_run_resumes_from_the_store_and_a_rerun_makes_no_call(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    out = tmp_path / "l.jsonl"
    opts = BatchOptions(progress="quiet", fsync=False, listwise=True)
    async with SQLiteVerdictStore(tmp_path / "c.sqlite") as store:
        # q1's reply leaves passage 2 out: it is judged pointwise and stored under the
        # run's listwise key as well.
        first = _listwise_rule(skip=2)
        await score_dataset(inp, out, first, JudgeConfig(max_reasks=0), store=store, options=opts)
        assert len(first.requests) == 3 + 2  # one listwise call per query + 2 fallbacks (q1, q2)
        before = {r["id"]: r for r in recover_output(out)}
        # Killed after q1 (only its line kept): the resumed run asks nothing, every
        # passage of q2 and q3 comes from the store.
        out.write_text(json.dumps(before["q1"], ensure_ascii=False) + "\n", encoding="utf-8")
        resumed = _listwise_rule()
        again = await score_dataset(inp, out, resumed, JudgeConfig(max_reasks=0), store=store, options=opts)
        assert resumed.requests == []
        assert again.summary["this_run"]["queries_scored"] == 2
        assert again.summary["this_run"]["passages_cached"] == 3
        # A re-run into a new output: zero calls, the same verdicts.
        rerun = _listwise_rule()
        fresh = await score_dataset(
            inp, tmp_path / "l2.jsonl", rerun, JudgeConfig(max_reasks=0), store=store, options=opts
        )
        assert rerun.requests == []
        after = {r["id"]: r for r in recover_output(tmp_path / "l2.jsonl")}
        for qid, rec in before.items():
            assert [v["verdict"] for v in after[qid]["verdicts"]] == [v["verdict"] for v in rec["verdicts"]]
            assert [v["template_id"] for v in after[qid]["verdicts"]] == [
                v["template_id"] for v in rec["verdicts"]
            ]
            assert all(v["cached"] for v in after[qid]["verdicts"])
        assert fresh.summary["judge"] == again.summary["judge"]
        # Listwise verdicts have their own keys: the same backend judging pointwise is not
        # served listwise ones (fallbacks included), it asks for every passage.
        pointwise = _listwise_rule()
        await score_dataset(
            inp, tmp_path / "p.jsonl", pointwise, JudgeConfig(max_reasks=0), store=store, options=QUIET
        )
        assert len(pointwise.requests) == 6


class _CountingExecutor(LocalExecutor):
    """The local executor, counting the queries it holds at once."""

    def __init__(self, backend: Any, window: int) -> None:
        super().__init__(backend, window=window)
        self.active = 0
        self.peak = 0
        self.queries = 0

    async def judge(self, query: str, jobs: Any, config: JudgeConfig, **kw: Any) -> Any:
        self.active += 1
        self.queries += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(0.002)
            return await super().judge(query, jobs, config, **kw)
        finally:
            self.active -= 1


async def test_retry_streams_with_bounded_queries_and_reports_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        {"id": f"q{i}", "query": f"查询{i}", "retrieval_context": [f"RELEVANT a{i}", f"FAIL b{i}", f"c{i}"]}
        for i in range(30)
    ]
    inp = _dataset(tmp_path / "d.jsonl", rows)
    out = tmp_path / "o.jsonl"

    def failing(request: ChatRequest) -> Reply:
        if "FAIL" in _passage_of(request):
            return TransientError("HTTP 503")
        return _keyword().rule(request)

    flaky = ResilientBackend(RuleBackend(failing), max_retries=0, sleep=_no_sleep)
    await score_dataset(inp, out, flaky, JudgeConfig(), options=QUIET)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 30 and all(json.loads(x)["unjudged"] == 1 for x in lines)
    # Break one record's unjudged entry (no text): it cannot be re-asked.
    broken = json.loads(lines[4])
    del broken["unjudged_passages"][0]["text"]
    lines[4] = json.dumps(broken, ensure_ascii=False)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids_before = [json.loads(x)["id"] for x in lines]

    healthy = _keyword()
    executor = _CountingExecutor(healthy, window=2)
    opts = BatchOptions(progress="quiet", fsync=False, window=2, executor=executor)
    again = await retry_unjudged(out, healthy, JudgeConfig(), options=opts)
    # 29 queries re-asked, never more than window + 1 of them at once
    assert executor.queries == 29 and 2 <= executor.peak <= 3
    assert len(healthy.requests) == 29
    recs = recover_output(out)
    assert [r["id"] for r in recs] == ids_before  # file order kept
    assert recs[4] == broken  # the rejected record is kept as it was
    assert sum(r["unjudged"] for r in recs) == 1
    this_run = again.summary["this_run"]
    assert this_run["kind"] == "retry-unjudged"
    assert this_run["rejected_lines"] == 1 and again.rejected == 1
    assert this_run["passages_retried"] == 29 and this_run["queries_scored"] == 29
    assert this_run["queries_skipped_already_done"] == 1
    assert this_run["still_unjudged"] == 0
    err = capsys.readouterr().err
    assert f"{out}:5: field 'unjudged_passages'" in err
    rejects = tmp_path / "o.retry-rejects.jsonl"
    assert again.rejects_path == rejects
    [reject] = [json.loads(x) for x in rejects.read_text(encoding="utf-8").splitlines()]
    assert (reject["line"], reject["field"], reject["action"]) == (5, "unjudged_passages", "rejected")
    assert not list(tmp_path.glob("*.tmp"))


async def test_score_and_retry_write_one_summary_shape(tmp_path: Path) -> None:
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    out = tmp_path / "o.jsonl"
    scored = await score_dataset(inp, out, _keyword(), JudgeConfig(), options=QUIET)
    retried = await retry_unjudged(out, _keyword(), JudgeConfig(), options=QUIET)
    assert scored.summary["this_run"]["kind"] == "score"
    assert retried.summary["this_run"]["kind"] == "retry-unjudged"
    assert set(scored.summary) == set(retried.summary)
    assert set(scored.summary["this_run"]) == set(retried.summary["this_run"])
    assert retried.summary["this_run"]["queries_skipped_already_done"] == 3
    assert retried.summary["judge"] == scored.summary["judge"]


async def test_the_summarys_backend_block_has_every_counter_unpriced_calls_included(tmp_path: Path) -> None:
    """The summary's ``this_run.backend`` is the wrapper's whole stat record: six passages on a
    model missing from the price table are six unpriced calls costing 0."""
    from judge.backends import BackendStats, PriceTable

    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    backend = ResilientBackend(_keyword(), prices=PriceTable.from_mapping({}))
    outcome = await score_dataset(inp, tmp_path / "o.jsonl", backend, JudgeConfig(), options=QUIET)
    block = outcome.summary["this_run"]["backend"]
    assert block["unpriced_calls"] == 6
    assert (block["requests"], block["calls"], block["successes"], block["cost"]) == (6, 6, 6, 0.0)
    assert block == backend.stats.as_dict() and set(block) == {*BackendStats.counters(), "currency"}


async def test_whole_file_passes_run_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a whole input or output (strict check, resume scan, line count) happens in a
    worker thread, so a server's event loop keeps answering while a large file is read."""
    import judge.batch._runner as runner

    on_loop: dict[str, bool] = {}

    def watched(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
                on_loop[name] = True
            except RuntimeError:
                on_loop[name] = False
            return real(*args, **kwargs)

        return call

    for name in ("strict_check", "scan_output", "count_lines"):
        monkeypatch.setattr(runner, name, watched(name, getattr(runner, name)))
    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    out = tmp_path / "d.judged.jsonl"
    strict = BatchOptions(progress="quiet", fsync=False, strict=True)
    await score_dataset(inp, out, _keyword(), JudgeConfig(), options=strict)
    assert on_loop == {"strict_check": False, "scan_output": False, "count_lines": False}
    on_loop.clear()
    await retry_unjudged(out, _keyword(), JudgeConfig(), options=QUIET)
    assert on_loop == {"scan_output": False}


async def test_a_second_writer_of_one_output_is_refused_before_any_call(tmp_path: Path) -> None:
    """Two processes scoring into one output would write every record twice: the one that
    comes second is refused (exit 2 naming -o and who holds it) before any call, for a
    score and for a retry; the lock goes with its holder."""
    from judge.io import OutputBusy, WriterLock

    inp = _dataset(tmp_path / "d.jsonl", ROWS)
    out = tmp_path / "o.jsonl"
    held = WriterLock(tmp_path / ".o.jsonl.lock")  # another writer (another open file: flock)
    held.acquire()
    try:
        backend = _keyword()
        with pytest.raises(OutputBusy) as busy:
            await score_dataset(inp, out, backend, JudgeConfig(), options=QUIET)
        assert busy.value.field == "-o" and "is being written by another judge score" in str(busy.value)
        assert backend.requests == [] and not out.exists()
    finally:
        held.release()
    backend = _keyword()
    await score_dataset(inp, out, backend, JudgeConfig(), options=QUIET)
    assert len(backend.requests) == 6 and len(recover_output(out)) == 3
    held.acquire()
    try:
        idle = _keyword()
        with pytest.raises(OutputBusy):
            await retry_unjudged(out, idle, JudgeConfig(), options=QUIET)
        assert idle.requests == []
    finally:
        held.release()
    # released at the end of each run: a third run resumes (nothing left to ask)
    again = _keyword()
    await score_dataset(inp, out, again, JudgeConfig(), options=QUIET)
    assert again.requests == [] and len(recover_output(out)) == 3
