"""ScriptedBackend and RuleBackend: the deterministic fakes every other test relies on."""

from __future__ import annotations

import asyncio
import json

import pytest

from judge.backends import (
    Backend,
    ChatRequest,
    Completion,
    Message,
    PermanentError,
    RateLimitError,
    RuleBackend,
    ScriptedBackend,
    ScriptExhaustedError,
    TransientError,
    UnsupportedError,
    Usage,
)


def req(text: str = "q", **kw: object) -> ChatRequest:
    return ChatRequest(messages=(Message("user", text),), **kw)  # type: ignore[arg-type]


async def test_script_steps_in_order_and_recorded() -> None:
    b = ScriptedBackend(["a", "bb"])
    assert isinstance(b, Backend)
    c1 = await b.complete(req("hello"))
    c2 = await b.complete(req("你好"))
    assert (c1.text, c2.text) == ("a", "bb")
    # one token per character: prompt = message chars, completion = reply chars
    assert c1.usage == Usage(prompt_tokens=5, completion_tokens=1)
    assert c2.usage == Usage(prompt_tokens=2, completion_tokens=2)
    assert [r.messages[0].content for r in b.requests] == ["hello", "你好"]
    assert b.calls == 2
    assert b.name == "fake:scripted"
    assert c1.model == "scripted" and c1.finish_reason == "stop"


async def test_exhausted_script_raises_and_cycle_wraps() -> None:
    b = ScriptedBackend(["only"])
    await b.complete(req())
    with pytest.raises(ScriptExhaustedError, match="1 step"):
        await b.complete(req())
    assert isinstance(ScriptExhaustedError("x"), PermanentError)
    cyc = ScriptedBackend(["x", "y"], cycle=True)
    texts = [(await cyc.complete(req())).text for _ in range(5)]
    assert texts == ["x", "y", "x", "y", "x"]


async def test_empty_script() -> None:
    b = ScriptedBackend([])
    with pytest.raises(ScriptExhaustedError):
        await b.complete(req())
    with pytest.raises(ValueError):
        ScriptedBackend([], cycle=True)


async def test_exceptions_instances_and_classes() -> None:
    b = ScriptedBackend(
        [TransientError("boom"), RateLimitError("slow", retry_after=2.0), PermanentError, "ok"]
    )
    with pytest.raises(TransientError, match="boom"):
        await b.complete(req())
    with pytest.raises(RateLimitError) as info:
        await b.complete(req())
    assert info.value.retry_after == 2.0
    with pytest.raises(PermanentError, match="scripted PermanentError"):
        await b.complete(req())
    assert (await b.complete(req())).text == "ok"
    assert b.calls == 4  # failed calls are recorded too


async def test_completion_step_returned_as_is() -> None:
    fixed = Completion(text="t", usage=Usage(10, 3), model="m", finish_reason="length")
    b = ScriptedBackend([fixed])
    assert await b.complete(req()) is fixed


async def test_callable_script_gets_request_and_index() -> None:
    b = ScriptedBackend(lambda r, i: f"{i}:{r.messages[-1].content}")
    out = [(await b.complete(req(s))).text for s in ("a", "b", "c")]
    assert out == ["0:a", "1:b", "2:c"]


async def test_probability_steps() -> None:
    b = ScriptedBackend([{"yes": 0.7, "no": 0.2}, "no", {"0": 0.1, "3": 0.6}])
    c = await b.complete(req(candidates=("yes", "no"), answer_prefix='{"verdict": "'))
    assert c.token_probs == {"yes": 0.7, "no": 0.2}
    assert c.text == "yes"
    # a text reply in probability mode gives one-hot probabilities
    c = await b.complete(req(candidates=("yes", "no")))
    assert c.token_probs == {"yes": 0.0, "no": 1.0}
    # missing candidates get 0.0
    c = await b.complete(req(candidates=("0", "1", "2", "3")))
    assert c.token_probs == {"0": 0.1, "1": 0.0, "2": 0.0, "3": 0.6}
    assert c.text == "3"


async def test_fixed_token_probs_and_unsupported() -> None:
    b = ScriptedBackend(["x"], token_probs={"yes": 0.4, "no": 0.5})
    c = await b.complete(req(candidates=("yes", "no")))
    assert c.token_probs == {"yes": 0.4, "no": 0.5}
    nop = ScriptedBackend(["x"], supports_probabilities=False)
    with pytest.raises(UnsupportedError):
        await nop.complete(req(candidates=("yes", "no")))


