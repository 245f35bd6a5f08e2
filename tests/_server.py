"""Helpers for the ``judge serve`` tests: an in-process app on fake backends, datasets, and a
real ``python -m judge serve`` subprocess (loopback only, bounded waits)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from judge.backends import ChatRequest, RuleBackend, ensure_resilient
from judge.server import KeyRing, Runtime, ServerConfig, create_app
from judge.store import SQLiteVerdictStore

ROOT = Path(__file__).resolve().parents[1]
MARKER = "[相关]"
BAD = "[坏]"

DEFAULTS: dict[str, Any] = {
    "mode": "binary",
    "language": "zh",
    "template": None,
    "probability": None,
    "p_yes_threshold": None,
    "explain": None,
    "k": [5, 10],
    "listwise": False,
    "listwise_template": None,
    "max_passage_chars": 8000,
    "map": {},
}


def fake_backend() -> Any:
    """The deterministic judge of these tests: yes iff the passage carries ``[相关]``
    (importable as ``_server:fake_backend`` for ``judge serve --backend-factory``)."""
    return RuleBackend.keyword(MARKER)


class Gate:
    """A fake judge whose calls wait until :meth:`open` (jobs stay running meanwhile), and
    whose replies to ``[坏]`` passages are garbage until :meth:`fix` (they end unjudged)."""

    def __init__(self, opened: bool = True) -> None:
        self.opened = threading.Event()
        self.fixed = threading.Event()
        if opened:
            self.opened.set()
        keyword = RuleBackend.keyword(MARKER)

        def rule(request: ChatRequest) -> Any:
            text = "\n".join(m.content for m in request.messages if m.role == "user")
            if BAD in text and not self.fixed.is_set():
                return "this is not a verdict"
            return keyword.rule(request)

        async def sleep(_: float) -> None:
            deadline = time.monotonic() + 30
            while not self.opened.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)

        self.backend = RuleBackend(rule, name="fake:gate", latency_s=0.001, sleep=sleep)

    def open(self) -> None:
        self.opened.set()

    def fix(self) -> None:
        self.fixed.set()


def make_config(
    tmp: Path,
    *,
    backend: Any = None,
    keys: Sequence[str] = (),
    queue_size: int = 100,
    max_body_bytes: int = 4 * 1024 * 1024,
    max_passages: int = 50,
) -> ServerConfig:
    inner = backend if backend is not None else fake_backend()
    runtime = Runtime(
        backend=ensure_resilient(inner, concurrency=4, max_retries=0),
        store=SQLiteVerdictStore(tmp / "cache.sqlite"),
        jobs_dir=tmp / "jobs",
        concurrency=4,
        queue_size=queue_size,
    )
    return ServerConfig(
        db_path=tmp / "server.sqlite",
        jobs_dir=tmp / "jobs",
        runtime=runtime,
        defaults=dict(DEFAULTS),
        keys=KeyRing(keys),
        max_body_bytes=max_body_bytes,
        max_passages=max_passages,
        sse_interval_s=0.05,
    )


def app_for(tmp: Path, **kwargs: Any) -> Any:
    return create_app(make_config(tmp, **kwargs))


def records(n: int, n_passages: int = 4, *, bad: bool = False, prefix: str = "q") -> list[dict[str, Any]]:
    """``n`` queries; passage j is relevant iff j is even; ground truth: d0 and d1 relevant
    (so d1 disagrees with the judge); ``bad`` puts the ``[坏]`` marker on passage 3."""
    out = []
    for i in range(n):
        ctx = []
        for j in range(n_passages):
            text = (MARKER + " " if j % 2 == 0 else "") + f"查询{i}的段落{j}"
            if bad and j == 3:
                text += " " + BAD
            ctx.append({"id": f"d{j}", "text": text})
        out.append(
            {
                "id": f"{prefix}{i:03d}",
                "query": f"问题 {i}",
                "retrieval_context": ctx,
                "expected_ids": ["d0", "d1"],
            }
        )
    return out


def ndjson(recs: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs).encode("utf-8")


def wait_job(
    client: Any,
    job_id: str,
    statuses: Sequence[str] = ("done", "failed", "cancelled"),
    timeout: float = 30.0,
    headers: Any = None,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        if job["status"] in statuses:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still {job['status']} after {timeout} s")
        time.sleep(0.02)


def serve_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "JUDGE_HOME": str(tmp / "home"),
            "OPENAI_API_KEY": "sk-test-not-a-real-key",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")]),
        }
    )
    env.pop("DASHSCOPE_API_KEY", None)
    env.pop("JUDGE_API_KEYS", None)
    env.update(extra)
    return env


_LISTENING = re.compile(r"listening on (http://\S+)")


@contextmanager
def serve_process(
    args: Sequence[str], env: dict[str, str], timeout: float = 60.0
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m judge serve --port 0 ARGS``; yields the process and its base URL (its
    stderr goes to a temporary file, shown if it fails to start)."""
    err_file = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115  # closed in finally
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "judge",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--log-level",
            "warning",
            *args,
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=err_file,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = None
        deadline = time.monotonic() + timeout
        while url is None:
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                err_file.seek(0)
                raise AssertionError(
                    f"judge serve ended before listening (rc={proc.returncode}): {err_file.read()}"
                )
            m = _LISTENING.search(line)
            if m:
                url = m.group(1)
            if time.monotonic() > deadline:
                raise AssertionError("judge serve did not start in time")
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        err_file.close()


def slow_fake_backend() -> Any:
    """:func:`fake_backend` taking 20 ms a call, so a job's progress can be watched."""
    return RuleBackend.keyword(MARKER, latency_s=0.02)


def file_gate_backend() -> Any:
    """:func:`fake_backend` whose calls wait (up to 120 s) until the file named by
    ``JUDGE_TEST_GATE`` exists: a job of a ``judge serve`` process stays running until then."""
    gate = Path(os.environ["JUDGE_TEST_GATE"])
    keyword = RuleBackend.keyword(MARKER)

    async def sleep(_: float) -> None:
        deadline = time.monotonic() + 120
        while not gate.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    return RuleBackend(keyword.rule, name="fake:file-gate", latency_s=0.001, sleep=sleep)


def hanging_backend() -> Any:
    """:func:`fake_backend` whose calls take an hour: a job stays running until stopped."""
    return RuleBackend.keyword(MARKER, latency_s=3600.0)
