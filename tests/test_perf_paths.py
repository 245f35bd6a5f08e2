"""The client hot path made cheaper gives the same results as the straightforward code.

* ``verdict_cache_key`` (serialised once per backend/config/template, then only the query
  and passage) equals the sha256 of the documented ``json.dumps`` of the whole payload, so
  existing verdict caches stay valid;
* ``estimate_tokens`` (C-speed wide-character count) equals the per-character
  ``unicodedata.east_asian_width`` definition;
* the OpenAI backend's direct POST sends ``build_request`` with ``extra_body`` merged at the
  top level, the openai client's headers, and reads the reply as the SDK would;
* ``ResilientBackend``'s first attempt outside tenacity keeps the same retry waits and
  counters; its price lookups follow a replaced price table;
* a timed-out embedded-model call keeps the model lock until its thread has finished.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import threading
import unicodedata
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from _helpers import serve_posts
from aiohttp import web

from judge.backends import (
    Backend,
    ChatRequest,
    Completion,
    Message,
    OpenAIBackend,
    PermanentError,
    PriceTable,
    RateLimitError,
    ResilientBackend,
    ScriptedBackend,
    TransientError,
    Usage,
    estimate_tokens,
)
from judge.backends._local import LocalBackend
from judge.judging import JudgeConfig, verdict_cache_key
from judge.judging._config import bind_language, template_for

KEY = "sk-perf-0123456789abcdef"
MESSAGES = (
    Message("system", "你是相关性评审员。只输出 JSON。"),
    Message("user", "查询：小狗贫血\n段落：牙龈苍白"),
)


# -- verdict cache key ----------------------------------------------------------------------


def reference_key(backend: Any, config: JudgeConfig, query: str, passage: str) -> str:
    """The cache key as first defined: one json.dumps of the whole payload (of the config
    bound to the query's language when it is ``auto``)."""
    config = bind_language(config, query, [passage])
    template = template_for(config)
    payload = {
        "v": 1,
        "backend": backend.name,
        "model": backend.model,
        "backend_params": backend.params(),
        "config": config.cache_params(),
        "template_id": template.id,
        "template_hash": template.hash,
        "query": query,
        "passage": passage,
    }
    blob = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@pytest.mark.parametrize(
    "config",
    [JudgeConfig(), JudgeConfig(mode="graded", language="en", seed=None, top_p=0.5, max_tokens=64)],
)
def test_cache_key_equals_the_whole_payload_hash(config: JudgeConfig) -> None:
    backends: list[Backend] = [
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key=KEY),
        OpenAIBackend(
            "m", base_url="http://127.0.0.1:9/v1", api_key=KEY, extra_body={"z": 1, "a": [1, {"y": None}]}
        ),
        ScriptedBackend(["x"], name="fake:a", model="b", params={"when": 1.5, "nan": math.nan}),
    ]
    texts = [("q", "p"), ("", ""), ('查询 "引号" \\ 斜杠', "段落\n\u2028<passage>\t\x00"), ("q", "q")]
    keys = set()
    for backend in backends:
        for query, passage in texts:
            key = verdict_cache_key(backend, config, query, passage)
            assert key == reference_key(backend, config, query, passage)
            keys.add(key)
    assert len(keys) == len(backends) * len(texts)  # query and passage are not interchangeable
    # swapping query and passage changes the key
    b = backends[0]
    assert verdict_cache_key(b, config, "a", "b") != verdict_cache_key(b, config, "b", "a")


def test_cache_key_follows_backend_params_that_change() -> None:
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    config = JudgeConfig()
    before = verdict_cache_key(backend, config, "q", "p")
    backend.structured = "json_object"
    after = verdict_cache_key(backend, config, "q", "p")
    assert before != after
    assert after == reference_key(backend, config, "q", "p")


# -- token estimate -------------------------------------------------------------------------


def reference_estimate(request: ChatRequest) -> int:
    total = 0
    texts = [m.content for m in request.messages]
    if request.answer_prefix:
        texts.append(request.answer_prefix)
    for text in texts:
        wide = sum(1 for ch in text if unicodedata.east_asian_width(ch) in ("W", "F"))
        total += wide + math.ceil((len(text) - wide) / 4) + 4
    return total + (request.max_tokens or 0)


