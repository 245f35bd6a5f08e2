"""Contextual recall and source quality in ``judge score`` and as a deepeval metric."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_sim
from test_recall_claims import PASSAGES, recall_judge

import judge._env  # noqa: F401  # before deepeval

# isort: split
from deepeval.test_case import LLMTestCase

from judge import ContextualRecallJudge
from judge.backends import ChatRequest, RuleBackend
from judge.batch import BatchOptions, score_dataset_sync
from judge.cli import main
from judge.io._jsonl import read_dataset
from judge.io._sites import SitePriors
from judge.judging import JudgeConfig
from judge.judging._extra_judgments import ExtraOptions
from judge.store import SQLiteVerdictStore, recover_output

ROWS: list[dict[str, Any]] = [
    {
        "id": "q1",
        "query": "踩踏事故",
        "answer": "12人死亡，14人受伤",
        "retrieval_context": [
            {"id": "d1", "text": "P1 段落一", "url": "https://www.nhc.gov.cn/x"},
            {"id": "d2", "text": "P2 段落二", "url": "zhihu.com/q/1"},
        ],
    },
    {"id": "q2", "query": "其他", "retrieval_context": [{"text": "P3 段落三", "source": "新华网"}]},
]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _judge() -> tuple[RuleBackend, list[str]]:
    """Claims A, B (A supported by P1); relevance yes; sites: zhihu.com 1, others 2."""
    inner, log = recall_judge(["A", "B"], {("A", "P1 段落一"): "yes"})

    def rule(request: ChatRequest) -> str:
        user = next(m.content for m in request.messages if m.role == "user")
        if "<reference>" in user or "陈述" in user:
            return inner.rule(request)  # type: ignore[return-value]
        if user.startswith("网站："):
            site = user.split("\n", 1)[0].removeprefix("网站：")
            log.append(f"site {site}")
            return json.dumps(
                {"grade": 1 if site == "zhihu.com" else 2, "reason": "来源"}, ensure_ascii=False
            )
        log.append("relevance")
        return json.dumps({"verdict": "yes", "reason": "相关"}, ensure_ascii=False)

    return RuleBackend(rule), log


def test_dataset_fields_expected_output_url_site_source(tmp_path: Path) -> None:
    path = _write(tmp_path / "in.jsonl", ROWS)
    records = read_dataset(path, field_map={"expected_output": "answer"})
    assert records[0].expected_output == "12人死亡，14人受伤" and records[1].expected_output is None
    assert [p.url for p in records[0].passages] == ["https://www.nhc.gov.cn/x", "zhihu.com/q/1"]
    assert (records[1].passages[0].url, records[1].passages[0].site) == (None, "新华网")
    assert read_dataset(path)[0].expected_output is None  # not mapped: 'answer' is not read
    bad = _write(tmp_path / "bad.jsonl", [{"query": "q", "retrieval_context": ["x"], "expected_output": 3}])
    with pytest.raises(Exception, match=r"bad.jsonl:1: field 'expected_output'"):
        read_dataset(bad)
    bad = _write(tmp_path / "bad2.jsonl", [{"query": "q", "retrieval_context": [{"text": "x", "url": 5}]}])
    with pytest.raises(Exception, match=r"bad2.jsonl:1: field 'retrieval_context\[0\].url'"):
        read_dataset(bad)


def test_score_dataset_records_and_summary(tmp_path: Path) -> None:
    inp = _write(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "out.jsonl"
    backend, log = _judge()
    options = BatchOptions(
        k=(1, 2),
        field_map={"expected_output": "answer"},
        progress="quiet",
        extras=ExtraOptions(source_quality=True, site_priors=SitePriors({"gov.cn": 3})),
    )
    store = SQLiteVerdictStore(tmp_path / "cache.sqlite")
    try:
        outcome = score_dataset_sync(inp, out, backend, JudgeConfig(), store=store, options=options)
        q1, q2 = recover_output(out)
        recall = q1["contextual_recall"]
        assert recall["recall"] == {"1": 0.5, "2": 0.5}
        assert recall["unsupported_claims"] == ["B"]
        assert [c["claim"] for c in recall["claims"]] == ["A", "B"]
        assert [c["support_rank"] for c in recall["claims"]] == [1, None]
        assert "contextual_recall" not in q2  # no expected_output
        sq = q1["source_quality"]
        assert sq["sites"] == ["nhc.gov.cn", "zhihu.com"] and sq["grades"] == [3, 1]
        assert sq["site_grades"]["nhc.gov.cn"]["origin"] == "prior"
        assert sq["quality"] == {"1": 3.0, "2": 2.0} and sq["low_share"] == {"1": 0.0, "2": 0.5}
        d2 = math.log2(3)
        assert sq["weighted_ndcg"]["2"] == pytest.approx((1 + 0.5 / d2) / (1 + 1 / d2))
        assert q2["source_quality"]["sites"] == ["新华网"] and q2["source_quality"]["grades"] == [2]
        # relevance 2 + claims 1 + A 1 + B 2 + site zhihu.com 1 = 7 calls on q1
        assert q1["usage"]["calls"] == 7
        summary = outcome.summary
        assert summary["contextual_recall"]["queries"] == 1
        assert summary["contextual_recall"]["mean_recall"] == {"1": 0.5, "2": 0.5}
        assert summary["contextual_recall"]["claims_unsupported"] == {"1": 1, "2": 1}
        assert "recall" in summary["contextual_recall"]["conventions"]
        src = summary["source_quality"]
        assert src["mean_quality"] == {"1": 2.5, "2": 2.0}  # q1 3.0 / 2.0, q2 2.0 / 2.0
        assert src["mean_low_share"] == {"1": 0.0, "2": 0.25}
        assert [(r["site"], r["grade"], r["origin"], r["passages"]) for r in src["sites"]] == [
            ("nhc.gov.cn", 3, "prior", 1),
            ("zhihu.com", 1, "judge", 1),
            ("新华网", 2, "judge", 1),
        ]
        assert src["site_grades"] == {"1": 1, "2": 1, "3": 1}
        assert "weighted_ndcg" in src["conventions"]
        assert summary["usage"]["calls"] == 7 + 1 + 1  # q2: relevance 1 + site 1
        # A second run over a fresh output: everything from the cache, zero calls.
        log.clear()
        again = score_dataset_sync(
            inp, tmp_path / "out2.jsonl", backend, JudgeConfig(), store=store, options=options
        )
        assert log == [] and again.summary["usage"]["calls"] == 0
        assert again.summary["contextual_recall"]["mean_recall"] == {"1": 0.5, "2": 0.5}
        assert again.summary["source_quality"]["mean_quality"] == src["mean_quality"]
    finally:
        store.close()


def test_no_extras_without_options(tmp_path: Path) -> None:
    inp = _write(tmp_path / "in.jsonl", ROWS)
    backend, log = _judge()
    options = BatchOptions(k=(1,), field_map={"expected_output": "answer"}, progress="quiet")
    outcome = score_dataset_sync(inp, tmp_path / "o.jsonl", backend, JudgeConfig(), options=options)
    assert log == ["relevance"] * 3
    assert "contextual_recall" not in outcome.summary and "source_quality" not in outcome.summary


def test_cli_flags_priors_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--site-priors alone grades from the file (no site is asked); --no-recall skips recall."""
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    inp = _write(tmp_path / "in.jsonl", ROWS)
    priors = tmp_path / "priors.tsv"
    priors.write_text("gov.cn\t3\t政府网站\nzhihu.com\t1\n", encoding="utf-8")
    sim = load_sim()
    with sim.SimProcess(None, latency_ms=1, jitter_ms=0, capacity=100) as s:
        argv = ["score", str(inp), "-o", str(tmp_path / "o.jsonl"), "--map", "expected_output=answer"]
        argv += ["--site-priors", str(priors), "--no-recall", "-k", "2"]
        argv += ["--backend", "openai:simulated-judge", "--base-url", s.base_url, "--quiet"]
        assert main(argv) == 0
        requests = int(s.stats()["total"])
    summary = json.loads(capsys.readouterr().out)
    assert requests == 3  # the three relevance verdicts only
    assert "contextual_recall" not in summary
    src = summary["source_quality"]
    assert src["mean_quality"] == {"2": 2.0}  # q1: 3 and 1; q2: 新华网 has no prior (unknown)
    assert src["unknown_passages"] == 1
    rows = {r["site"]: r for r in src["sites"]}
    assert rows["nhc.gov.cn"]["reason"] == "政府网站" and rows["新华网"]["origin"] == "unjudged"
    assert summary["config"]["source_quality"] == "priors"


