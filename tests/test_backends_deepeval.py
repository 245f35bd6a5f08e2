"""DeepEval in both directions, offline.

* our ScriptedBackend/RuleBackend in a deepeval metric's ``model=`` slot (as_deepeval_model),
  driving deepeval's own AnswerRelevancyMetric to a hand-derived score;
* custom DeepEvalBaseLLMs wrapped by DeepEvalBackend (schema passing, the TypeError quirk,
  the sync fallback, (reply, cost) tuples, error mapping).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import judge._env  # noqa: F401  (before deepeval)
from judge.backends import (
    ChatRequest,
    DeepEvalBackend,
    Message,
    PermanentError,
    RateLimitError,
    ResilientBackend,
    RuleBackend,
    ScriptedBackend,
    TransientError,
    UnsupportedError,
    as_deepeval_model,
    resolve_backend,
    schema_to_model,
)

deepeval_models = pytest.importorskip("deepeval.models")
DeepEvalBaseLLM = deepeval_models.DeepEvalBaseLLM

SCHEMA = {
    "title": "LLMGrade",
    "type": "object",
    "properties": {
        "grade": {"type": "integer", "minimum": 0, "maximum": 3},
        "reason": {"type": "string"},
    },
    "required": ["grade", "reason"],
    "additionalProperties": False,
}


def req(text: str = "q", **kw: Any) -> ChatRequest:
    return ChatRequest(messages=(Message("user", text),), **kw)


# -- our backend inside deepeval ------------------------------------------------------------


def answer_relevancy_rule(request: ChatRequest) -> str:
    """Replies for deepeval's AnswerRelevancyMetric, chosen by the schema it asks for."""
    title = (request.json_schema or {}).get("title")
    if title == "Statements":
        return json.dumps({"statements": ["小狗贫血会牙龈苍白。", "今天天气很好。"]}, ensure_ascii=False)
    if title == "Verdicts":
        return json.dumps(
            {"verdicts": [{"verdict": "yes"}, {"verdict": "no", "reason": "与问题无关"}]}, ensure_ascii=False
        )
    if title == "AnswerRelevancyScoreReason":
        return '```json\n{"reason": "一半的陈述相关。"}\n```'
    raise AssertionError(f"unexpected schema {title}")


@pytest.mark.parametrize("async_mode", [False, True])
def test_our_backend_drives_a_deepeval_metric(async_mode: bool) -> None:
    from deepeval.metrics import AnswerRelevancyMetric
    from deepeval.test_case import LLMTestCase

    backend = RuleBackend(answer_relevancy_rule)
    model = as_deepeval_model(backend)
    assert isinstance(model, DeepEvalBaseLLM)
    assert model.get_model_name() == "fake:rule"
    metric = AnswerRelevancyMetric(model=model, threshold=0.5, async_mode=async_mode, include_reason=True)
    case = LLMTestCase(input="小狗贫血的表现", actual_output="小狗贫血会牙龈苍白。今天天气很好。")
    score = metric.measure(case, _show_indicator=False)
    # 2 statements, 1 judged relevant -> 1/2
    assert score == pytest.approx(0.5)
    assert metric.reason == "一半的陈述相关。"
    titles = [(r.json_schema or {}).get("title") for r in backend.requests]
    assert titles == ["Statements", "Verdicts", "AnswerRelevancyScoreReason"]
    assert all(r.temperature == 0.0 for r in backend.requests)


async def test_adapter_returns_schema_instances_or_raw_text() -> None:
    class Grade(BaseModel):
        grade: int
        reason: str

    backend = ScriptedBackend(['好的：{"grade": 2, "reason": "相关"}', "无法判断", "plain text"])
    model = as_deepeval_model(backend, seed=5, system_prompt="SYS")
    out = await model.a_generate("p1", schema=Grade)
    assert out == Grade(grade=2, reason="相关")
    assert await model.a_generate("p2", schema=Grade) == "无法判断"  # unparseable: raw text for deepeval
    assert await model.a_generate("p3") == "plain text"
    first = backend.requests[0]
    assert first.json_schema == Grade.model_json_schema()
    assert [m.role for m in first.messages] == ["system", "user"]
    assert first.seed == 5
    assert model.usage.prompt_tokens == sum(len("SYS") + len(p) for p in ("p1", "p2", "p3"))