def test_estimate_tokens_matches_the_per_character_definition() -> None:
    rng = random.Random(5)

    def text() -> str:
        pools = [(0, 128), (0x3000, 0xA000), (0xFF00, 0xFFEF), (0, 0x110000)]
        chars = []
        for _ in range(rng.randrange(0, 120)):
            lo, hi = rng.choice(pools)
            chars.append(chr(rng.randrange(lo, hi)))
        return "".join(chars)

    for _ in range(400):
        n = rng.randrange(0, 4)
        request = ChatRequest(
            messages=tuple(Message("user", text()) for _ in range(n)),
            answer_prefix=rng.choice([None, "", text()]),
            max_tokens=rng.choice([None, 7]),
        )
        assert estimate_tokens(request) == reference_estimate(request)
    # hand-derived: 4 wide + ceil(5 / 4) = 2 + 4 per message; "ab" = 1 + 4; max_tokens 3
    request = ChatRequest(messages=(Message("user", "中文ab字符 xyz"),), answer_prefix="ab", max_tokens=3)
    assert estimate_tokens(request) == (4 + 2 + 4) + (1 + 4) + 3
    # fullwidth forms count as wide; the empty text still costs its 4
    assert estimate_tokens(ChatRequest(messages=(Message("user", "ＡＢ"), Message("user", "")))) == 6 + 4


# -- OpenAI backend on the wire -------------------------------------------------------------


@dataclass
class Stub:
    url: str = ""
    seen: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    replies: list[tuple[int, bytes, dict[str, str]]] = field(default_factory=list)
    peers: set[Any] = field(default_factory=set)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((dict(request.headers), await request.json()))
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        status, body, headers = self.replies.pop(0)
        return web.Response(body=body, status=status, headers={"Content-Type": "application/json", **headers})


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    s = Stub()
    async with serve_posts(s.handle) as url:
        s.url = f"{url}/v1"
        yield s


def ok_body(**extra: Any) -> bytes:
    body: dict[str, Any] = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}
        ]
    }
    body.update(extra)
    return json.dumps(body).encode()


async def test_openai_body_headers_and_one_pool_per_loop(stub: Stub) -> None:
    b = OpenAIBackend(
        "vllm-model",
        base_url=stub.url,
        api_key=KEY,
        extra_body={"top_k": 5, "temperature": 0.7},  # extra_body wins, as in the SDK
        timeout_s=30,
    )
    stub.replies += [
        (200, ok_body(model="served", usage={"prompt_tokens": 11, "completion_tokens": 2}), {})
    ] * 3
    request = ChatRequest(messages=MESSAGES, seed=3, max_tokens=9, answer_prefix='{"verdict": "')
    completions = [await b.complete(request) for _ in range(3)]
    await b.aclose()
    headers, body = stub.seen[0]
    expected = b.build_request(request)
    extra = expected.pop("extra_body")
    assert body == {**expected, **extra}
    assert body == b.build_body(request)
    assert body["temperature"] == 0.7 and body["top_k"] == 5
    assert (body["continue_final_message"], body["add_generation_prompt"]) == (True, False)
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert headers["User-Agent"].startswith("AsyncOpenAI/Python")
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Stainless-Read-Timeout"] == "30"
    c = completions[0]
    assert (c.text, c.model, c.finish_reason) == ("fine", "served", "stop")
    assert (c.usage.prompt_tokens, c.usage.completion_tokens) == (11, 2)
    assert len(stub.peers) == 1  # three sequential calls, one kept-alive connection


@pytest.mark.parametrize("timeout_s", [None, 12.5])
async def test_openai_request_is_what_build_request_makes(timeout_s: float | None) -> None:
    import openai

    from judge.backends._openai import _Wire

    http = openai.DefaultAsyncHttpxClient()
    kwargs: dict[str, Any] = {"api_key": KEY, "base_url": "http://127.0.0.1:9/v1", "max_retries": 0}
    if timeout_s is not None:
        kwargs["timeout"] = timeout_s
    client = openai.AsyncOpenAI(**kwargs, http_client=http)
    wire = _Wire(client, http)
    sdk_headers = {**client.default_headers, **client.auth_headers}
    headers = {k: v for k, v in sdk_headers.items() if isinstance(v, str)}
    headers["X-Stainless-Retry-Count"] = "0"
    headers["X-Stainless-Read-Timeout"] = "12.5" if timeout_s else "600"
    body = '{"a":"中文"}'.encode()
    for with_cookie in (False, True):
        if with_cookie:
            http.cookies.set("session", "s1")  # a cookie a server set is sent back
        mine = wire.request(body)
        url = "http://127.0.0.1:9/v1/chat/completions"
        ref = http.build_request("POST", url, content=body, headers=headers, timeout=client.timeout)
        assert (mine.method, mine.url, mine.content, mine.extensions) == (
            ref.method,
            ref.url,
            ref.content,
            ref.extensions,
        )
        assert mine.headers.raw == ref.headers.raw
        assert ("cookie" in mine.headers) is with_cookie
    await client.close()


