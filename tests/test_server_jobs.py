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
