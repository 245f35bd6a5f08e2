"""``judge serve`` as a real process: the bind check, keys from a file, and kill -9 in the
middle of a job against the simulated LLM server (the job resumes by itself on restart)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _helpers import load_sim
from _server import ROOT, ndjson, serve_env, serve_process

CONCURRENCY = 6
sim_mod = load_sim()


def call(
    url: str, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        status = exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def test_refuses_to_listen_beyond_loopback_without_keys(tmp_path: Path) -> None:
    env = serve_env(tmp_path)
    for host in ("0.0.0.0", "192.0.2.10", "::"):
        done = subprocess.run(
            [sys.executable, "-m", "judge", "serve", "--host", host, "--port", "0"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert "without API keys" in done.stderr and "JUDGE_API_KEYS" in done.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "judge", "serve", "--api-keys-file", str(tmp_path / "none.txt")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "--api-keys-file" in missing.stderr


def test_keys_from_a_file_and_never_in_the_logs(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# service keys\nsecret-key-one\n\nsecret-key-two  # ci\n", encoding="utf-8")
    env = serve_env(tmp_path)
    args = [
        "--api-keys-file",
        str(keys),
        "--backend-factory",
        "_server:fake_backend",
        "--db",
        str(tmp_path / "s.sqlite"),
        "--log-level",
        "info",
    ]
    with serve_process(args, env) as (proc, url):
        assert call(url + "/healthz") == (200, {"status": "ok"})
        assert call(url + "/v1/info")[0] == 401
        assert call(url + "/v1/info", headers={"Authorization": "Bearer secret-key-one"})[0] == 200
        status, _job = call(
            url + "/v1/jobs",
            "POST",
            b'{"id": "a", "query": "q", "retrieval_context": ["[\xe7\x9b\xb8\xe5\x85\xb3] x"]}\n',
            {"Authorization": "Bearer secret-key-two", "Content-Type": "application/x-ndjson"},
        )
        assert status == 202
        assert call(url + "/v1/jobs", headers={"Authorization": "Bearer secret-key-three"})[0] == 401
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    for path in [*tmp_path.rglob("*")]:
        if path.is_file() and path.name != "keys.txt":
            data = path.read_bytes()
            assert b"secret-key" not in data, path


def _dataset(n_queries: int, n_passages: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"q{i:03d}",
            "query": f"问题 {i}",
            "retrieval_context": [
                {"id": f"q{i:03d}-d{j}", "text": f"查询 {i} 的段落 {j} <rel={(i * 7 + j) % 4}>"}
                for j in range(n_passages)
            ],
        }
        for i in range(n_queries)
    ]


def _log_len(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Any]:
    with sim_mod.SimProcess(
        str(tmp_path / "requests.jsonl"), latency_ms=25, jitter_ms=10, capacity=1000
    ) as s:
        yield s


def test_kill_9_mid_job_resumes_on_restart_with_every_query_once(tmp_path: Path, sim: Any) -> None:
    n_queries, n_passages = 40, 5
    env = serve_env(tmp_path)
    args = [
        "--backend",
        "openai:simulated-judge",
        "--base-url",
        sim.base_url,
        "--concurrency",
        str(CONCURRENCY),
        "--db",
        str(tmp_path / "server.sqlite"),
        "--cache",
        str(tmp_path / "cache.sqlite"),
    ]
    log = Path(sim.log_path)
    kill_marks: list[int] = []
    job_id = None
    for point in (15, 90):
        with serve_process(args, env) as (proc, url):
            if job_id is None:
                status, job = call(
                    url + "/v1/jobs",
                    "POST",
                    ndjson(_dataset(n_queries, n_passages)),
                    {"Content-Type": "application/x-ndjson"},
                )
                assert status == 202
                job_id = job["id"]
            deadline = time.monotonic() + 60
            while _log_len(log) < point:  # the job resumed by itself: nobody asked it to
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            time.sleep(0.1)  # let the simulated server log what was on the wire
            kill_marks.append(_log_len(log))
    with serve_process(args, env) as (proc, url):
        deadline = time.monotonic() + 90
        while True:
            status, job = call(f"{url}/v1/jobs/{job_id}")
            if job["status"] in ("done", "failed", "cancelled") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert job["status"] == "done", job
        assert job["attempts"] == 3 and job["queries_done"] == n_queries and job["unjudged"] == 0
        status, text = call(f"{url}/v1/jobs/{job_id}/results?limit=1000")
        records = [json.loads(x) for x in text.splitlines()]
    assert sorted(r["id"] for r in records) == [f"q{i:03d}" for i in range(n_queries)]  # each exactly once
    assert all(r["n_passages"] == n_passages and r["unjudged"] == 0 for r in records)
    entries = sim.log_entries()
    asked = Counter(e["key"] for e in entries if e["outcome"] != "429")
    assert len(asked) == n_queries * n_passages
    first_seen: dict[str, int] = {}
    for pos, e in enumerate(entries):
        first_seen.setdefault(e["key"], pos)
    twice = [k for k, c in asked.items() if c > 1]
    for key in twice:  # asked again only if it was in flight at a kill
        assert asked[key] == 2
        assert any(mark - 2 * CONCURRENCY <= first_seen[key] < mark for mark in kill_marks), (key, kill_marks)
    assert len(twice) <= len(kill_marks) * 2 * CONCURRENCY


def test_kill_9_mid_comparison_resumes_on_restart(tmp_path: Path, sim: Any) -> None:
    """A compare job killed mid-pool resumes by itself on restart and judges every unique
    (query, passage) pair once, repeating at most what was in flight at the kill."""
    n_queries = 30
    base = _dataset(n_queries, 6)
    a = [{**r, "retrieval_context": r["retrieval_context"][:4]} for r in base]
    b = [{**r, "retrieval_context": r["retrieval_context"][2:]} for r in base]  # 2 of 4 shared
    body = json.dumps(
        {"systems": {"A": a, "B": b}, "options": {"resamples": 500, "stability_resamples": 20}},
        ensure_ascii=False,
    ).encode("utf-8")
    env = serve_env(tmp_path)
    args = [
        "--backend",
        "openai:simulated-judge",
        "--base-url",
        sim.base_url,
        "--concurrency",
        str(CONCURRENCY),
    ]
    args += ["--db", str(tmp_path / "server.sqlite"), "--cache", str(tmp_path / "cache.sqlite")]
    log = Path(sim.log_path)
    with serve_process(args, env) as (proc, url):
        status, job = call(url + "/v1/compare", "POST", body, {"Content-Type": "application/json"})
        assert status == 202 and job["kind"] == "compare"
        job_id = job["id"]
        deadline = time.monotonic() + 60
        while _log_len(log) < 60:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.1)
        mark = _log_len(log)
    with serve_process(args, env) as (proc, url):
        deadline = time.monotonic() + 90
        while True:
            status, job = call(f"{url}/v1/jobs/{job_id}")
            if job["status"] in ("done", "failed", "cancelled") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert job["status"] == "done", job
        assert job["attempts"] == 2 and job["queries_done"] == n_queries
        status, report = call(f"{url}/v1/jobs/{job_id}/report")
        assert status == 200 and report["pool"]["unique_pairs"] == n_queries * 6
        assert report["pool"]["judged"] + report["pool"]["unjudged"] == n_queries * 6
    asked = Counter(e["key"] for e in sim.log_entries() if e["outcome"] != "429")
    assert len(asked) == n_queries * 6  # every unique pair, none of the 2 x 30 shared ones twice
    twice = [k for k, c in asked.items() if c > 1]
    assert len(twice) <= 2 * CONCURRENCY and mark >= 60


def test_sigterm_stops_the_server_whatever_is_running(tmp_path: Path) -> None:
    """A running job whose LLM calls hang, a ~10 MB record being handled: SIGTERM still
    stops the server within its grace period (5 s; the bound here is generous)."""
    env = serve_env(tmp_path)
    args = ["--db", str(tmp_path / "s.sqlite"), "--backend-factory", "_server:hanging_backend"]
    huge = {"id": "huge", "query": "q", "retrieval_context": ["p"] * 900_000}
    body = ndjson([{"id": "a", "query": "q", "retrieval_context": ["x", "y"]}, huge])
    assert len(body) > 4_000_000
    with serve_process(args, env) as (proc, url):
        status, job = call(f"{url}/v1/jobs", "POST", body, {"Content-Type": "application/x-ndjson"})
        assert status == 202, job
        deadline = time.monotonic() + 120
        while call(f"{url}/v1/jobs/{job['id']}")[1]["status"] != "running":
            assert time.monotonic() < deadline, "the job did not start in 120 s"
            time.sleep(0.05)
        assert call(f"{url}/healthz", "GET")[0] == 200
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("judge serve still running 60 s after SIGTERM")
        assert rc in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
