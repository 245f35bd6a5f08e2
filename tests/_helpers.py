"""Helpers shared by several test files (import as ``from _helpers import ...``)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType

import pytest
from aiohttp import web

from judge.backends import ChatRequest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("JUDGE_SHARED_DATA") or ROOT.parent / "shared" / "data")
"""The third-party evaluation data (ROOT/../shared/data, or $JUDGE_SHARED_DATA)."""

_PASSAGE = re.compile(r"(?:^|\n)<passage>\n(.*?)\n</passage>", re.S)


def passage_of(request: ChatRequest) -> str:
    """The passage of the first user message of a judging prompt."""
    first_user = next(m.content for m in request.messages if m.role == "user")
    m = _PASSAGE.search(first_user)
    if m is None:
        raise AssertionError("no passage in the prompt")
    return m.group(1)


def isolate_cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CLI run in a test: its own JUDGE_HOME (cache) under ``tmp_path``, a dummy OpenAI
    key for the simulated server, no DashScope key."""
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)


def load_script(name: str) -> ModuleType:
    """``scripts/NAME.py`` as the module ``NAME`` (registered in ``sys.modules`` first, so
    its dataclasses and pickles resolve)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"scripts/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_sim() -> ModuleType:
    """``scripts/sim_llm_server.py`` as the module ``sim_llm_server``."""
    return load_script("sim_llm_server")


@asynccontextmanager
async def serve_posts(
    handle: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    """An aiohttp server on a free local port answering every POST with ``handle``;
    yields its root URL (``http://127.0.0.1:PORT``)."""
    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def write_rel_dataset(path: Path, n_queries: int, n_passages: int) -> list[str]:
    """A dataset of ``n_queries`` queries (``q000``...) with ``n_passages`` passages each, whose
    text carries a ``<rel=G>`` grade (G = (7 i + j) mod 4) that the simulated LLM answers from;
    returns the query ids in input order."""
    ids = []
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n_queries):
            qid = f"q{i:03d}"
            ids.append(qid)
            ctx = [
                {"id": f"{qid}-d{j}", "text": f"查询 {i} 的段落 {j} <rel={(i * 7 + j) % 4}>"}
                for j in range(n_passages)
            ]
            row = {"id": qid, "query": f"问题 {i}", "retrieval_context": ctx}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return ids
