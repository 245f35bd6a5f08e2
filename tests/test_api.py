"""The Python API: ``judge.evaluate`` / ``judge.aevaluate`` and the light ``import judge``."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import judge
from judge.backends import ChatRequest, ResilientBackend, RuleBackend, ScriptedBackend
from judge.judging import JudgeConfig, JudgeResult, Passage

QUERY = "小狗贫血的表现"
PASSAGES = [
    "小狗贫血时牙龈颜色变淡 RELEVANT",
    "狗粮的保质期一般为一年。",
    "贫血的幼犬容易疲劳 RELEVANT",
]


def _comparable(result: JudgeResult) -> dict[str, Any]:
    data = result.model_dump(mode="json")
    for v in data["verdicts"]:
        v.pop("latency_s")
    return data


def test_public_api_names() -> None:
    assert set(judge.__all__) == {
        "evaluate",
        "aevaluate",
        "JudgeResult",
        "RelevancyJudge",
        "PassageVerdict",
        "JudgeConfig",
        "Passage",
        "resolve_backend",
        "gen_eval",
        "answer_scores",
        "redundancy_by_k",
        "compare_systems",
        "experiment",
        "aexperiment",
        "search",
        "ContextualRecallJudge",
    }
    assert judge.JudgeConfig is JudgeConfig and judge.Passage is Passage
    from judge.backends import resolve_backend

    assert judge.resolve_backend is resolve_backend
    with pytest.raises(AttributeError):
        _ = judge.nope  # type: ignore[attr-defined]


def test_import_judge_is_light() -> None:
    code = (
        "import sys, judge, judge.cli; "
        "judge.evaluate; judge.JudgeResult; judge.JudgeConfig; "
        "heavy = [m for m in ('deepeval', 'openai', 'dashscope', 'langchain_community', 'llama_cpp') "
        "if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_sync_and_async_agree() -> None:
    backend = RuleBackend.keyword("RELEVANT")
    a = await judge.aevaluate(QUERY, PASSAGES, backend=backend, summary=False)
    s = judge.evaluate(QUERY, PASSAGES, backend=backend, summary=False)  # from inside a running loop
    assert _comparable(a) == _comparable(s)
    assert [v.verdict for v in s.verdicts] == ["yes", "no", "yes"]
    assert s.score == pytest.approx(2 / 3)
    assert s.ap == pytest.approx((1 + 2 / 3) / 2)


def test_evaluate_sync_graded_with_summary() -> None:
    def script(request: ChatRequest, _index: int) -> str:
        if request.json_schema is None:  # the summary call
            return "三个段落中两个高度相关。"
        user = request.messages[-1].content
        g = 3 if "RELEVANT" in user else 0
        return json.dumps({"grade": g, "reason": "理由"}, ensure_ascii=False)

    backend = ScriptedBackend(script)
    result = judge.evaluate(QUERY, PASSAGES, backend=backend, mode="graded", k=(3,))
    assert result.mode == "graded"
    assert [v.grade for v in result.verdicts] == [3, 0, 3]
    assert result.reason == "三个段落中两个高度相关。"
    assert result.usage.calls == 4
    # gains 3,0,3 vs ideal 3,3,0: (3 + 3/2) / (3 + 3/log2(3))
    assert result.ndcg[3] == pytest.approx(4.5 / (3 + 3 / 1.5849625007211563))
    assert result.backend == "fake:scripted"
    assert backend.closed is False  # a backend object passed in is not closed


def test_mode_overrides_config_and_config_is_used() -> None:
    backend = ScriptedBackend(lambda _r, _i: '{"grade": 2, "reason": "x"}')
    result = judge.evaluate(
        QUERY, ["甲"], backend=backend, mode="graded", config=JudgeConfig(grade_threshold=3), summary=False
    )
    assert result.mode == "graded" and result.verdicts[0].verdict == "no"
    assert result.conventions["grade_threshold"] == 3


def test_resilient_backend_is_not_wrapped_twice() -> None:
    async def no_sleep(_s: float) -> None:
        return None

    backend = ResilientBackend(RuleBackend.keyword("RELEVANT"), sleep=no_sleep)
    result = judge.evaluate(QUERY, PASSAGES, backend=backend, summary=False)
    assert result.score == pytest.approx(2 / 3)
    assert backend.stats.requests == 3


def test_passages_with_ids_and_qrels() -> None:
    backend = RuleBackend.keyword("RELEVANT")
    passages = [Passage(text, id=f"d{i}") for i, text in enumerate(PASSAGES)]
    result = judge.evaluate(
        QUERY, passages, backend=backend, qrels={"d0": 1, "d2": 1, "d9": 1}, summary=False, k=(3,)
    )
    assert [v.passage_id for v in result.verdicts] == ["d0", "d1", "d2"]
    # binary gains 1,0,1; IDCG from three relevant qrels: 1 + 1/log2(3) + 1/2
    assert result.ndcg[3] == pytest.approx(1.5 / (1 + 1 / 1.5849625007211563 + 0.5))
    assert result.conventions["idcg"] == "judged+unretrieved_qrels"


def test_a_single_string_is_refused() -> None:
    with pytest.raises(TypeError, match="list of passages"):
        judge.evaluate(QUERY, "一个段落", backend=RuleBackend.keyword("x"))


def test_result_json_round_trip() -> None:
    result = judge.evaluate(QUERY, PASSAGES, backend=RuleBackend.keyword("RELEVANT"), summary=False)
    again = JudgeResult.model_validate_json(result.model_dump_json())
    assert again == result


def test_a_deepeval_model_as_the_judge() -> None:
    from deepeval.models import DeepEvalBaseLLM

    class KeywordLLM(DeepEvalBaseLLM):  # type: ignore[misc]
        def __init__(self) -> None:
            self.prompts: list[str] = []

        def load_model(self) -> KeywordLLM:
            return self

        def get_model_name(self) -> str:
            return "keyword-llm"

        def generate(self, prompt: str) -> str:
            self.prompts.append(prompt)
            passage = prompt.split("<passage>\n")[-1]
            verdict = "yes" if "RELEVANT" in passage else "no"
            return json.dumps({"verdict": verdict, "reason": "理由"})

        async def a_generate(self, prompt: str) -> str:
            return self.generate(prompt)

    model = KeywordLLM()
    result = judge.evaluate(QUERY, PASSAGES, backend=model, summary=False)
    assert [v.verdict for v in result.verdicts] == ["yes", "no", "yes"]
    assert len(model.prompts) == 3
