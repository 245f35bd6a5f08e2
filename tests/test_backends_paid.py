"""Real API calls: skipped unless the key is set. Run with ``pytest -m paid``."""

from __future__ import annotations

import json
import os

import pytest

from judge.backends import ChatRequest, Message, OpenAIBackend, QwenBackend, ResilientBackend

pytestmark = pytest.mark.paid

needs_dashscope = pytest.mark.skipif(
    not os.environ.get("DASHSCOPE_API_KEY"), reason="DASHSCOPE_API_KEY not set"
)
needs_openai = pytest.mark.skipif(
    not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")),
    reason="OPENAI_API_KEY / OPENAI_BASE_URL not set",
)

MESSAGES = (
    Message("system", '你是检索相关性评审员。只输出 JSON：{"verdict": "yes" 或 "no", "reason": 中文理由}。'),
    Message("user", "查询：小狗贫血的表现\n段落：贫血的小狗常见牙龈和眼睑苍白、精神萎靡、食欲下降。"),
)
SCHEMA = {
    "title": "LLMVerdict",
    "type": "object",
    "properties": {"verdict": {"enum": ["yes", "no"]}, "reason": {"type": "string"}},
    "required": ["verdict", "reason"],
}


@needs_dashscope
async def test_qwen_plus_json_verdict_and_usage() -> None:
    backend = ResilientBackend(QwenBackend("qwen-plus"), max_retries=2)
    c = await backend.complete(ChatRequest(messages=MESSAGES, seed=1, json_schema=SCHEMA))
    await backend.aclose()
    assert json.loads(c.text)["verdict"] == "yes"
    assert c.usage.prompt_tokens > 0 and c.usage.completion_tokens > 0
    assert c.cost is not None and c.cost > 0


@needs_dashscope
async def test_qwen_plus_probability_mode() -> None:
    backend = QwenBackend("qwen-plus")
    c = await backend.complete(
        ChatRequest(messages=MESSAGES, answer_prefix='{"verdict": "', candidates=("yes", "no"))
    )
    await backend.aclose()
    assert c.token_probs is not None
    assert c.token_probs["yes"] > c.token_probs["no"]


@needs_openai
async def test_openai_compatible_json_verdict() -> None:
    backend = OpenAIBackend(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    c = await backend.complete(ChatRequest(messages=MESSAGES, seed=1, json_schema=SCHEMA))
    await backend.aclose()
    assert json.loads(c.text)["verdict"] == "yes"
