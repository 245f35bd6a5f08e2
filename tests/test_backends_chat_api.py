"""What the two chat-API backends share (ChatAPIBackend): settings checked alike, the same
output-mode params and request keywords, token_probs, and closing on the owning loop."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from judge.backends import ChatRequest, ConfigurationError, Message, OpenAIBackend, QwenBackend
from judge.backends._common import close_on_loop

KEY = "sk-test-not-real"
SCHEMA = {"title": "Verdict judge", "type": "object"}


def _openai(**kw: Any) -> OpenAIBackend:
    return OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key=KEY, **kw)


def _qwen(**kw: Any) -> QwenBackend:
    return QwenBackend("m", api_key=KEY, base_url="http://127.0.0.1:9/api/v1", **kw)


@pytest.mark.parametrize("make", [_openai, _qwen])
def test_settings_are_checked_alike(make: Any) -> None:
    with pytest.raises(ConfigurationError, match="structured must be one of"):
        make(structured="yaml")
    with pytest.raises(ConfigurationError, match="top_logprobs must be >= 1"):
        make(top_logprobs=0)


def test_a_missing_model_name_names_the_backend() -> None:
    with pytest.raises(ConfigurationError, match=r"openai backend needs a model name, e\.g\. openai:"):
        OpenAIBackend("", api_key=KEY)
    with pytest.raises(ConfigurationError, match=r"qwen backend needs a model name, e\.g\. qwen:"):
        QwenBackend("", api_key=KEY)


def test_both_report_the_output_mode_in_their_params_alike() -> None:
    o = _openai(structured="json_schema", strict_schema=True, top_logprobs=7)
    q = _qwen(structured="json_schema", strict_schema=True, top_logprobs=7)
    assert o.params() == {
        "structured": "json_schema",
        "prefill": o.prefill,
        "top_logprobs": 7,
        "strict_schema": True,
    }
    assert q.params() == {"structured": "json_schema", "top_logprobs": 7, "strict_schema": True}
    assert "strict_schema" not in _qwen(structured="json_object").params()
    assert (o.name, q.name, o.supports_probabilities, q.supports_probabilities) == (
        "openai:m",
        "qwen:m",
        True,
        True,
    )


def test_both_build_the_same_keywords_for_the_same_request() -> None:
    request = ChatRequest(
        messages=(Message(role="user", content="JSON please"),), temperature=0.2, seed=3, json_schema=SCHEMA
    )
    body = _openai(structured="json_object").build_request(request)
    params = _qwen(structured="json_object").build_parameters(request)
    assert params.pop("result_format") == "message"
    assert (
        body
        == params
        == {
            "model": "m",
            "messages": [{"role": "user", "content": "JSON please"}],
            "temperature": 0.2,
            "seed": 3,
            "response_format": {"type": "json_object"},
        }
    )
    probe = ChatRequest(messages=(Message(role="user", content="yes or no"),), candidates=("yes", "no"))
    for kwargs in (
        _openai(top_logprobs=4).build_request(probe),
        _qwen(top_logprobs=4).build_parameters(probe),
    ):
        assert (kwargs["logprobs"], kwargs["top_logprobs"], kwargs["max_tokens"]) == (True, 4, 1)


def test_token_probs_only_in_probability_mode() -> None:
    b = _qwen()
    choice = {
        "logprobs": {
            "content": [
                {
                    "token": "yes",
                    "logprob": math.log(0.6),
                    "top_logprobs": [
                        {"token": "yes", "logprob": math.log(0.6)},
                        {"token": " No", "logprob": math.log(0.3)},
                    ],
                }
            ]
        }
    }
    plain = ChatRequest(messages=(Message(role="user", content="x"),))
    assert b.token_probs(choice, plain) is None
    probs = b.token_probs(choice, ChatRequest(messages=plain.messages, candidates=("yes", "no")))
    assert probs is not None
    assert probs["yes"] == pytest.approx(0.6) and probs["no"] == pytest.approx(0.3)


async def test_close_on_loop_closes_only_on_the_owning_loop_and_swallows_errors() -> None:
    closed: list[str] = []

    async def close() -> None:
        closed.append("closed")

    async def broken() -> None:
        raise OSError("already gone")

    await close_on_loop(asyncio.get_running_loop(), close)
    other = asyncio.new_event_loop()
    try:
        await close_on_loop(other, close)  # another loop's pool: left alone
    finally:
        other.close()
    await close_on_loop(None, close)
    await close_on_loop(asyncio.get_running_loop(), broken)
    assert closed == ["closed"]
