"""``judge score`` end to end against the simulated OpenAI-compatible server."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_sim

from judge.cli import main
from judge.io import read_qrels, read_run

sim_mod = load_sim()


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with sim_mod.SimProcess(None, latency_ms=10, jitter_ms=5, capacity=1000) as s:
        yield s


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)


def _rows(n: int = 4, prefix: str = "q") -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        ctx = [
            {"id": f"{prefix}{i}-d{j}", "text": f"{prefix} {i} 段落 {j} <rel={(i + j) % 4}>"}
            for j in range(3)
        ]
        rows.append(
            {
                "id": f"{prefix}{i}",
                "query": f"问题 {i}",
                "retrieval_context": ctx,
                "expected_ids": [f"{prefix}{i}-d0"],
            }
        )
    return rows


def _write(path: Path, rows: list[Any]) -> Path:
    text = "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")
    return path


def _score(sim: Any, *args: str) -> list[str]:
    return ["score", *args, "--backend", "openai:simulated-judge", "--base-url", sim.base_url, "--quiet"]


def _requests(sim: Any) -> int:
    return int(sim.stats()["total"])


def test_default_output_summary_and_second_run_is_free(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _write(tmp_path / "sample.jsonl", _rows(4))
    before = _requests(sim)
    assert main(_score(sim, str(inp))) == 0
    summary = json.loads(capsys.readouterr().out)
    assert _requests(sim) - before == 12
    out = tmp_path / "sample.judged.jsonl"
    assert summary["output"] == str(out)
    assert (tmp_path / "sample.judged.summary.json").exists()
    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["id"] for r in records) == ["q0", "q1", "q2", "q3"]
    # The sim says yes iff the marker grade >= 2: q0 -> [0,1,2], q1 -> [1,2,3], ...
    verdicts = {r["id"]: [v["verdict"] for v in r["verdicts"]] for r in records}
    assert verdicts == {
        "q0": ["no", "no", "yes"],
        "q1": ["no", "yes", "yes"],
        "q2": ["yes", "yes", "no"],
        "q3": ["yes", "no", "no"],
    }
    aps = [1 / 3, (1 / 2 + 2 / 3) / 2, 1.0, 1.0]
    assert summary["judge"]["map"] == pytest.approx(sum(aps) / 4, abs=1e-6)
    assert set(summary["judge"]["ndcg"]) == {"5", "10"}
    assert summary["ground_truth"]["queries"] == 4
    # expected_ids = d0: relevant at rank 1 for every query.
    assert summary["ground_truth"]["map"] == 1.0
    assert summary["usage"]["calls"] == 12
    # Same dataset, another output file: served from the cache.
    mid = _requests(sim)
    assert main(_score(sim, str(inp), "-o", str(tmp_path / "again.jsonl"))) == 0
    again = json.loads(capsys.readouterr().out)
    assert _requests(sim) == mid
    assert again["judge"] == summary["judge"]
    assert again["this_run"]["cache"]["hits"] == 12


def test_strict_refuses_before_any_call(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = _write(
        tmp_path / "bad.jsonl", [*_rows(2), '{"id": "x", "query": "q", "retrieval_context": "nope"}']
    )
    before = _requests(sim)
    assert main([*_score(sim, str(inp), "--strict")]) == 2
    err = capsys.readouterr().err
    assert f"{inp}:3: field 'retrieval_context': must be a list" in err
    assert "--strict refuses" in err
    assert _requests(sim) == before
    assert not (tmp_path / "bad.judged.jsonl").exists()
    rejects = (tmp_path / "bad.judged.rejects.jsonl").read_text().splitlines()
    assert [json.loads(x)["line"] for x in rejects] == [3]


def test_non_strict_reports_rejects_and_scores_the_rest(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[Any] = [*_rows(2, "r"), "not json", {"id": "r9", "retrieval_context": ["a"]}]
    inp = _write(tmp_path / "mixed.jsonl", rows)
    assert main(_score(sim, str(inp), "-o", str(tmp_path / "o.jsonl"))) == 0
    captured = capsys.readouterr()
    assert f"{inp}:3: not valid JSON" in captured.err
    assert f"{inp}:4: field 'query': missing" in captured.err
    assert json.loads(captured.out)["queries"] == 2
    rejects = [json.loads(x) for x in (tmp_path / "o.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["field"]) for r in rejects] == [(3, None), (4, "query")]


def test_gzip_input_with_field_map(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {
            "qid": "m1",
            "question": "问题",
            "docs": [{"pid": "a", "body": "甲 <rel=3>"}, {"pid": "b", "body": "乙 <rel=0>"}],
        }
    ]
    plain = _write(tmp_path / "m.jsonl", rows)
    gz = tmp_path / "m.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    maps = ["id=qid", "query=question", "retrieval_context=docs", "text=body", "passage_id=pid"]
    args = _score(sim, str(gz))
    for m in maps:
        args += ["--map", m]
    assert main(args) == 0
    capsys.readouterr()
    [rec] = [json.loads(x) for x in (tmp_path / "m.judged.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rec["id"] == "m1" and rec["docnos"] == ["a", "b"]
    assert [v["verdict"] for v in rec["verdicts"]] == ["yes", "no"]


def test_graded_mode_and_trec_exports(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = _write(tmp_path / "g.jsonl", _rows(2, "g"))
    qrels = tmp_path / "judge.qrels"
    run = tmp_path / "input.run"
    assert (
        main(
            _score(sim, str(inp), "--mode", "graded", "--export-qrels", str(qrels), "--export-run", str(run))
        )
        == 0
    )
    capsys.readouterr()
    # Read back by judge.io's TREC readers (the same code `judge trec` uses).
    assert read_qrels(qrels).to_dict() == {
        "g0": {"g0-d0": 0, "g0-d1": 1, "g0-d2": 2},
        "g1": {"g1-d0": 1, "g1-d1": 2, "g1-d2": 3},
    }
    assert read_run(run).to_dict() == {
        "g0": {"g0-d0": 3.0, "g0-d1": 2.0, "g0-d2": 1.0},
        "g1": {"g1-d0": 3.0, "g1-d1": 2.0, "g1-d2": 1.0},
    }
    assert [d for d, _ in read_run(run).ranking("g1")] == ["g1-d0", "g1-d1", "g1-d2"]
    # And `judge trec` evaluates the exported run against the exported qrels.
    assert main(["trec", str(qrels), str(run)]) == 0
    assert "map" in capsys.readouterr().out


def test_retry_unjudged_clears_what_faults_left(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _write(tmp_path / "f.jsonl", _rows(6, "f"))
    out = tmp_path / "f.out.jsonl"
    sim.configure(error_rate=0.5, seed=7)
    try:
        rc = main(_score(sim, str(inp), "-o", str(out), "--max-retries", "0", "--no-cache"))
    finally:
        sim.configure(error_rate=0.0)
    assert rc == 0
    first = json.loads(capsys.readouterr().out)
    assert first["queries"] == 6 and first["passages"] == 18  # every query kept
    assert first["unjudged"] > 0
    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    for r in records:
        for v in r["verdicts"]:
            assert v["verdict"] in ("yes", "no") or (v["verdict"] == "unjudged" and v["error"])
    before = _requests(sim)
    assert (
        main(
            [
                "score",
                "--retry-unjudged",
                str(out),
                "--backend",
                "openai:simulated-judge",
                "--base-url",
                sim.base_url,
                "--quiet",
            ]
        )
        == 0
    )
    second = json.loads(capsys.readouterr().out)
    assert _requests(sim) - before == first["unjudged"]  # only those were asked
    assert second["unjudged"] == 0 and second["queries"] == 6
    after = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in after] == [r["id"] for r in records]


def test_permanent_backend_failure_exits_3(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _write(tmp_path / "p.jsonl", _rows(1))
    wrong = sim.root + "/no-such-api"
    rc = main(["score", str(inp), "--backend", "openai:simulated-judge", "--base-url", wrong, "--quiet"])
    assert rc == 3
    assert "backend error" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["score"],
        ["score", "a.jsonl", "--retry-unjudged", "b.jsonl"],
        ["score", "missing.jsonl"],
        ["score", "x.jsonl", "--map", "nonsense"],
        ["score", "x.jsonl", "--concurrency", "0"],
        ["score", "x.jsonl", "--p-yes-threshold", "1.5"],
        ["score", "x.jsonl", "--listwise", "--probability"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.jsonl").write_text(json.dumps(_rows(1)[0]) + "\n")
    argv = [a if not a.endswith(".jsonl") or a.startswith("-") else str(tmp_path / a) for a in argv]
    assert main([*argv, "--backend", "openai:m", "--base-url", "http://127.0.0.1:9/v1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "judge: error" in err
    if "--p-yes-threshold" in argv:
        assert "field '--p-yes-threshold'" in err and "must be in [0, 1]" in err


def test_hung_requests_time_out_and_no_query_is_dropped(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _write(tmp_path / "h.jsonl", _rows(4, "h"))
    sim.configure(hang_rate=0.3, garbage_rate=0.1, hang_s=20, seed=3)
    try:
        rc = main(_score(sim, str(inp), "--timeout", "0.5", "--max-retries", "1", "--no-cache"))
    finally:
        sim.configure(hang_rate=0.0, garbage_rate=0.0)
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["this_run"]["backend"]["timeouts"] > 0
    records = [json.loads(x) for x in (tmp_path / "h.judged.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(r["id"] for r in records) == ["h0", "h1", "h2", "h3"]
    for r in records:
        assert len(r["verdicts"]) == 3
        assert r["unjudged"] == sum(1 for v in r["verdicts"] if v["verdict"] == "unjudged")
        for v in r["verdicts"]:
            if v["verdict"] == "unjudged":
                assert v["error"]
    assert summary["judged"] + summary["unjudged"] == 12


def test_429s_slow_the_scorer_down_and_every_passage_is_still_judged(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _write(tmp_path / "r.jsonl", _rows(8, "rl"))
    sim.configure(capacity=3, retry_after_s=0.05)
    try:
        rc = main(_score(sim, str(inp), "--concurrency", "12", "--no-cache"))
    finally:
        sim.configure(capacity=1000, retry_after_s=1.0)
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    backend = summary["this_run"]["backend"]
    assert backend["rate_limited"] > 0  # the server pushed back ...
    assert backend["calls"] == 24 + backend["rate_limited"]  # each 429 was retried, nothing else failed
    assert backend["rate_limited"] < 24  # the window shrank instead of hammering the server
    assert summary["judged"] == 24 and summary["unjudged"] == 0


def test_hostile_lines_are_rejected_and_the_rest_is_scored(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[Any] = [
        *_rows(2, "h"),
        '{"id": "s", "query": "q\\ud800", "retrieval_context": ["a"]}',
        '{"id": "n", "query": "q", "retrieval_context": ["a"], "m": ' + "[" * 3000 + "]" * 3000 + "}",
    ]
    inp = _write(tmp_path / "hostile.jsonl", rows)
    assert main(_score(sim, str(inp), "-o", str(tmp_path / "o.jsonl"))) == 0
    captured = capsys.readouterr()
    assert f"{inp}:3: field 'query': invalid Unicode" in captured.err
    assert f"{inp}:4: field 'm': nested deeper than 64 levels" in captured.err
    assert json.loads(captured.out)["queries"] == 2
    rejects = [json.loads(x) for x in (tmp_path / "o.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["field"]) for r in rejects] == [(3, "query"), (4, "m")]
