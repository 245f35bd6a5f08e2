"""The job runner of ``judge serve`` (:mod:`judge.server._jobs`): reading a running job's
progress file never holds the event loop."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import app_for, ndjson, records, wait_job
from fastapi.testclient import TestClient

from judge.server import _job_files

NDJSON = {"Content-Type": "application/x-ndjson"}


def test_healthz_answers_while_a_running_jobs_file_is_read(tmp_path: Path, monkeypatch: Any) -> None:
    """Ordered, not timed: the first read of the job's progress file (all of it, for a
    resumed job) waits (bounded) for /healthz to be answered; if the read held the event
    loop, /healthz could not be answered meanwhile and the wait would run out."""
    reading = threading.Event()
    answered = threading.Event()
    seen: list[bool] = []
    original = _job_files.OutputTail.poll

    def slow_poll(self: _job_files.OutputTail) -> bool:
        if not seen and not reading.is_set():
            reading.set()
            seen.append(answered.wait(20))
        return original(self)

    monkeypatch.setattr(_job_files.OutputTail, "poll", slow_poll)
    with TestClient(app_for(tmp_path)) as client:
        r = client.post("/v1/jobs", content=ndjson(records(3)), headers=NDJSON)
        assert r.status_code == 202
        assert reading.wait(60)
        assert client.get("/healthz").status_code == 200
        answered.set()
        job = wait_job(client, r.json()["id"], timeout=60)
    assert seen == [True]
    assert job["status"] == "done" and job["queries_done"] == 3


def test_a_job_of_an_unknown_kind_fails_naming_it_and_the_next_job_runs(tmp_path: Path) -> None:
    """A job database shared with another version of judge holds a job of a kind this server
    does not run, queued first (and another left ``running`` by a process that died): each
    fails naming its kind, the slot (``max_jobs`` 1) is freed, the scoring job queued after
    them completes, and listing, the job's view and its other routes answer."""
    from judge.server._db import JobDB

    db = JobDB(tmp_path / "server.sqlite")
    for job_id in ("j0unknown", "j1running"):
        db.insert(
            job_id,
            kind="reindex",
            options={},
            queries_total=1,
            passages_total=1,
            rejected=0,
            idempotency_hash=None,
            body_hash=None,
        )
    db.update("j1running", status="running", started=1.0, attempts=1)
    db.close()
    with TestClient(app_for(tmp_path)) as client:
        r = client.post("/v1/jobs", content=ndjson(records(3)), headers=NDJSON)
        assert r.status_code == 202
        job = wait_job(client, r.json()["id"], timeout=60)
        listed = client.get("/v1/jobs")
        unknown = [wait_job(client, job_id, timeout=60) for job_id in ("j0unknown", "j1running")]
        results = client.get("/v1/jobs/j0unknown/results")
    assert job["status"] == "done" and job["queries_done"] == 3
    assert listed.status_code == 200
    assert {j["id"]: j["status"] for j in listed.json()["jobs"]} == {
        job["id"]: "done",
        "j0unknown": "failed",
        "j1running": "failed",
    }
    for found in unknown:
        assert found["status"] == "failed" and found["kind"] == "reindex"
        assert "kind 'reindex'" in found["error"] and found["finished"] is not None
    assert results.status_code == 409 and "kind 'reindex'" in results.json()["detail"]
