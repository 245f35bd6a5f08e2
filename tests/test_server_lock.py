"""One writer per job database: the lock file beside it, in process and with two real
``judge serve`` processes (the second is refused naming the holder; after a kill -9 of the
holder, a restart takes the database over and finishes its job)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import ROOT, app_for, ndjson, records, serve_env, serve_process
from fastapi.testclient import TestClient

from judge.server._lock import DatabaseBusy, DatabaseLock, lock_path_for

NDJSON = {"Content-Type": "application/x-ndjson"}


def test_lock_is_exclusive_names_its_holder_and_is_released(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    first = DatabaseLock(db)
    first.acquire()
    first.acquire()  # idempotent
    record = json.loads(lock_path_for(db).read_text(encoding="utf-8"))
    assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
    second = DatabaseLock(db)
    with pytest.raises(DatabaseBusy) as busy:
        second.acquire()
    message = str(busy.value)
    assert f"pid {os.getpid()}" in message and socket.gethostname() in message and str(db) in message
    assert not second.held
    first.release()
    second.acquire()
    assert json.loads(lock_path_for(db).read_text(encoding="utf-8"))["pid"] == os.getpid()
    second.release()
    assert lock_path_for(db).read_text(encoding="utf-8") == ""  # no stale holder record


def test_a_second_app_on_a_held_database_is_refused(tmp_path: Path) -> None:
    app = app_for(tmp_path)
    with TestClient(app) as c:
        assert c.get("/healthz").status_code == 200
        with pytest.raises(DatabaseBusy):
            app_for(tmp_path)
    with TestClient(app_for(tmp_path)) as c:  # the first one stopped: free again
        assert c.get("/healthz").status_code == 200


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        data: dict[str, Any] = json.loads(resp.read())
        return data


def _wait_status(url: str, job_id: str, statuses: tuple[str, ...], timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = _get(f"{url}/v1/jobs/{job_id}")
        if job["status"] in statuses:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def _start_second(args: list[str], env: dict[str, str]) -> tuple[int | None, str]:
    """Start another server; its exit code and stderr, or (None, ...) if it started
    listening (it is stopped again at once)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "judge", "serve", "--host", "127.0.0.1", "--port", "0", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    listening = False
    for line in proc.stdout:  # ends when the process exits (or says it listens)
        if "listening on" in line:
            listening = True
            break
    if listening:
        proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    return (None if listening else proc.returncode), err


def test_second_server_exits_2_and_a_killed_servers_job_is_handed_over(tmp_path: Path) -> None:
    gate = tmp_path / "gate"  # the judge's calls wait until this file exists
    env = serve_env(tmp_path, JUDGE_TEST_GATE=str(gate))
    db = tmp_path / "server.sqlite"
    args = [
        "--backend-factory",
        "_server:file_gate_backend",
        "--db",
        str(db),
        "--cache",
        str(tmp_path / "cache.sqlite"),
    ]
    with serve_process(args, env) as (first, url):
        req = urllib.request.Request(url + "/v1/jobs", data=ndjson(records(3)), headers=NDJSON, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 202
            job_id = json.loads(resp.read())["id"]
        _wait_status(url, job_id, ("running",))
        code, err = _start_second(args, env)
        assert code == 2, err
        assert f"pid {first.pid} on host {socket.gethostname()}" in err and str(db) in err, err
        assert "another --db" in err and "Traceback" not in err
        job = _get(f"{url}/v1/jobs/{job_id}")
        assert job["status"] == "running" and job["attempts"] == 1  # nobody took it over
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    gate.touch()
    with serve_process(args, env) as (_proc, url):  # the kernel freed the lock: this one takes over
        job = _wait_status(url, job_id, ("done", "failed", "cancelled"))
        assert job["status"] == "done" and job["attempts"] == 2 and job["queries_done"] == 3
        with urllib.request.urlopen(f"{url}/v1/jobs/{job_id}/results", timeout=10) as resp:
            ids = [json.loads(x)["id"] for x in resp.read().decode().splitlines()]
    assert sorted(ids) == ["q000", "q001", "q002"]