async def test_latency_uses_injected_sleep_and_order_is_deterministic() -> None:
    slept: list[float] = []

    async def fake_sleep(d: float) -> None:
        slept.append(d)
        await asyncio.sleep(0)

    b = ScriptedBackend(lambda r, i: f"reply{i}", latency_s=lambda r, i: 0.5 * (3 - i), sleep=fake_sleep)
    results = await asyncio.gather(*(b.complete(req(f"p{i}")) for i in range(3)))
    # call index follows call start order, whatever the finishing order
    assert [c.text for c in results] == ["reply0", "reply1", "reply2"]
    assert [r.messages[0].content for r in b.requests] == ["p0", "p1", "p2"]
    assert slept == [1.5, 1.0, 0.5]
    assert results[0].latency_s == 1.5
    assert b.max_in_flight == 3 and b.in_flight == 0


async def test_fixed_usage_and_params_and_close() -> None:
    b = ScriptedBackend(["x"], usage=Usage(100, 7), params={"variant": 2}, model="qwen-plus")
    c = await b.complete(req())
    assert c.usage == Usage(100, 7)
    assert b.params() == {"variant": 2}
    await b.aclose()
    assert b.closed


def test_string_script_rejected() -> None:
    with pytest.raises(TypeError):
        ScriptedBackend("abc")  # type: ignore[arg-type]


# -- RuleBackend --------------------------------------------------------------------------------

BINARY_SCHEMA = {
    "title": "LLMVerdict",
    "type": "object",
    "properties": {"verdict": {"enum": ["yes", "no"]}, "reason": {"type": "string"}},
    "required": ["verdict", "reason"],
}
GRADED_SCHEMA = {
    "title": "LLMGrade",
    "type": "object",
    "properties": {"grade": {"type": "integer"}, "reason": {"type": "string"}},
}


async def test_keyword_rule_binary_consistent_under_concurrency() -> None:
    b = RuleBackend.keyword("【相关】")
    prompts = [f"查询：小狗贫血\n段落{i}：" + ("【相关】贫血" if i % 2 == 0 else "天气") for i in range(12)]
    results = await asyncio.gather(*(b.complete(req(p, json_schema=BINARY_SCHEMA)) for p in prompts))
    verdicts = [json.loads(c.text)["verdict"] for c in results]
    assert verdicts == ["yes", "no"] * 6
    assert json.loads(results[0].text)["reason"] == "段落包含回答查询所需的信息。"
    assert b.name == "fake:keyword"


async def test_keyword_rule_graded_and_probabilities() -> None:
    b = RuleBackend.keyword("RELEVANT", grades={"[G1]": 1, "[G2]": 2})
    graded = [
        json.loads((await b.complete(req(t, json_schema=GRADED_SCHEMA))).text)["grade"]
        for t in ("RELEVANT", "[G2] x", "[G1] y", "nothing", "[G1] RELEVANT")
    ]
    # a yes-marker alone means 3; grade markers win (highest matching); otherwise 0
    assert graded == [3, 2, 1, 0, 1]
    p = await b.complete(req("RELEVANT", candidates=("yes", "no")))
    assert p.token_probs == {"yes": 0.9, "no": pytest.approx(0.1)}
    p = await b.complete(req("[G2]", candidates=("0", "1", "2", "3")))
    assert p.token_probs == pytest.approx({"0": 0.1 / 3, "1": 0.1 / 3, "2": 0.9, "3": 0.1 / 3})
    assert p.text == "2"


async def test_keyword_rule_mode_detection_and_prefix() -> None:
    b = RuleBackend.keyword("KEY")
    # graded because the prompt asks for a "grade" key
    c = await b.complete(req('输出 JSON {"grade": 0-3} KEY'))
    assert json.loads(c.text) == {"grade": 3, "reason": "段落包含回答查询所需的信息。"}
    # the assistant prefix is not repeated in the reply
    c = await b.complete(req("KEY", answer_prefix='{"verdict": "'))
    assert c.text == 'yes", "reason": "段落包含回答查询所需的信息。"}'
    forced = RuleBackend.keyword("KEY", mode="binary")
    c = await forced.complete(req('{"grade"} nope'))
    assert json.loads(c.text)["verdict"] == "no"


async def test_rule_backend_with_custom_rule_and_text_of() -> None:
    b = RuleBackend(lambda r: "yes" if "x" in r.messages[-1].content else "no")
    assert [(await b.complete(req(t))).text for t in ("x", "y")] == ["yes", "no"]
    only_last_line = RuleBackend.keyword("M", text_of=lambda r: r.messages[-1].content.splitlines()[-1])
    c = await only_last_line.complete(req("query M\npassage"))
    assert json.loads(c.text)["verdict"] == "no"
    with pytest.raises(ValueError):
        RuleBackend.keyword("M", p_match=1.5)