def test_adapter_sync_and_async_agree() -> None:
    backend = RuleBackend.keyword("相关标记")
    model = as_deepeval_model(backend)
    prompt = "段落：相关标记 小狗贫血"
    sync_out = model.generate(prompt)
    async_out = asyncio.run(model.a_generate(prompt))
    assert sync_out == async_out == '{"verdict": "yes", "reason": "段落包含回答查询所需的信息。"}'
    # the sync path reuses one private loop: many calls, one backend, same answers
    assert [model.generate(prompt) for _ in range(3)] == [sync_out] * 3


async def test_adapter_never_raises_type_error() -> None:
    def bad(_r: ChatRequest, _i: int) -> str:
        raise TypeError("bug inside the backend")

    class Out(BaseModel):
        x: int

    model = as_deepeval_model(ScriptedBackend(bad))
    with pytest.raises(PermanentError, match="TypeError: bug inside"):
        await model.a_generate("x", schema=Out)
    # so deepeval's generate_with_schema does not silently re-call without the schema
    with pytest.raises(PermanentError):
        await model.a_generate_with_schema("x", schema=Out)


def test_adapter_of_deepeval_backend_unwraps() -> None:
    llm = SchemaLLM()
    assert as_deepeval_model(DeepEvalBackend(llm)) is llm


# -- a deepeval model as our backend --------------------------------------------------------


class SchemaLLM(DeepEvalBaseLLM):  # type: ignore[misc]
    """Accepts ``schema=`` and returns an instance of it; records what it got."""

    def __init__(self) -> None:
        self.schemas: list[Any] = []
        self.prompts: list[str] = []
        super().__init__("schema-llm")

    def load_model(self) -> SchemaLLM:
        return self

    def generate(self, prompt: str, schema: Any = None) -> Any:
        raise AssertionError("the async path should be used")

    async def a_generate(self, prompt: str, schema: Any = None) -> Any:
        self.prompts.append(prompt)
        self.schemas.append(schema)
        if schema is None:
            return '{"grade": 1, "reason": "text"}'
        return schema(grade=3, reason="强相关")

    def get_model_name(self) -> str:
        return "schema-llm"


class PlainLLM(DeepEvalBaseLLM):  # type: ignore[misc]
    """No ``schema`` parameter at all; returns (text, cost) like deepeval's native models."""

    def __init__(self) -> None:
        self.calls = 0
        super().__init__("plain")

    def load_model(self) -> PlainLLM:
        return self

    def generate(self, prompt: str) -> Any:
        return ("", 0.0)

    async def a_generate(self, prompt: str) -> Any:
        self.calls += 1
        return ('{"grade": 0, "reason": "无关"}', 0.0125)

    def get_model_name(self) -> str:
        return "plain"


class SyncOnlyLLM(DeepEvalBaseLLM):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__("sync-only")

    def load_model(self) -> SyncOnlyLLM:
        return self

    def generate(self, prompt: str, **kwargs: Any) -> Any:
        return {
            "grade": 2,
            "reason": f"sync:{kwargs.get('schema').__name__ if kwargs.get('schema') else None}",
        }

    async def a_generate(self, prompt: str, **kwargs: Any) -> Any:
        raise NotImplementedError

    def get_model_name(self) -> str:
        return "sync-only"


class BuggyLLM(DeepEvalBaseLLM):  # type: ignore[misc]
    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.calls = 0
        super().__init__("buggy")

    def load_model(self) -> BuggyLLM:
        return self

    def generate(self, prompt: str, schema: Any = None) -> Any:
        raise AssertionError

    async def a_generate(self, prompt: str, schema: Any = None) -> Any:
        self.calls += 1
        raise self.exc

    def get_model_name(self) -> str:
        return "buggy"


