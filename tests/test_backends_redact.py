"""API keys never appear in exception messages, log records, reprs or params()."""

from __future__ import annotations

import asyncio
import logging

import pytest

from judge.backends import (
    ChatRequest,
    Message,
    OpenAIBackend,
    QwenBackend,
    ResilientBackend,
    ScriptedBackend,
    TransientError,
    redact,
    register_secret,
)

KEY = "sk-0123456789abcdefSECRET"


def test_redact_env_keys_registered_keys_and_patterns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DASHSCOPE_API_KEY", "ds-very-secret-value")
    assert redact("key is ds-very-secret-value!") == "key is ***!"
    register_secret("plain-registered-secret")
    assert "plain-registered-secret" not in redact("x plain-registered-secret y")
    assert redact("Incorrect API key provided: sk-abcdef123456") == "Incorrect API key provided: sk-***"
    assert redact("Authorization: Bearer abcdefghij") == "Authorization: Bearer ***"
    assert redact("header bearer abcdefghij end") == "header bearer *** end"
    assert redact('{"api_key": "zzzzzzzzzz"}') == '{"api_key": "***"}'
    # short placeholders are not secrets and ordinary text is untouched
    register_secret("EMPTY")
    assert redact("EMPTY skies, no key") == "EMPTY skies, no key"
    assert redact("小狗贫血的表现") == "小狗贫血的表现"


def test_key_not_in_repr_or_params(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    q = QwenBackend("qwen-plus", api_key=KEY)
    o = OpenAIBackend("m", api_key=KEY, base_url="http://127.0.0.1:9/v1")
    for backend in (q, o, ResilientBackend(q), ResilientBackend(o)):
        assert KEY not in repr(backend)
        assert KEY not in str(backend.params())
        assert KEY not in str(vars(backend).get("name", ""))


def test_key_not_in_exception_or_logs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    register_secret(KEY)
    inner = ScriptedBackend([TransientError(f"upstream said: bad key {KEY}")] * 3)

    async def no_sleep(_: float) -> None:
        return None

    rb = ResilientBackend(inner, max_retries=2, sleep=no_sleep)
    request = ChatRequest(messages=(Message("user", "q"),))
    with caplog.at_level(logging.DEBUG, logger="judge.backends"), pytest.raises(TransientError) as info:
        asyncio.run(rb.complete(request))
    assert KEY not in str(info.value)
    assert "***" in str(info.value)
    records = [r for r in caplog.records if r.name == "judge.backends"]
    assert len(records) == 3  # two retries, one final failure
    for record in records:
        assert KEY not in record.getMessage()


def test_logger_filter_redacts_any_record(caplog: pytest.LogCaptureFixture) -> None:
    register_secret(KEY)
    logger = logging.getLogger("judge.backends")
    with caplog.at_level(logging.INFO, logger="judge.backends"):
        logger.info("calling with %s", KEY)
        try:
            raise RuntimeError(f"boom {KEY}")
        except RuntimeError:
            logger.exception("failed")
    text = "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    assert KEY not in text
    assert "calling with ***" in text
