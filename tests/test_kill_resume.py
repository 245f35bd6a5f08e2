"""kill -9 a real ``python -m judge score`` at several points; the same command resumes.

Asserted by counting: the output's records (none lost, none duplicated, every passage
judged) and the simulated server's request log (no passage asked again, except requests
that were in flight at the moment of a kill: their reply never reached the cache).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_sim, write_rel_dataset

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY = 6


sim_mod = load_sim()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Any]:
    with sim_mod.SimProcess(
        str(tmp_path / "requests.jsonl"), latency_ms=25, jitter_ms=10, capacity=1000
    ) as s:
        yield s


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "JUDGE_HOME": str(tmp_path / "home"),
            "OPENAI_API_KEY": "sk-test-not-a-real-key",
            "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        }
    )
    env.pop("DASHSCOPE_API_KEY", None)
    return env


def _cmd(inp: Path, out: Path, base_url: str, cache: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "judge",
        "score",
        str(inp),
        "-o",
        str(out),
        "--backend",
        "openai:simulated-judge",
        "--base-url",
        base_url,
        "--cache",
        str(cache),
        "--concurrency",
        str(CONCURRENCY),
        "--quiet",
    ]


def _log_len(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        return fh.read().count(b"\n")


def _run_and_kill_after(cmd: list[str], env: dict[str, str], log: Path, n_entries: int) -> int:
    """Start the scorer, SIGKILL it once the server has logged ``n_entries`` requests."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _log_len(log) < n_entries:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"scorer ended before the kill point (rc={proc.returncode}): {err}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("kill point not reached in 60 s")
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.stderr:
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.1)  # let the server log the requests that were on the wire
    return _log_len(log)


def test_kill_9_at_several_points_loses_nothing_and_asks_nothing_twice(tmp_path: Path, sim: Any) -> None:
    n_queries, n_passages = 40, 5
    inp = tmp_path / "data.jsonl"
    ids = write_rel_dataset(inp, n_queries, n_passages)
    out = tmp_path / "out.jsonl"
    cache = tmp_path / "cache.sqlite"
    log = Path(sim.log_path)
    env = _env(tmp_path)
    cmd = _cmd(inp, out, sim.base_url, cache)

    kill_marks: list[int] = []
    for point in (12, 70, 140):
        kill_marks.append(_run_and_kill_after(cmd, env, log, point))
        # After every kill the output holds only complete, distinct records.
        lines = out.read_bytes().splitlines(keepends=True) if out.exists() else []
        complete = [json.loads(x) for x in lines if x.endswith(b"\n")]
        assert len({r["id"] for r in complete}) == len(complete)

    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)

    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["id"] for r in records) == ids  # none lost, none duplicated
    assert all(r["n_passages"] == n_passages and r["unjudged"] == 0 for r in records)
    assert summary["queries"] == n_queries and summary["unjudged"] == 0

    entries = sim.log_entries()
    asked = Counter(e["key"] for e in entries if e["outcome"] != "429")
    assert len(asked) == n_queries * n_passages  # every passage asked at least once
    # A passage asked twice must have been in flight at a kill: its first request is among
    # the last (2 x concurrency) requests logged before that kill.
    first_seen: dict[str, int] = {}
    for pos, e in enumerate(entries):
        first_seen.setdefault(e["key"], pos)
    twice = [k for k, c in asked.items() if c > 1]
    for key in twice:
        assert asked[key] == 2
        pos = first_seen[key]
        assert any(mark - 2 * CONCURRENCY <= pos < mark for mark in kill_marks), (key, pos, kill_marks)
    assert len(twice) <= len(kill_marks) * CONCURRENCY

    # Running the same command again, or on another output file, asks the server nothing.
    before = len(entries)
    again = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    other = _cmd(inp, tmp_path / "other.jsonl", sim.base_url, cache)
    fresh = subprocess.run(other, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, fresh.stderr
    assert len(sim.log_entries()) == before
    assert json.loads(fresh.stdout)["judge"] == summary["judge"]
    assert json.loads(fresh.stdout)["this_run"]["backend"]["calls"] == 0