async def test_openai_reply_without_usage_model_or_content(stub: Stub) -> None:
    stub.replies.append(
        (200, json.dumps({"choices": [{"message": {"role": "assistant", "content": None}}]}).encode(), {})
    )
    b = OpenAIBackend("m", base_url=stub.url, api_key=KEY)
    c = await b.complete(ChatRequest(messages=MESSAGES))
    await b.aclose()
    assert (c.text, c.model, c.usage, c.finish_reason) == ("", "m", Usage(), None)


@pytest.mark.parametrize(
    ("status", "body", "error", "needle"),
    [
        (200, b"<html>gateway</html>", TransientError, "not JSON"),
        (200, b'{"choices": []}', TransientError, "no choices"),
        (200, b'{"id": "x"}', TransientError, "no choices"),
        (503, b"upstream down", TransientError, "HTTP 503: Error code: 503 - upstream down"),
        (500, b"", TransientError, "HTTP 500: Error code: 500"),
        (
            400,
            b'{"error": {"message": "bad schema", "code": "invalid"}}',
            PermanentError,
            "bad schema (invalid)",
        ),
        (401, b'{"error": {"message": "wrong key ' + KEY.encode() + b'"}}', PermanentError, "HTTP 401"),
        (429, b'{"error": {"message": "slow"}}', RateLimitError, "HTTP 429: slow"),
    ],
)
async def test_openai_replies_and_errors_are_classified(
    stub: Stub, status: int, body: bytes, error: type[Exception], needle: str
) -> None:
    stub.replies.append((status, body, {"Retry-After": "4"} if status == 429 else {}))
    b = OpenAIBackend("m", base_url=stub.url, api_key=KEY)
    with pytest.raises(error) as info:
        await b.complete(ChatRequest(messages=MESSAGES))
    await b.aclose()
    assert type(info.value) is error
    assert needle in str(info.value)
    assert KEY not in str(info.value)
    if isinstance(info.value, RateLimitError):
        assert info.value.retry_after == 4.0


async def test_openai_probability_reply_without_top_logprobs_uses_the_token(stub: Stub) -> None:
    logprobs = {"content": [{"token": "yes", "logprob": math.log(0.8), "top_logprobs": []}]}
    stub.replies.append(
        (200, json.dumps({"choices": [{"message": {"content": "yes"}, "logprobs": logprobs}]}).encode(), {})
    )
    b = OpenAIBackend("m", base_url=stub.url, api_key=KEY)
    c = await b.complete(ChatRequest(messages=MESSAGES, answer_prefix="A: ", candidates=("yes", "no")))
    await b.aclose()
    assert c.token_probs == pytest.approx({"yes": 0.8, "no": 0.0})


async def test_openai_new_loop_gets_new_client(stub: Stub) -> None:
    stub.replies += [(200, ok_body(), {})] * 2
    b = OpenAIBackend("m", base_url=stub.url, api_key=KEY)
    assert (await b.complete(ChatRequest(messages=MESSAGES))).text == "fine"
    first = b._get_client()

    box: dict[str, Any] = {}

    def other_loop() -> None:
        async def go() -> None:
            box["text"] = (await b.complete(ChatRequest(messages=MESSAGES))).text
            box["client"] = b._get_client()
            await b.aclose()

        asyncio.run(go())

    await asyncio.to_thread(other_loop)
    assert box["text"] == "fine"
    assert box["client"] is not first


# -- resilient wrapper ----------------------------------------------------------------------


class Sleeps:
    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)


async def test_first_attempt_failure_then_retries_as_before() -> None:
    t = Sleeps()
    inner = ScriptedBackend([RateLimitError("429", retry_after=1.25), TransientError("5xx"), "ok"])
    rb = ResilientBackend(inner, sleep=t.sleep, backoff_base_s=0.5, concurrency=8)
    c = await rb.complete(ChatRequest(messages=(Message("user", "q"),)))
    assert (c.text, c.attempts, inner.calls) == ("ok", 3, 3)
    # retry 1 waits exactly Retry-After; retry 2 waits 0.5 * 2 + U(0, 0.5)
    assert t.sleeps[0] == 1.25
    assert 1.0 <= t.sleeps[1] <= 1.5
    s = rb.stats
    assert (s.requests, s.calls, s.successes, s.retries, s.rate_limited, s.failures) == (1, 3, 1, 2, 1, 0)
    assert rb.limiter.limit == 4  # halved once by the 429


