"""``--cascade CHEAP,EXPENSIVE --margin M``: two fake judges counting calls. Only the cheap
judge's unsure verdicts reach the expensive one; every verdict says who decided it; the
name and fingerprint name both; with ``--until-decided`` the expensive judge gets only the
pairs the decisions need."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _helpers import passage_of

import judge
from judge.backends import CascadeBackend, ChatRequest, ConfigurationError, RuleBackend, make_backend
from judge.cli import main
from judge.judging import JudgeConfig, Passage, judge_query

SURE_YES, UNSURE, SURE_NO = "[是]", "[不确定]", "[否]"


def _cheap() -> RuleBackend:
    """P(yes) 0.95 / 0.55 / 0.05 by marker: only the middle one is within 0.1 of 0.5."""

    def rule(request: ChatRequest) -> Any:
        text = passage_of(request)
        p = 0.95 if SURE_YES in text else (0.55 if UNSURE in text else 0.05)
        return {"yes": p, "no": 1 - p}

    return RuleBackend(rule, name="fake:cheap")


def _expensive(*, probabilities: bool = True, yes: str = SURE_YES) -> RuleBackend:
    # By default it says "no" to every unsure passage (the cheap judge leaned yes): visible.
    return RuleBackend.keyword(
        yes, text_of=passage_of, name="fake:expensive", supports_probabilities=probabilities
    )


def _verdicts(backend: Any, texts: list[str]) -> list[Any]:
    passages = [Passage(t, f"d{i}", query_id="q") for i, t in enumerate(texts)]
    result = asyncio.run(judge_query(backend, "查询", passages, JudgeConfig(mode="binary", probability=True)))
    return result.verdicts


def test_only_unsure_verdicts_reach_the_expensive_judge_and_each_says_who_decided() -> None:
    cheap, expensive = _cheap(), _expensive()
    cascade = CascadeBackend(cheap, expensive, margin=0.1)
    texts = [f"a {SURE_YES}", f"b {UNSURE}", f"c {SURE_NO}", f"d {UNSURE}"]
    vs = _verdicts(make_backend(cascade), texts)
    assert (cheap.calls, expensive.calls) == (4, 2)
    assert (cascade.cheap_calls, cascade.expensive_calls) == (4, 2)
    assert [v.decided_by for v in vs] == ["fake:cheap", "fake:expensive", "fake:cheap", "fake:expensive"]
    assert [v.verdict for v in vs] == ["yes", "no", "no", "no"]  # the expensive judge says no to unsure
    assert vs[0].p_yes == pytest.approx(0.95) and vs[0].backend == cascade.name
    assert cascade.name == "cascade:fake:cheap,fake:expensive@0.1"
    assert "cheap=fake:cheap" in cascade.fingerprint and "expensive=fake:expensive" in cascade.fingerprint


def test_a_wider_margin_sends_more_and_zero_sends_none() -> None:
    # The margin is around the template's own threshold (0.575 for the default binary
    # template, passed in the request): P(yes) 0.95 is 0.375 away, 0.55 0.025, 0.05 0.525.
    texts = [f"a {SURE_YES}", f"b {UNSURE}", f"c {SURE_NO}"]
    for margin, sent in ((0.0, 0), (0.1, 1), (0.4, 2), (0.5, 2)):
        cheap, expensive = _cheap(), _expensive()
        _verdicts(make_backend(CascadeBackend(cheap, expensive, margin=margin)), texts)
        assert (cheap.calls, expensive.calls) == (3, sent), margin


def test_an_expensive_judge_without_probabilities_is_asked_for_its_json_verdict() -> None:
    cheap, expensive = _cheap(), _expensive(probabilities=False, yes=UNSURE)
    vs = _verdicts(make_backend(CascadeBackend(cheap, expensive, margin=0.1)), [f"b {UNSURE}"])
    (request,) = expensive.requests
    assert request.candidates is None and request.answer_prefix is None
    assert vs[0].verdict == "yes" and vs[0].p_yes == 1.0 and vs[0].decided_by == "fake:expensive"


def test_bad_cascades_name_their_field() -> None:
    with pytest.raises(ConfigurationError) as info:
        CascadeBackend(_cheap(), _expensive(), margin=0.7)
    assert info.value.field == "margin"
    with pytest.raises(ConfigurationError) as info:
        CascadeBackend(_expensive(probabilities=False), _cheap())
    assert info.value.field == "cascade"
    with pytest.raises(ConfigurationError) as info:
        judge.backends.resolve_cascade("qrels:x")
    assert info.value.field == "cascade"


def _system(tmp_path: Path, name: str, markers: list[list[str]]) -> Path:
    rows = [
        {
            "id": f"q{q}",
            "query": f"查询 {q}",
            "retrieval_context": [
                {"id": f"{name}{q}-{r}", "text": f"{name} {q} {r} {m}"} for r, m in enumerate(ms)
            ],
        }
        for q, ms in enumerate(markers)
    ]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_compare_systems_cascade_until_decided_sends_only_needed_pairs_to_the_expensive_judge(
    tmp_path: Path,
) -> None:
    # P_2 hangs on the unsure passages (cheap P(yes) 0.55): b's second, a's first two. The
    # expensive judge says no to all of them: b is better on every query.
    a = _system(tmp_path, "a", [[UNSURE, UNSURE, SURE_NO, SURE_NO]] * 16)
    b = _system(tmp_path, "b", [[SURE_YES, UNSURE, SURE_NO, SURE_NO]] * 16)
    cheap, expensive = _cheap(), _expensive()
    report = judge.compare_systems(
        {"a": a, "b": b},
        tmp_path / "report",
        backend=CascadeBackend(cheap, expensive, margin=0.1),
        config=JudgeConfig(mode="binary", probability=True, explain=False),
        cache=False,
        resamples=500,
        stability_resamples=0,
        measures=["P_2"],
        until_decided=True,
    )
    assert cheap.calls == 128  # the whole pool, once
    assert report.adaptive is not None and report.adaptive.stop == "decided"
    assert 0 < expensive.calls == report.adaptive.judged_pairs < 128
    (c,) = report.comparisons
    assert c.adaptive is not None and (c.adaptive.sign, c.adaptive.significant) == (1, True)
    assert report.conventions["backend"] == "cascade:fake:cheap,fake:expensive@0.1"
    judged = [json.loads(x) for x in (tmp_path / "report" / "adaptive" / "round-001.judged.jsonl").open()]
    assert {v["backend"] for r in judged for v in r["verdicts"]} == {"fake:expensive"}


def test_cli_cascade_flag_with_two_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qrels = tmp_path / "l.qrels"
    qrels.write_text("q0 0 a0-0 1\nq0 0 b0-0 0\n", encoding="utf-8")
    a = _system(tmp_path, "a", [[SURE_NO]])
    b = _system(tmp_path, "b", [[SURE_YES]])
    out = tmp_path / "r"
    args = [
        "compare-systems",
        f"a={a}",
        f"b={b}",
        "-o",
        str(out),
        "--cascade",
        f"qrels:{qrels},qrels:{qrels}",
    ]
    args += [
        "--margin",
        "0.2",
        "--mode",
        "binary",
        "--no-cache",
        "--resamples",
        "100",
        "--stability-resamples",
        "0",
    ]
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["conventions"]["backend"] == "cascade:qrels:l.qrels,qrels:l.qrels@0.2"
    assert main([*args[:5], "--backend", "qrels:x", *args[5:]]) == 2
    assert "--cascade" in capsys.readouterr().err
