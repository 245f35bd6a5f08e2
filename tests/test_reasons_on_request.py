"""Reasons on request: a comparison judges verdicts and P(yes) first and asks for reasons
only for the pairs its report shows; the verdicts are those of judging every reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from judge.backends import ChatRequest, ResilientBackend, RuleBackend, ensure_resilient
from judge.judging import JudgeConfig
from judge.systems import SystemsOptions
from judge.systems._pool import read_pool_verdicts
from judge.systems._reasons import shown_pairs
from judge.systems._run import run_comparison


def _systems(tmp_path: Path) -> dict[str, Path]:
    """``one`` finds 1 relevant passage of 4 per query, ``all`` all 4 (5 queries)."""
    one, four = [], []
    for i in range(5):
        rel = [{"id": f"q{i}-r{j}", "text": f"查询 {i} 的相关段落 {j} RELEVANT"} for j in range(4)]
        irr = [{"id": f"q{i}-n{j}", "text": f"查询 {i} 的无关段落 {j}"} for j in range(3)]
        query = f"第 {i} 个问题：小狗贫血的表现"
        one.append({"id": f"q{i}", "query": query, "retrieval_context": [rel[0], *irr]})
        four.append({"id": f"q{i}", "query": query, "retrieval_context": rel[: i % 2 + 3]})
    paths = {"one": tmp_path / "one.jsonl", "all": tmp_path / "all.jsonl"}
    for name, rows in (("one", one), ("all", four)):
        paths[name].write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    return paths


def _judge() -> tuple[ResilientBackend, list[ChatRequest]]:
    """A keyword judge that prefers probabilities (as the embedded one does): automatic
    probability mode with reasons."""
    seen: list[ChatRequest] = []
    keyword = RuleBackend.keyword("RELEVANT")

    def rule(request: ChatRequest) -> Any:
        seen.append(request)
        return keyword.rule(request)

    return ensure_resilient(RuleBackend(rule, prefers_probabilities=True)), seen


def _reasons_asked(requests: list[ChatRequest]) -> int:
    return sum(1 for r in requests if not r.candidates)


def _pool(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    judged = read_pool_verdicts(folder / "pool.judged.jsonl").verdicts
    return {(q, d): v.model_dump() for q, by_docno in judged.items() for d, v in by_docno.items()}


async def test_reasons_only_for_the_pairs_the_report_shows_and_the_same_verdicts(tmp_path: Path) -> None:
    systems = _systems(tmp_path)
    options = SystemsOptions(top_queries=2, top_passages=2)
    on_request, asked = _judge()
    report = await run_comparison(
        systems, tmp_path / "on_request", on_request, JudgeConfig(), options=options
    )
    every, asked_every = _judge()
    full = await run_comparison(
        systems, tmp_path / "every", every, JudgeConfig(explain=True), options=options
    )
    pooled, pooled_every = _pool(tmp_path / "on_request"), _pool(tmp_path / "every")
    # Verdicts and P(yes) are the same either way; only the reasons differ.
    assert pooled.keys() == pooled_every.keys() and len(pooled) == 6 + 7 + 6 + 7 + 6  # unions per query
    for pair, verdict in pooled.items():
        assert (verdict["verdict"], verdict["p_yes"]) == (
            pooled_every[pair]["verdict"],
            pooled_every[pair]["p_yes"],
        )
        assert verdict["reason"] == "" and pooled_every[pair]["reason"]
    # Reasons were asked for the 2 differing queries x 2 systems x top 2 passages, no more.
    shown = {(q, d) for q, docs in _shown(report).items() for d in docs}
    assert len(shown) == _reasons_asked(asked) <= 2 * 2 * 2
    assert _reasons_asked(asked_every) == len(pooled)
    # A shown pair costs its probability pass again (it keeps the embedded judge's reasons
    # batched) and its reason.
    assert report.report.pool.calls == len(pooled) + 2 * len(shown)

    # The report shows the reasons it asked for, as the every-reason run shows them.
    def reasons(r: Any) -> list[str]:
        return [p["reason"] for q in r.differences()["queries"] for s in q["systems"] for p in s["passages"]]

    assert reasons(report) == reasons(full) and all(reasons(report))
    assert shown_pairs(report.data) == {}  # nothing the report shows lacks its reason now


def _shown(report: Any) -> dict[str, list[str]]:
    return {
        q["id"]: [p["docno"] for s in q["systems"] for p in s["passages"]]
        for q in report.differences()["queries"]
    }


async def test_a_reason_that_failed_is_asked_again_on_the_next_run(tmp_path: Path) -> None:
    """A reason whose generation failed is neither cached nor kept in ``reasons/``: the same
    comparison run again (the backend back) asks it again and shows it."""
    from judge.backends import TransientError
    from judge.store import SQLiteVerdictStore

    systems = _systems(tmp_path)
    options = SystemsOptions(top_queries=2, top_passages=2)
    failing = {"on": True}
    keyword = RuleBackend.keyword("RELEVANT")
    asked: list[ChatRequest] = []

    def rule(request: ChatRequest) -> Any:
        asked.append(request)
        if not request.candidates and failing["on"]:
            raise TransientError("the reason's generation failed")
        return keyword.rule(request)

    backend = ensure_resilient(RuleBackend(rule, prefers_probabilities=True), max_retries=0)
    store = SQLiteVerdictStore(tmp_path / "cache.sqlite")
    first = await run_comparison(
        systems, tmp_path / "out", backend, JudgeConfig(), store=store, options=options
    )
    shown = shown_pairs(first.data)  # every shown pair still lacks its reason
    assert shown and sum(len(d) for d in shown.values()) == _reasons_asked(asked)
    failing["on"] = False
    before = _reasons_asked(asked)
    again = await run_comparison(
        systems, tmp_path / "out", backend, JudgeConfig(), store=store, options=options
    )
    assert _reasons_asked(asked) - before == sum(len(d) for d in shown.values())
    assert shown_pairs(again.data) == {}