async def test_first_attempt_permanent_and_transient_failures_are_counted_once() -> None:
    rb = ResilientBackend(ScriptedBackend([PermanentError("bad key")]), max_retries=3)
    with pytest.raises(PermanentError):
        await rb.complete(ChatRequest(messages=(Message("user", "q"),)))
    t = Sleeps()
    rb2 = ResilientBackend(ScriptedBackend([TransientError("x")] * 3), max_retries=2, sleep=t.sleep)
    with pytest.raises(TransientError):
        await rb2.complete(ChatRequest(messages=(Message("user", "q"),)))
    assert (rb.stats.calls, rb.stats.retries, rb.stats.failures) == (1, 0, 1)
    assert (rb2.stats.calls, rb2.stats.retries, rb2.stats.failures) == (3, 2, 1)
    assert len(t.sleeps) == 2


async def test_replaced_price_table_is_used() -> None:
    inner = ScriptedBackend(["a", "b"], model="m-1", usage=Usage(1_000_000, 0))
    rb = ResilientBackend(
        inner,
        prices=PriceTable.from_mapping(
            {"models": {"m": {"input_per_1m": 2.0, "output_per_1m": 0}}}, extend_default=False
        ),
    )
    first = await rb.complete(ChatRequest(messages=(Message("user", "q"),)))
    rb.prices = PriceTable.from_mapping(
        {"models": {"m-1": {"input_per_1m": 5.0, "output_per_1m": 0}}}, extend_default=False
    )
    second = await rb.complete(ChatRequest(messages=(Message("user", "q"),)))
    assert (first.cost, second.cost) == (2.0, 5.0)


# -- embedded model: a timed-out call keeps the model until its thread ends -----------------


class BlockingLocal(LocalBackend):
    """LocalBackend whose llama.cpp work is a thread that waits for the test's go-ahead."""

    def __init__(self) -> None:
        # No machine-wide turns: the test is about this backend's own call lock, and an
        # embedded judge running elsewhere on the machine (another process holding
        # $JUDGE_HOME/embedded-model.lock) must not keep its thread from starting.
        super().__init__(machine_turns=False)
        self.release = threading.Event()
        self.started = 0
        self.running = 0
        self.most_running = 0
        self._count = threading.Lock()

    def _complete_blocking(self, request: ChatRequest) -> Completion:
        with self._count:
            self.started += 1
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            self.release.wait(timeout=30)
            return Completion(text=request.messages[-1].content)
        finally:
            with self._count:
                self.running -= 1


async def test_timed_out_local_call_holds_the_model_until_its_thread_ends() -> None:
    local = BlockingLocal()
    rb = ResilientBackend(local, timeout_s=0.05, max_retries=0)
    with pytest.raises(TransientError, match="timeout_s"):
        await rb.complete(ChatRequest(messages=(Message("user", "first"),)))
    assert (local.started, local.running) == (1, 1)  # abandoned, still running
    # While it runs, the next call waits (and here times out) without starting a thread.
    with pytest.raises(TransientError, match="timeout_s"):
        await rb.complete(ChatRequest(messages=(Message("user", "second"),)))
    assert local.started == 1
    # Once the first thread ends, the next call runs.
    waiting = asyncio.ensure_future(local.complete(ChatRequest(messages=(Message("user", "third"),))))
    await asyncio.sleep(0.01)
    assert local.started == 1 and not waiting.done()
    local.release.set()
    third = await asyncio.wait_for(waiting, timeout=30)
    assert third.text == "third"
    assert (local.started, local.most_running) == (2, 1)


def test_cache_key_with_examples_equals_the_whole_payload_hash() -> None:
    # --examples: the examples' hash joins the payload as "examples"; none: the key of old
    from judge.judging import Example, examples_hash

    backend = ScriptedBackend(["x"], name="fake:a", model="b", params={"model": 'x,"model":'})
    config = JudgeConfig(language="en")
    examples = [Example("q1", "d1", "q", "a labelled passage", 1)]
    key = verdict_cache_key(backend, config, "q", "p", examples=examples)
    bound = bind_language(config, "q", ["p"])
    template = template_for(bound)
    payload = {
        "v": 1,
        "backend": backend.name,
        "model": backend.model,
        "backend_params": backend.params(),
        "config": bound.cache_params(),
        "examples": examples_hash(examples),
        "template_id": template.id,
        "template_hash": template.hash,
        "query": "q",
        "passage": "p",
    }
    blob = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    assert key == hashlib.sha256(blob.encode("utf-8")).hexdigest()
    assert verdict_cache_key(backend, config, "q", "p", examples=()) == reference_key(
        backend, config, "q", "p"
    )
