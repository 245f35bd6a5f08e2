"""The Qwen (dashscope SDK) and OpenAI-compatible (openai client) backends on the wire.

A real HTTP server on 127.0.0.1 (aiohttp) stands in for DashScope / vLLM: the SDKs send
real requests, and the tests check the JSON bodies and headers that arrive (model,
messages, temperature, top_p, seed, response format, logprobs, prefill) and how replies
and HTTP errors are mapped. dashscope's async client is aiohttp and openai's is httpx2,
which respx cannot intercept, hence the stub server rather than respx.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from _helpers import serve_posts
from aiohttp import web

from judge.backends import (
    ChatRequest,
    Message,
    OpenAIBackend,
    PermanentError,
    QwenBackend,
    RateLimitError,
    ResilientBackend,
    TransientError,
    UnsupportedError,
    resolve_backend,
)

KEY = "sk-test-0123456789abcdef"
SCHEMA = {
    "title": "LLMVerdict",
    "type": "object",
    "properties": {"verdict": {"enum": ["yes", "no"]}, "reason": {"type": "string"}},
    "required": ["verdict", "reason"],
    "additionalProperties": False,
}
MESSAGES = (
    Message("system", "你是相关性评审员。只输出 JSON。"),
    Message("user", "查询：小狗贫血的表现\n段落：牙龈苍白"),
)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Stub:
    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    replies: deque[tuple[int, Any, dict[str, str]]] = field(default_factory=deque)

    def reply(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self.replies.append((status, payload, headers or {}))

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append(Seen(request.path, dict(request.headers), body))
        status, payload, headers = self.replies.popleft()
        return web.json_response(payload, status=status, headers=headers)


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    s = Stub()
    async with serve_posts(s.handle) as url:
        s.url = url
        yield s


@pytest.fixture(autouse=True)
def _no_env_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DASHSCOPE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)


# -- DashScope native API -------------------------------------------------------------------


def ds_ok(content: str, *, logprobs: list[tuple[str, float]] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"finish_reason": "stop", "message": {"role": "assistant", "content": content}}
    if logprobs is not None:
        choice["logprobs"] = {
            "content": [
                {
                    "token": logprobs[0][0],
                    "logprob": logprobs[0][1],
                    "top_logprobs": [{"token": t, "logprob": lp} for t, lp in logprobs],
                }
            ]
        }
    return {
        "request_id": "req-1",
        "output": {"choices": [choice]},
        "usage": {"input_tokens": 42, "output_tokens": 9, "total_tokens": 51},
    }


def qwen(stub: Stub, **kw: Any) -> QwenBackend:
    return QwenBackend("qwen-plus", api_key=KEY, base_url=f"{stub.url}/api/v1", **kw)


async def test_qwen_sends_model_messages_sampling_and_json_mode(stub: Stub) -> None:
    stub.reply(200, ds_ok('{"verdict": "yes", "reason": "提到牙龈苍白"}'))
    backend = qwen(stub)
    request = ChatRequest(
        messages=MESSAGES, temperature=0.0, top_p=0.8, seed=1234, max_tokens=256, json_schema=SCHEMA
    )
    c = await backend.complete(request)
    await backend.aclose()
    (seen,) = stub.seen
    assert seen.path == "/api/v1/services/aigc/text-generation/generation"
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert seen.body["model"] == "qwen-plus"
    assert seen.body["input"]["messages"] == [
        {"role": "system", "content": "你是相关性评审员。只输出 JSON。"},
        {"role": "user", "content": "查询：小狗贫血的表现\n段落：牙龈苍白"},
    ]
    assert seen.body["parameters"] == {
        "result_format": "message",
        "temperature": 0.0,
        "top_p": 0.8,
        "seed": 1234,
        "max_tokens": 256,
        "response_format": {"type": "json_object"},
    }
    assert c.text == '{"verdict": "yes", "reason": "提到牙龈苍白"}'
    assert (c.usage.prompt_tokens, c.usage.completion_tokens) == (42, 9)
    assert c.finish_reason == "stop" and c.model == "qwen-plus"
    assert c.token_probs is None


async def test_qwen_json_schema_mode_and_qwen3_thinking_off(stub: Stub) -> None:
    stub.reply(200, ds_ok("{}"))
    stub.reply(200, ds_ok("plain"))
    b = qwen(stub, structured="json_schema", strict_schema=True)
    await b.complete(ChatRequest(messages=MESSAGES, json_schema=SCHEMA))
    assert stub.seen[0].body["parameters"]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "LLMVerdict", "schema": SCHEMA, "strict": True},
    }
    q3 = QwenBackend("qwen3-8b", api_key=KEY, base_url=f"{stub.url}/api/v1", structured="none")
    await q3.complete(ChatRequest(messages=MESSAGES, json_schema=SCHEMA))
    params = stub.seen[1].body["parameters"]
    assert params["enable_thinking"] is False
    assert "response_format" not in params
    await b.aclose()
    await q3.aclose()


async def test_qwen_probability_mode_prefill_and_logprobs(stub: Stub) -> None:
    top = [("yes", math.log(0.6)), (" Yes", math.log(0.1)), ("no", math.log(0.2)), ("maybe", math.log(0.05))]
    stub.reply(200, ds_ok("yes", logprobs=top))
    b = qwen(stub)
    request = ChatRequest(
        messages=MESSAGES,
        answer_prefix='{"verdict": "',
        candidates=("yes", "no", "unsure"),
        json_schema=SCHEMA,
        max_tokens=300,
    )
    c = await b.complete(request)
    await b.aclose()
    body = stub.seen[0].body
    assert body["input"]["messages"][-1] == {"role": "assistant", "content": '{"verdict": "', "partial": True}
    params = body["parameters"]
    assert (params["logprobs"], params["top_logprobs"], params["max_tokens"]) == (True, 5, 1)
    assert "response_format" not in params
    assert c.token_probs is not None
    assert c.token_probs["yes"] == pytest.approx(0.7)  # "yes" + " Yes"
    assert c.token_probs["no"] == pytest.approx(0.2)
    assert c.token_probs["unsure"] == 0.0


async def test_qwen_missing_logprobs_is_unsupported(stub: Stub) -> None:
    stub.reply(200, ds_ok("yes"))
    b = qwen(stub)
    with pytest.raises(UnsupportedError, match="no logprobs"):
        await b.complete(ChatRequest(messages=MESSAGES, candidates=("yes", "no")))
    await b.aclose()


@pytest.mark.parametrize(
    ("status", "payload", "headers", "error", "retry_after"),
    [
        (
            429,
            {"code": "Throttling.RateQuota", "message": "Requests rate limit exceeded"},
            {"Retry-After": "7"},
            RateLimitError,
            7.0,
        ),
        (429, {"code": "Throttling", "message": "slow"}, {}, RateLimitError, None),
        (500, {"code": "InternalError", "message": "oops"}, {}, TransientError, None),
        (503, {"code": "ServiceUnavailable", "message": "busy"}, {}, TransientError, None),
        (400, {"code": "InvalidParameter", "message": "bad"}, {}, PermanentError, None),
        (
            401,
            {"code": "InvalidApiKey", "message": f"Invalid API-key provided: {KEY}"},
            {},
            PermanentError,
            None,
        ),
    ],
)
async def test_qwen_http_errors_are_classified(
    stub: Stub,
    status: int,
    payload: Any,
    headers: dict[str, str],
    error: type[Exception],
    retry_after: float | None,
) -> None:
    stub.reply(status, payload, headers)
    b = qwen(stub)
    with pytest.raises(error) as info:
        await b.complete(ChatRequest(messages=MESSAGES))
    await b.aclose()
    assert type(info.value) is error
    assert f"HTTP {status}" in str(info.value)
    assert payload["code"] in str(info.value)
    assert KEY not in str(info.value)
    if isinstance(info.value, RateLimitError):
        assert info.value.retry_after == retry_after


async def test_qwen_connection_refused_is_transient() -> None:
    b = QwenBackend("qwen-plus", api_key=KEY, base_url="http://127.0.0.1:9/api/v1")
    with pytest.raises(TransientError, match="connection error"):
        await b.complete(ChatRequest(messages=MESSAGES))
    await b.aclose()


async def test_qwen_fails_twice_then_succeeds_through_resilient(stub: Stub) -> None:
    stub.reply(500, {"code": "InternalError", "message": "x"})
    stub.reply(429, {"code": "Throttling", "message": "y"}, {"Retry-After": "1.5"})
    stub.reply(200, ds_ok('{"verdict": "no", "reason": "无关"}'))
    slept: list[float] = []

    async def fake_sleep(d: float) -> None:
        slept.append(d)

    rb = ResilientBackend(qwen(stub), sleep=fake_sleep)
    c = await rb.complete(ChatRequest(messages=MESSAGES, seed=7))
    await rb.aclose()
    assert c.text == '{"verdict": "no", "reason": "无关"}'
    assert c.attempts == 3
    assert len(stub.seen) == 3
    assert all(s.body["parameters"]["seed"] == 7 for s in stub.seen)
    assert slept[1] == 1.5  # Retry-After honoured
    # qwen-plus price: 42 in, 9 out
    assert c.cost == pytest.approx((42 * 0.8 + 9 * 2.0) / 1e6)


def test_qwen_needs_a_key() -> None:
    from judge.backends import ConfigurationError

    with pytest.raises(ConfigurationError, match="DASHSCOPE_API_KEY"):
        QwenBackend("qwen-plus")


# -- OpenAI-compatible ----------------------------------------------------------------------


def oa_ok(
    content: str, *, logprobs: list[tuple[str, float]] | None = None, model: str = "m"
) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
    }
    if logprobs is not None:
        choice["logprobs"] = {
            "content": [
                {
                    "token": logprobs[0][0],
                    "logprob": logprobs[0][1],
                    "bytes": None,
                    "top_logprobs": [{"token": t, "logprob": lp, "bytes": None} for t, lp in logprobs],
                }
            ]
        }
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34},
    }


def oai(stub: Stub, **kw: Any) -> OpenAIBackend:
    return OpenAIBackend("Qwen/Qwen2.5-7B-Instruct", base_url=f"{stub.url}/v1", api_key=KEY, **kw)


async def test_openai_sends_model_messages_sampling_and_json_schema(stub: Stub) -> None:
    stub.reply(200, oa_ok('{"verdict": "yes", "reason": "r"}', model="Qwen/Qwen2.5-7B-Instruct"))
    b = oai(stub)
    c = await b.complete(
        ChatRequest(
            messages=MESSAGES, temperature=0.0, top_p=0.9, seed=99, max_tokens=128, json_schema=SCHEMA
        )
    )
    await b.aclose()
    (seen,) = stub.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert seen.body == {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "messages": [{"role": m.role, "content": m.content} for m in MESSAGES],
        "temperature": 0.0,
        "top_p": 0.9,
        "seed": 99,
        "max_tokens": 128,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "LLMVerdict", "schema": SCHEMA, "strict": False},
        },
    }
    assert c.text == '{"verdict": "yes", "reason": "r"}'
    assert (c.usage.prompt_tokens, c.usage.completion_tokens) == (30, 4)
    assert c.model == "Qwen/Qwen2.5-7B-Instruct"


async def test_openai_json_object_and_none_modes(stub: Stub) -> None:
    stub.reply(200, oa_ok("{}"))
    stub.reply(200, oa_ok("{}"))
    b1, b2 = oai(stub, structured="json_object"), oai(stub, structured="none")
    await b1.complete(ChatRequest(messages=MESSAGES, json_schema=SCHEMA))
    await b2.complete(ChatRequest(messages=MESSAGES, json_schema=SCHEMA))
    assert stub.seen[0].body["response_format"] == {"type": "json_object"}
    assert "response_format" not in stub.seen[1].body
    assert "seed" not in stub.seen[1].body and "top_p" not in stub.seen[1].body
    await b1.aclose()
    await b2.aclose()


async def test_openai_probability_mode_vllm_prefill(stub: Stub) -> None:
    top = [("2", math.log(0.5)), ("3", math.log(0.3)), (" 2", math.log(0.05)), ("1", math.log(0.1))]
    stub.reply(200, oa_ok("2", logprobs=top))
    b = oai(stub)
    assert b.prefill == "continue_final_message"  # auto for a non-DashScope, non-OpenAI URL
    c = await b.complete(
        ChatRequest(messages=MESSAGES, answer_prefix='{"grade": ', candidates=("0", "1", "2", "3"))
    )
    await b.aclose()
    body = stub.seen[0].body
    assert body["messages"][-1] == {"role": "assistant", "content": '{"grade": '}
    assert (body["logprobs"], body["top_logprobs"], body["max_tokens"]) == (True, 20, 1)
    assert (body["continue_final_message"], body["add_generation_prompt"]) == (True, False)
    assert c.token_probs == pytest.approx({"0": 0.0, "1": 0.1, "2": 0.55, "3": 0.3})


async def test_openai_dashscope_compatible_mode_uses_partial(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = OpenAIBackend("qwen-plus", base_url="https://dashscope.aliyuncs.com/compatible-mode/v1", api_key=KEY)
    assert (b.prefill, b.top_logprobs) == ("partial", 5)
    kwargs = b.build_request(ChatRequest(messages=MESSAGES, answer_prefix="答案：", candidates=("是", "否")))
    assert kwargs["messages"][-1] == {"role": "assistant", "content": "答案：", "partial": True}
    assert "extra_body" not in kwargs
    # the key for DashScope's compatible mode may come from DASHSCOPE_API_KEY
    monkeypatch.setenv("DASHSCOPE_API_KEY", "ds-key-123456789")
    b2 = OpenAIBackend("qwen-plus", base_url="https://dashscope.aliyuncs.com/compatible-mode/v1")
    assert b2._api_key == "ds-key-123456789"


async def test_openai_prefill_refused_where_unsupported() -> None:
    b = OpenAIBackend("gpt-4o-mini", api_key=KEY)
    assert b.prefill == "none"
    with pytest.raises(UnsupportedError, match="prefix"):
        await b.complete(ChatRequest(messages=MESSAGES, answer_prefix="{", candidates=("yes",)))


async def test_openai_plain_prefill_for_ollama(stub: Stub) -> None:
    b = oai(stub, prefill="plain")
    kwargs = b.build_request(ChatRequest(messages=MESSAGES, answer_prefix="X"))
    assert kwargs["messages"][-1] == {"role": "assistant", "content": "X"}
    assert "extra_body" not in kwargs


@pytest.mark.parametrize(
    ("status", "headers", "error", "retry_after"),
    [
        (429, {"Retry-After": "3"}, RateLimitError, 3.0),
        (429, {"retry-after-ms": "250"}, RateLimitError, 0.25),
        (500, {}, TransientError, None),
        (502, {}, TransientError, None),
        (400, {}, PermanentError, None),
        (401, {}, PermanentError, None),
        (404, {}, PermanentError, None),
    ],
)
async def test_openai_http_errors_are_classified_and_not_retried_by_client(
    stub: Stub, status: int, headers: dict[str, str], error: type[Exception], retry_after: float | None
) -> None:
    stub.reply(status, {"error": {"message": f"nope {KEY}", "type": "x", "code": "c"}}, headers)
    b = oai(stub)
    with pytest.raises(error) as info:
        await b.complete(ChatRequest(messages=MESSAGES))
    await b.aclose()
    assert type(info.value) is error
    assert len(stub.seen) == 1  # the openai client's own retries are off
    assert f"HTTP {status}" in str(info.value)
    assert KEY not in str(info.value)
    if isinstance(info.value, RateLimitError):
        assert info.value.retry_after == retry_after


async def test_openai_missing_logprobs_is_unsupported(stub: Stub) -> None:
    stub.reply(200, oa_ok("yes"))
    b = oai(stub)
    with pytest.raises(UnsupportedError):
        await b.complete(ChatRequest(messages=MESSAGES, answer_prefix="{", candidates=("yes", "no")))
    await b.aclose()


async def test_openai_connection_refused_is_transient() -> None:
    b = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    with pytest.raises(TransientError):
        await b.complete(ChatRequest(messages=MESSAGES))
    await b.aclose()


async def test_openai_local_server_needs_no_key(stub: Stub) -> None:
    stub.reply(200, oa_ok("hi"))
    b = OpenAIBackend("llama", base_url=f"{stub.url}/v1")
    assert (await b.complete(ChatRequest(messages=MESSAGES))).text == "hi"
    assert stub.seen[0].headers["Authorization"] == "Bearer EMPTY"
    await b.aclose()


async def test_resolved_from_env_base_url(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{stub.url}/v1")
    monkeypatch.setenv("OPENAI_MODEL", "qwen2.5:7b")
    stub.reply(200, oa_ok("ok"))
    b = resolve_backend()
    assert b.name == "openai:qwen2.5:7b"
    assert (await b.complete(ChatRequest(messages=MESSAGES))).text == "ok"
    assert stub.seen[0].body["model"] == "qwen2.5:7b"
    await b.aclose()


def test_bodies_are_json_serialisable_and_key_free() -> None:
    b = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    kwargs = b.build_request(ChatRequest(messages=MESSAGES, json_schema=SCHEMA))
    assert KEY not in json.dumps(kwargs)


# -- shared parsing helpers -----------------------------------------------------------------


def test_candidate_probs_sums_variants_and_handles_empty_and_ties() -> None:
    from judge.backends import candidate_probs

    top = [("Yes", math.log(0.3)), (" yes", math.log(0.2)), ("no", math.log(0.3)), ("{", math.log(0.1))]
    assert candidate_probs(top, ("yes", "no")) == pytest.approx({"yes": 0.5, "no": 0.3})
    # tied candidates keep equal mass; candidates no token matches get 0.0
    assert candidate_probs([("a", math.log(0.4)), ("b", math.log(0.4))], ("a", "b", "c")) == pytest.approx(
        {"a": 0.4, "b": 0.4, "c": 0.0}
    )
    assert candidate_probs([], ("yes", "no")) == {"yes": 0.0, "no": 0.0}
    assert candidate_probs(top, ()) == {}


def test_parse_retry_after_forms() -> None:
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from judge.backends import parse_retry_after

    assert parse_retry_after({"Retry-After": "12"}) == 12.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "300", "Retry-After": "9"}) == 0.3
    assert parse_retry_after({"Retry-After": "-4"}) == 0.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None
    future = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    waited = parse_retry_after({"Retry-After": future})
    assert waited is not None and 55.0 <= waited <= 60.0


# -- the two chat backends agree (one copy of each shared rule) -------------------------------


def _logprob_content(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"content": entries}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # the token is reported without a logprob and no alternatives: probability 0, not 1
        ([{"token": "yes"}], {"yes": 0.0, "no": 0.0}),
        ([{"token": "yes", "logprob": None, "top_logprobs": []}], {"yes": 0.0, "no": 0.0}),
        # an alternative without a logprob counts 0; the others count
        (
            [{"token": "yes", "logprob": math.log(0.7), "top_logprobs": [
                {"token": "yes", "logprob": math.log(0.7)}, {"token": "no"}]}],
            {"yes": 0.7, "no": 0.0},
        ),
    ],
)  # fmt: skip
async def test_missing_logprob_means_probability_zero_in_both_backends(
    stub: Stub, content: list[dict[str, Any]], expected: dict[str, float]
) -> None:
    ds = ds_ok("yes")
    ds["output"]["choices"][0]["logprobs"] = _logprob_content(content)
    oa = oa_ok("yes")
    oa["choices"][0]["logprobs"] = _logprob_content(content)
    stub.reply(200, ds)
    stub.reply(200, oa)
    request = ChatRequest(messages=MESSAGES, candidates=("yes", "no"))
    got = []
    for backend in (qwen(stub), oai(stub)):
        c = await backend.complete(request)
        await backend.aclose()
        assert c.token_probs is not None
        got.append({k: pytest.approx(v) for k, v in c.token_probs.items()})
    assert got[0] == got[1] == {k: pytest.approx(v) for k, v in expected.items()}


async def test_json_schema_name_is_sanitised_the_same_in_both_backends(stub: Stub) -> None:
    schema = {**SCHEMA, "title": "判定 Verdict (v2)"}
    request = ChatRequest(messages=MESSAGES, json_schema=schema)
    q = qwen(stub, structured="json_schema").build_parameters(request)
    o = oai(stub).build_request(request)
    assert q["response_format"]["json_schema"]["name"] == "___Verdict__v2_"
    assert o["response_format"]["json_schema"]["name"] == "___Verdict__v2_"
    untitled = {k: v for k, v in SCHEMA.items() if k != "title"}
    request = ChatRequest(messages=MESSAGES, json_schema=untitled)
    assert (
        qwen(stub, structured="json_schema").build_parameters(request)["response_format"]["json_schema"][
            "name"
        ]
        == "response"
    )
