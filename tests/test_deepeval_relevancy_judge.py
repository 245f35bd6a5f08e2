"""``RelevancyJudge`` as a deepeval metric: measure, evaluate, assert_test, offline and quiet."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import judge._env  # noqa: F401  # before deepeval

# isort: split
from deepeval import assert_test
from deepeval import evaluate as deepeval_evaluate
from deepeval.metrics.utils import copy_metrics
from deepeval.test_case import LLMTestCase

from judge import RelevancyJudge
from judge.backends import ChatRequest, RuleBackend, ScriptedBackend
from judge.judging import JudgeConfig


def keyword_judge(**kwargs: object) -> RelevancyJudge:
    return RelevancyJudge(RuleBackend.keyword("RELEVANT"), include_reason=False, **kwargs)  # type: ignore[arg-type]


def case(query: str, *passages: str, **meta: object) -> LLMTestCase:
    return LLMTestCase(
        input=query,
        actual_output="(unused)",
        retrieval_context=list(passages),
        metadata=dict(meta) or None,
    )


def test_measure_scores_share_of_relevant_passages() -> None:
    metric = keyword_judge(threshold=0.6)
    tc = case("小狗贫血的表现", "牙龈苍白 RELEVANT", "狗粮保质期", "精神萎靡 RELEVANT", "猫咪晒太阳")
    score = metric.measure(tc)
    assert score == pytest.approx(0.5)
    assert metric.score == pytest.approx(0.5)
    assert metric.success is False and metric.is_successful() is False
    assert metric.result is not None
    assert [v.verdict for v in metric.result.verdicts] == ["yes", "no", "yes", "no"]
    assert metric.result.ap == pytest.approx((1 + 2 / 3) / 2)
    assert metric.score_breakdown["ap"] == pytest.approx((1 + 2 / 3) / 2)
    assert metric.score_breakdown["unjudged"] == 0 and metric.score_breakdown["relevant"] == 2
    assert set(metric.score_breakdown) >= {"ndcg@5", "ndcg@10"}
    assert metric.reason is None  # include_reason=False
    assert metric.error is None


def test_reason_is_the_summary() -> None:
    def script(request: ChatRequest, _index: int) -> str:
        if request.json_schema is None:
            return "两个段落都相关。"
        return '{"verdict": "yes", "reason": "相关"}'

    metric = RelevancyJudge(ScriptedBackend(script))
    assert metric.measure(case("q", "甲", "乙")) == pytest.approx(1.0)
    assert metric.reason == "两个段落都相关。" and metric.success is True


async def test_a_measure_matches_measure_and_shared_instance_is_safe() -> None:
    metric = keyword_judge()
    cases = [
        case("q1", "a RELEVANT", "b"),
        case("q2", "a", "b", "c", "d RELEVANT"),
        case("q3", "a RELEVANT", "b RELEVANT", "c RELEVANT"),
    ]
    scores = await asyncio.gather(*(metric.a_measure(tc) for tc in cases))
    assert scores == pytest.approx([0.5, 0.25, 1.0])
    assert metric.measure(cases[1]) == pytest.approx(0.25)  # sync, from inside a running loop


def test_qrels_from_the_test_case() -> None:
    metric = keyword_judge(k=(3,))
    tc = case(
        "q",
        "a RELEVANT",
        "b",
        "c RELEVANT",
        qrels={"d1": 1, "d2": 0, "d3": 1, "d7": 1},
        passage_ids=["d1", "d2", "d3"],
    )
    metric.measure(tc)
    assert metric.result is not None
    assert metric.result.conventions["idcg"] == "judged+unretrieved_qrels"
    assert [v.passage_id for v in metric.result.verdicts] == ["d1", "d2", "d3"]
    # gains 1,0,1; ideal from three relevant qrels: 1, 1, 1
    assert metric.result.ndcg[3] == pytest.approx((1 + 0.5) / (1 + 1 / 1.5849625007211563 + 0.5))


def test_nothing_judged_is_an_error_not_a_silent_zero() -> None:
    metric = RelevancyJudge(
        ScriptedBackend(["garbage"], cycle=True), config=JudgeConfig(max_reasks=0), include_reason=False
    )
    assert metric.measure(case("q", "甲", "乙")) == 0.0
    assert metric.error is not None and "none of the 2 passages could be judged" in metric.error
    assert metric.is_successful() is False
    empty = keyword_judge()
    assert empty.measure(case("q")) == 0.0
    assert empty.error is None and empty.success is False


def test_mode_config_strict_and_copy() -> None:
    metric = RelevancyJudge(
        RuleBackend.keyword("RELEVANT"),
        mode="graded",
        config=JudgeConfig(grade_threshold=3),
        strict_mode=True,
    )
    assert metric.config.mode == "graded" and metric.config.grade_threshold == 3
    assert metric.threshold == 1.0
    (copy,) = copy_metrics([metric])
    assert isinstance(copy, RelevancyJudge)
    assert copy.config == metric.config and copy.backend is metric.backend
    assert copy.threshold == 1.0 and copy.k == metric.k and copy.strict_mode


def test_deepeval_evaluate_offline_quiet_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    metric = keyword_judge(threshold=0.5)
    cases = [
        case("小狗贫血的表现", "牙龈苍白 RELEVANT", "狗粮保质期"),
        case("感冒吃什么药", "对乙酰氨基酚 RELEVANT", "多喝水 RELEVANT", "天气预报"),
        case("北京到上海高铁多久", "上海外滩", "豫园", "城隍庙"),
    ]
    result = deepeval_evaluate(cases, [metric])
    scores = [tr.metrics_data[0].score for tr in result.test_results]
    success = [tr.metrics_data[0].success for tr in result.test_results]
    by_input = {tr.input: (s, ok) for tr, s, ok in zip(result.test_results, scores, success, strict=True)}
    assert by_input["小狗贫血的表现"] == (pytest.approx(0.5), True)
    assert by_input["感冒吃什么药"] == (pytest.approx(2 / 3), True)
    assert by_input["北京到上海高铁多久"] == (0.0, False)
    out, err = capfd.readouterr()
    text = (out + err).lower()
    assert "telemetry" not in text and "posthog" not in text
    assert "traceback" not in text and "error" not in text
    assert list(tmp_path.iterdir()) == []


def test_assert_test_passes_and_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert_test(case("q", "a RELEVANT", "b RELEVANT", "c"), [keyword_judge(threshold=0.6)])
    with pytest.raises(AssertionError):
        assert_test(case("q", "a RELEVANT", "b", "c"), [keyword_judge(threshold=0.6)])
    assert list(tmp_path.iterdir()) == []
