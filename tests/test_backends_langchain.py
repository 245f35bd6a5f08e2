"""LangChain models as judges: any langchain_core BaseLanguageModel, Tongyi and ChatTongyi.

No network: FakeListChatModel is langchain_core's scripted chat model, and the Tongyi
objects' DashScope call (``dashscope.Generation.call``) is intercepted.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import dashscope
import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

with warnings.catch_warnings():  # "langchain-community is being sunset": we only use its Tongyi classes
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_community.chat_models.tongyi import ChatTongyi
    from langchain_community.llms.tongyi import Tongyi

import judge
from judge.backends import (
    CallPolicy,
    ChatRequest,
    ConfigurationError,
    LangChainBackend,
    Message,
    PermanentError,
    RateLimitError,
    ResilientBackend,
    TransientError,
    UnsupportedError,
    make_backend,
    resolve_backend,
)
from judge.judging import JudgeConfig, verdict_cache_key

QUERY = "小狗贫血的表现"
PASSAGES = ["小狗贫血时牙龈颜色变淡。", "狗粮的保质期一般为一年。", "贫血的幼犬食欲下降。"]
MESSAGES = (Message("system", "判断相关性，只输出 JSON。"), Message("user", "问题：x\n段落：y"))


class DashScopeStub:
    """Stands in for ``dashscope.Generation.call``: records every call's keyword arguments
    and answers with a DashScope-shaped response (chat ``choices`` or completion ``text``)."""

    def __init__(self, replies: list[str], *, status: int = 200, code: str = "") -> None:
        self.replies = list(replies)
        self.status = status
        self.code = code
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.status != 200:
            return {
                "status_code": self.status,
                "request_id": "req-1",
                "code": self.code,
                "message": "stubbed failure",
            }
        text = self.replies[min(len(self.calls), len(self.replies)) - 1]
        usage = {"input_tokens": 30, "output_tokens": 4, "total_tokens": 34}
        if kwargs.get("result_format") == "message":
            output: dict[str, Any] = {
                "choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": text}}]
            }
        else:
            output = {"text": text, "finish_reason": "stop"}
        return {"status_code": 200, "request_id": "req-1", "output": output, "usage": usage}


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> DashScopeStub:
    fake = DashScopeStub(['{"verdict": "yes", "reason": "提到了症状"}'])
    monkeypatch.setattr(dashscope.Generation, "call", fake)
    return fake


# ---- any chat model through judge.evaluate ------------------------------------------------


def test_fake_list_chat_model_judges_through_evaluate() -> None:
    model = FakeListChatModel(
        responses=[
            '{"verdict": "yes", "reason": "段落列出了贫血症状"}',
            '好的：```json\n{"verdict": "no", "reason": "讲的是保质期"}\n```',
            '{"verdict": "yes", "reason": null, "grade": 2}',  # harmless extras
        ]
    )
    result = judge.evaluate(
        QUERY, PASSAGES, backend=model, summary=False, k=(3,), policy=CallPolicy(concurrency=1)
    )
    assert [v.verdict for v in result.verdicts] == ["yes", "no", "yes"]
    assert [v.reason for v in result.verdicts] == ["段落列出了贫血症状", "讲的是保质期", ""]
    assert result.unjudged == 0
    assert result.backend == "langchain:FakeListChatModel"
    assert {v.backend for v in result.verdicts} == {"langchain:FakeListChatModel"}
    # AP over the judged list: relevant at ranks 1 and 3 -> (1/1 + 2/3) / 2
    assert result.ap == pytest.approx((1 + 2 / 3) / 2)
    assert result.usage.calls == 3
    # the reply with an extra key is kept whole in raw; the others need no raw
    assert result.verdicts[2].raw is not None and '"grade": 2' in result.verdicts[2].raw
    assert result.verdicts[0].raw is None


def test_relevancy_judge_accepts_a_langchain_model() -> None:
    model = FakeListChatModel(responses=['{"verdict": "no", "reason": "无关"}'])
    metric = judge.RelevancyJudge(model, include_reason=False)
    assert isinstance(metric.backend, ResilientBackend)
    assert metric.backend.name == "langchain:FakeListChatModel"


def test_invalid_reply_is_reasked_then_unjudged_with_raw_text() -> None:
    model = FakeListChatModel(responses=['{"verdict": "maybe", "reason": "说不准"}'])
    result = judge.evaluate(QUERY, PASSAGES[:1], backend=model, summary=False)
    v = result.verdicts[0]
    assert v.verdict == "unjudged" and v.attempts == 3 and v.reasks == 2
    assert v.raw == '{"verdict": "maybe", "reason": "说不准"}'


async def test_probability_mode_and_prefill_are_refused() -> None:
    backend = LangChainBackend(FakeListChatModel(responses=["x"]))
    assert backend.supports_probabilities is False
    with pytest.raises(UnsupportedError):
        await backend.complete(ChatRequest(messages=MESSAGES, candidates=("yes", "no")))
    with pytest.raises(UnsupportedError):
        await backend.complete(ChatRequest(messages=MESSAGES, answer_prefix='{"verdict": "'))


def test_refuses_what_is_not_a_langchain_model() -> None:
    with pytest.raises(ConfigurationError) as info:
        LangChainBackend(object())
    assert info.value.field == "backend"
    with pytest.raises(ConfigurationError) as info:
        LangChainBackend(FakeListChatModel(responses=["x"]), request_params=("temperature", "colour"))
    assert info.value.field == "request_params"


# ---- Tongyi / ChatTongyi ------------------------------------------------------------------


def test_tongyi_object_resolves_to_a_backend_named_with_its_model() -> None:
    llm = Tongyi(dashscope_api_key="sk-test")
    raw = judge.resolve_backend(llm)
    assert isinstance(raw, LangChainBackend)
    assert (raw.name, raw.model) == ("langchain:qwen-plus", "qwen-plus")
    made = make_backend(Tongyi(model="qwen-max", dashscope_api_key="sk-test"))
    assert isinstance(made, ResilientBackend) and made.name == "langchain:qwen-max"
    assert made.max_concurrency == 16  # the call policy's default
    assert "sk-test" not in json.dumps(made.params())


def test_model_name_and_settings_are_in_the_cache_key() -> None:
    config = JudgeConfig()
    plus = resolve_backend(Tongyi(dashscope_api_key="sk-test"))
    other = resolve_backend(Tongyi(model="qwen-max", dashscope_api_key="sk-test"))
    cold = resolve_backend(Tongyi(dashscope_api_key="sk-test", model_kwargs={"top_k": 5}))
    keys = {verdict_cache_key(b, config, QUERY, PASSAGES[0]) for b in (plus, other, cold)}
    assert len(keys) == 3
    assert cold.params()["model_kwargs"] == {"top_k": 5}
    # and never the key
    assert "sk-test" not in json.dumps(cold.params())


async def test_tongyi_per_request_temperature_and_seed_reach_dashscope(stub: DashScopeStub) -> None:
    # Constructor temperature/seed are silently dropped by Tongyi (no such fields) ...
    llm = Tongyi(api_key="sk-test", temperature=0.9, seed=7)  # type: ignore[call-arg]
    assert not hasattr(llm, "temperature") and not hasattr(llm, "seed")
    # (so is Tongyi's dashscope_api_key=: only its alias api_key= is read; ChatTongyi takes both)
    assert Tongyi(dashscope_api_key="sk-test").dashscope_api_key is None
    backend = resolve_backend(llm)
    request = ChatRequest(messages=MESSAGES, temperature=0.0, seed=42, max_tokens=64)
    completion = await backend.complete(request)
    # ... the request's settings are what DashScope receives.
    (call,) = stub.calls
    assert (call["temperature"], call["seed"], call["max_tokens"]) == (0.0, 42, 64)
    assert call["model"] == "qwen-plus" and call["api_key"] == "sk-test"
    assert call["prompt"] == "判断相关性，只输出 JSON。\n\n问题：x\n段落：y"
    assert completion.text == '{"verdict": "yes", "reason": "提到了症状"}'
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (30, 4)
    assert completion.model == "qwen-plus"


async def test_chat_tongyi_sends_messages_and_sampling(stub: DashScopeStub) -> None:
    backend = make_backend(ChatTongyi(model="qwen-turbo", dashscope_api_key="sk-test"))
    assert backend.name == "langchain:qwen-turbo"
    completion = await backend.complete(ChatRequest(messages=MESSAGES, temperature=0.0, seed=3, top_p=0.5))
    (call,) = stub.calls
    assert (call["temperature"], call["seed"], call["top_p"]) == (0.0, 3, 0.5)
    assert call["messages"] == [
        {"role": "system", "content": MESSAGES[0].content},
        {"role": "user", "content": MESSAGES[1].content},
    ]
    assert completion.usage.total_tokens == 34
    # priced like qwen:qwen-turbo (0.3 in / 0.6 out CNY per 1M tokens)
    assert backend.stats.cost == pytest.approx((30 * 0.3 + 4 * 0.6) / 1e6)


def test_judge_evaluate_with_tongyi_uses_the_judge_config(stub: DashScopeStub) -> None:
    llm = ChatTongyi(dashscope_api_key="sk-test", max_retries=1)
    result = judge.evaluate(QUERY, PASSAGES[:2], backend=llm, summary=False)
    assert [v.verdict for v in result.verdicts] == ["yes", "yes"]
    assert all(c["temperature"] == 0.0 and c["seed"] == 42 for c in stub.calls)
    assert result.usage.prompt_tokens == 60


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (429, "Throttling.RateQuota", RateLimitError),
        (500, "InternalError", TransientError),
        (503, "ServiceUnavailable", TransientError),
        (400, "InvalidParameter", PermanentError),
        (401, "InvalidApiKey", PermanentError),
    ],
)
async def test_tongyi_errors_map_to_our_classes(
    monkeypatch: pytest.MonkeyPatch, status: int, code: str, error: type[Exception]
) -> None:
    fake = DashScopeStub([], status=status, code=code)
    monkeypatch.setattr(dashscope.Generation, "call", fake)
    backend = resolve_backend(ChatTongyi(dashscope_api_key="sk-test-secret-123", max_retries=1))
    with pytest.raises(error) as info:
        await backend.complete(ChatRequest(messages=MESSAGES))
    assert type(info.value) is error or isinstance(info.value, error)
    assert "sk-test-secret-123" not in str(info.value)
    if error is RateLimitError:
        assert isinstance(info.value, RateLimitError)
    if error is TransientError:
        assert not isinstance(info.value, RateLimitError)


async def test_transient_failures_are_retried_by_the_call_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes: list[dict[str, Any]] = []

    def flaky(**kwargs: Any) -> dict[str, Any]:
        outcomes.append(kwargs)
        if len(outcomes) == 1:
            return {"status_code": 503, "request_id": "r", "code": "ServiceUnavailable", "message": "busy"}
        return DashScopeStub(['{"verdict": "no", "reason": "无关"}'])(**kwargs)

    monkeypatch.setattr(dashscope.Generation, "call", flaky)

    async def no_sleep(_s: float) -> None:
        return None

    backend = ResilientBackend(
        resolve_backend(ChatTongyi(dashscope_api_key="sk-test", max_retries=1)), sleep=no_sleep
    )
    completion = await backend.complete(ChatRequest(messages=MESSAGES))
    assert completion.text.startswith('{"verdict": "no"')
    assert (completion.attempts, backend.stats.retries, len(outcomes)) == (2, 1, 2)
