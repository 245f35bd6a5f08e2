"""``judge serve`` when the cause of a failure is known: an LLM upstream refusing the key or
URL is a 502 naming the backend and the status (a job fails fast with it), a full or
read-only storage is a 503, and a job it stopped resumes once the storage is back."""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _helpers import load_sim
from _server import app_for, ndjson, records, wait_job
from fastapi.testclient import TestClient

from judge.backends import ChatRequest, RuleBackend, ensure_resilient, make_backend
from judge.backends._base import error_for_status
from judge.server._db import JobDB
from judge.store._runstate import OutputWriter

NDJSON = {"Content-Type": "application/x-ndjson"}
sim_mod = load_sim()


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with sim_mod.SimProcess() as s:
        yield s


class Refusing:
    """A fake upstream that answers every call with an HTTP error status (counted)."""

    def __init__(self, status: int) -> None:
        self.calls = 0
        self.prompts: list[str] = []
        self.lock = threading.Lock()

        def rule(request: ChatRequest) -> Any:
            with self.lock:
                self.calls += 1
                self.prompts.append("\n".join(m.content for m in request.messages))
            return error_for_status(status, f"openai:judge: HTTP {status}: invalid api key")

        self.backend = RuleBackend(rule, name="fake:refusing")


@pytest.mark.parametrize("status", [401, 403, 404])
def test_evaluate_with_a_refused_key_or_url_is_502_naming_backend_and_status(
    tmp_path: Path, status: int
) -> None:
    upstream = Refusing(status)
    with TestClient(app_for(tmp_path, backend=upstream.backend)) as client:
        r = client.post("/v1/evaluate", json={"query": "q", "retrieval_context": ["a", "b"]})
    assert r.status_code == 502
    body = r.json()
    assert body["backend"] == "fake:refusing" and body["upstream_status"] == status
    assert f"HTTP {status}" in body["detail"] and "fake:refusing" in body["detail"]


def test_evaluate_against_a_wrong_url_on_a_real_http_backend(
    tmp_path: Path, sim: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    backend = make_backend("openai:simulated-judge", base_url=sim.root + "/no-such-api")
    with TestClient(app_for(tmp_path, backend=backend)) as client:
        r = client.post("/v1/evaluate", json={"query": "q", "retrieval_context": ["a"]})
    assert r.status_code == 502 and r.json()["upstream_status"] == 404
    assert r.json()["backend"] == backend.name


def test_a_job_against_a_refusing_upstream_fails_fast_with_the_message(tmp_path: Path) -> None:
    upstream = Refusing(401)
    backend = ensure_resilient(upstream.backend, concurrency=4, max_retries=5)  # retries allowed
    with TestClient(app_for(tmp_path, backend=backend)) as client:
        r = client.post("/v1/jobs", content=ndjson(records(50, 4)), headers=NDJSON)
        assert r.status_code == 202
        job = wait_job(client, r.json()["id"])
    assert job["status"] == "failed"
    assert "refused the request (HTTP 401)" in job["error"] and "invalid api key" in job["error"]
    # No retry storm: a permanent error is never retried (no prompt asked twice) and stops
    # the run (only calls already started go out: far fewer than the 200 passages).
    assert len(set(upstream.prompts)) == upstream.calls
    assert 1 <= upstream.calls < 100


def test_a_full_disk_fails_the_job_clearly_and_resume_finishes_it(tmp_path: Path, monkeypatch: Any) -> None:
    original = OutputWriter.write
    full = threading.Event()
    full.set()

    def write(self: OutputWriter, record: Any) -> None:
        if full.is_set() and record.get("id") == "q002":
            raise OSError(errno.ENOSPC, "No space left on device")
        original(self, record)

    monkeypatch.setattr(OutputWriter, "write", write)
    with TestClient(app_for(tmp_path)) as client:
        r = client.post("/v1/jobs", content=ndjson(records(5)), headers=NDJSON)
        job_id = r.json()["id"]
        job = wait_job(client, job_id)
        assert job["status"] == "failed"
        assert job["error"].startswith("the server cannot store jobs: no space left on the device")
        assert client.post(f"/v1/jobs/{job_id}/retry-unjudged").status_code == 409
        full.clear()  # space is back
        r = client.post(f"/v1/jobs/{job_id}/resume")
        assert r.status_code == 202 and r.json()["status"] == "queued"
        job = wait_job(client, job_id)
        assert job["status"] == "done" and job["queries_done"] == 5 and job["error"] is None
        lines = client.get(f"/v1/jobs/{job_id}/results").text.splitlines()
        assert len(lines) == 5  # every query once
        assert client.post(f"/v1/jobs/{job_id}/resume").status_code == 409  # done: nothing to resume


def test_submit_to_a_read_only_or_full_storage_is_503(tmp_path: Path, monkeypatch: Any) -> None:
    with TestClient(app_for(tmp_path)) as client:
        jobs = tmp_path / "jobs"
        original_mkdir = Path.mkdir

        def read_only_mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
            if self.parent == jobs:
                raise OSError(errno.EROFS, "Read-only file system", str(self))
            original_mkdir(self, *args, **kwargs)

        monkeypatch.setattr(Path, "mkdir", read_only_mkdir)
        r = client.post("/v1/jobs", content=ndjson(records(1)), headers=NDJSON)
        assert r.status_code == 503 and "read-only" in r.json()["detail"]
        assert str(tmp_path) not in r.json()["detail"]  # the server's paths stay in its log
        monkeypatch.undo()

        def full_db(*_: Any, **__: Any) -> Any:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(JobDB, "insert", full_db)
        r = client.post("/v1/jobs", content=ndjson(records(1)), headers=NDJSON)
        assert r.status_code == 503 and "database cannot be written" in r.json()["detail"]
        assert list(jobs.iterdir()) == []  # nothing half-made is left
        monkeypatch.undo()
        assert client.post("/v1/jobs", content=ndjson(records(1)), headers=NDJSON).status_code == 202


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_jobs_directory_is_503(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path)) as client:
        (tmp_path / "jobs").chmod(0o555)
        try:
            r = client.post("/v1/jobs", content=ndjson(records(1)), headers=NDJSON)
        finally:
            (tmp_path / "jobs").chmod(0o755)
    assert r.status_code == 503 and "permission denied" in r.json()["detail"]


def test_other_os_errors_stay_500(tmp_path: Path, monkeypatch: Any) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(JobDB, "insert", broken)
    with TestClient(app_for(tmp_path), raise_server_exceptions=False) as client:
        r = client.post("/v1/jobs", content=ndjson(records(1)), headers=NDJSON)
    assert r.status_code == 500


def test_options_the_backend_cannot_do_are_422_not_502(tmp_path: Path) -> None:
    backend = RuleBackend.keyword("[相关]", supports_probabilities=False)
    with TestClient(app_for(tmp_path, backend=backend)) as client:
        r = client.post(
            "/v1/evaluate", json={"query": "q", "retrieval_context": ["a"], "config": {"probability": True}}
        )
    assert r.status_code == 422 and r.json()["fields"] == ["body.config"]
    assert "probabilit" in r.json()["detail"]