def test_cli_bad_priors_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = _write(tmp_path / "in.jsonl", ROWS)
    priors = tmp_path / "p.tsv"
    priors.write_text("gov.cn\tthree\n", encoding="utf-8")
    argv = ["score", str(inp), "--site-priors", str(priors), "--backend", "openai:m"]
    argv += ["--base-url", "http://127.0.0.1:9/v1", "--quiet"]
    assert main(argv) == 2
    assert f"{priors}:1: field 'grade'" in capsys.readouterr().err


# --- the deepeval metric ------------------------------------------------------------------
def test_contextual_recall_judge_metric() -> None:
    backend, _ = recall_judge(["A", "B"], {("A", "P2 段落二"): "yes"})
    metric = ContextualRecallJudge(backend, k=(1, 3), threshold=0.5)
    case = LLMTestCase(input="q", actual_output="", expected_output="A 与 B", retrieval_context=PASSAGES)
    assert metric.measure(case) == 0.5
    assert metric.is_successful() and metric.error is None
    assert metric.score_breakdown == {
        "recall@1": 0.0,
        "recall@3": 0.5,
        "claims": 2,
        "supported": 1,
        "unsupported": 1,
        "unjudged": 0,
    }
    assert metric.reason is not None and "未被支持：B" in metric.reason
    strict = ContextualRecallJudge(backend, k=(3,), strict_mode=True)
    strict.measure(case)
    assert not strict.is_successful()