async def test_deepeval_backend_passes_schema_and_serialises_instance() -> None:
    llm = SchemaLLM()
    b = DeepEvalBackend(llm)
    assert (b.name, b.model, b.supports_probabilities) == ("deepeval:SchemaLLM", "schema-llm", False)
    c = await b.complete(
        ChatRequest(messages=(Message("system", "规则"), Message("user", "查询和段落")), json_schema=SCHEMA)
    )
    assert json.loads(c.text) == {"grade": 3, "reason": "强相关"}
    assert c.usage.total_tokens == 0  # unknown usage -> zeros
    schema = llm.schemas[0]
    assert issubclass(schema, BaseModel)
    assert schema.model_validate({"grade": 3, "reason": "x"}).grade == 3  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        schema.model_validate({"grade": 4, "reason": "x"})  # maximum 3 kept
    with pytest.raises(ValidationError):
        schema.model_validate({"grade": 1, "reason": "x", "extra": 1})  # additionalProperties false
    assert llm.prompts[0] == "规则\n\n查询和段落"
    # no schema requested -> none passed
    await b.complete(req("x"))
    assert llm.schemas[1] is None


async def test_deepeval_backend_without_schema_param_and_with_cost() -> None:
    llm = PlainLLM()
    rb = ResilientBackend(DeepEvalBackend(llm))
    c = await rb.complete(req("x", json_schema=SCHEMA))
    assert c.text == '{"grade": 0, "reason": "无关"}'
    assert c.cost == 0.0125  # reported by the model
    assert llm.calls == 1  # called once, without schema, no TypeError dance
    assert rb.stats.cost == 0.0125


async def test_deepeval_backend_falls_back_to_sync_generate_in_thread() -> None:
    b = DeepEvalBackend(SyncOnlyLLM())
    c = await b.complete(req("x", json_schema=SCHEMA))
    assert json.loads(c.text) == {"grade": 2, "reason": "sync:LLMGrade"}


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError("slow"), TransientError),
        (ConnectionError("reset"), TransientError),
        (TypeError("a real bug"), PermanentError),
        (ValueError("bad"), PermanentError),
    ],
)
async def test_deepeval_backend_maps_errors(exc: Exception, expected: type[Exception]) -> None:
    llm = BuggyLLM(exc)
    b = DeepEvalBackend(llm)
    with pytest.raises(expected) as info:
        await b.complete(req("x", json_schema=SCHEMA))
    assert type(info.value) is expected
    assert llm.calls == 1  # a TypeError is reported, not retried without schema


async def test_deepeval_backend_maps_provider_status() -> None:
    class RateLimitError_(Exception):
        status_code = 429

    b = DeepEvalBackend(BuggyLLM(RateLimitError_("too many")))
    with pytest.raises(RateLimitError):
        await b.complete(req())


async def test_deepeval_backend_refuses_probabilities_and_prefill() -> None:
    b = DeepEvalBackend(SchemaLLM())
    with pytest.raises(UnsupportedError):
        await b.complete(req(candidates=("yes", "no")))
    with pytest.raises(UnsupportedError):
        await b.complete(req(answer_prefix="{"))


def test_resolve_accepts_a_deepeval_model() -> None:
    llm = SchemaLLM()
    b = resolve_backend(llm)
    assert isinstance(b, DeepEvalBackend) and b.llm is llm
    # by spec string: deepeval:<module>:<Class>, instantiated with no arguments
    b2 = resolve_backend(f"deepeval:{__name__}:SchemaLLM")
    assert isinstance(b2, DeepEvalBackend)
    assert (b2.name, b2.model) == ("deepeval:SchemaLLM", "schema-llm")


def test_schema_to_model_constructs() -> None:
    model = schema_to_model(
        {
            "type": "object",
            "properties": {
                "verdict": {"enum": ["yes", "no"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "inner": {"$ref": "#/$defs/Inner"},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
            "required": ["verdict", "inner"],
            "$defs": {
                "Inner": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
            },
        }
    )
    assert model is not None
    ok = model.model_validate({"verdict": "yes", "inner": {"x": 1.5}, "tags": ["a"]})
    assert ok.verdict == "yes"  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        model.model_validate({"verdict": "maybe", "inner": {"x": 1}})
    assert schema_to_model({"type": "string"}) is None
    assert schema_to_model({"type": "object", "properties": {"x": {"type": "weird"}}}) is None