def test_contextual_recall_judge_without_claims_reports_an_error() -> None:
    backend, _ = recall_judge("not json", {})
    metric = ContextualRecallJudge(backend, k=(3,))
    case = LLMTestCase(input="q", actual_output="", expected_output="A", retrieval_context=PASSAGES)
    assert metric.measure(case) == 0.0
    assert metric.error is not None and "no claims" in metric.error and not metric.is_successful()


def test_contextual_recall_judge_needs_expected_output() -> None:
    from deepeval.errors import MissingTestCaseParamsError

    backend, _ = recall_judge(["A"], {})
    metric = ContextualRecallJudge(backend)
    with pytest.raises(MissingTestCaseParamsError):
        metric.measure(LLMTestCase(input="q", actual_output="", retrieval_context=PASSAGES))


def test_bundled_samples_parse() -> None:
    root = Path(__file__).resolve().parents[1]
    records = read_dataset(root / "datasets" / "recall_sources.sample.jsonl")
    assert all(r.expected_output for r in records)
    assert sum(1 for r in records for p in r.passages if p.url or p.site) == 8
    from judge.io._sites import read_site_priors, source_site

    priors = read_site_priors(root / "datasets" / "site_priors.sample.tsv")
    sites = [source_site(p.url, p.site) for r in records for p in r.passages]
    covered = {s: priors.lookup(s).grade for s in sites if s and priors.lookup(s)}  # type: ignore[union-attr]
    assert covered == {
        "nhc.gov.cn": 3,
        "zhidao.baidu.com": 1,
        "baike.baidu.com": 3,
        "gov.cn": 3,
        "zh.wikipedia.org": 3,
    }
