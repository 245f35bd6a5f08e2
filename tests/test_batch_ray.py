"""The Ray engine (``judge score --engine ray``): one local Ray cluster for the session.

Asserted against the simulated server's counters and request log: the Ray engine gives
the local engine's verdicts with exactly one request per passage, never more requests in
flight than ``--concurrency`` (one limiter actor for every worker), a 429's Retry-After
pauses every worker, a killed worker's passages are asked again elsewhere, and a driver
killed with ``kill -9`` resumes repeating at most the calls that were in flight.
"""

from __future__ import annotations

import asyncio
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
from _helpers import isolate_cli_env, load_sim, write_rel_dataset

from judge.backends import BackendStats, ConfigurationError, ensure_resilient, resolve_backend
from judge.backends._fake import RuleBackend
from judge.batch import BatchOptions, score_dataset
from judge.judging import JudgeConfig

pytest.importorskip("ray", reason="the Ray engine needs ray: pip install 'judge[ray]'")

from judge.batch._ray import BackendSpec, RayExecutor, WorkerLostError, _Limiter, _Slot
from judge.cli import main

# Ray's workers run niced: on a machine loaded by other jobs the 1,000-passage test took
# 4.5 min here (13 s quiet), so this module gets more than the suite's 300 s per test.
pytestmark = pytest.mark.timeout(480)

ROOT = Path(__file__).resolve().parents[1]
sim_mod = load_sim()
CONCURRENCY = 4
TIMING = {"wall_time_s", "passages_per_s"}


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Any]:
    with sim_mod.SimProcess(str(tmp_path / "requests.jsonl"), latency_ms=20, jitter_ms=5, capacity=1000) as s:
        yield s


def _records(path: Path) -> list[dict[str, Any]]:
    """The output's records in id order, without per-call timing."""
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        for v in row["verdicts"]:
            v.pop("latency_s")
    return sorted(rows, key=lambda r: r["id"])


def _score(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["score", *argv, "--quiet"]) == 0
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    return summary


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(summary))
    out.pop("output")
    for key in TIMING | {"executor"}:
        out["this_run"].pop(key)
    out["this_run"].pop("ray", None)  # which node judged what: the Ray engine's only
    for key in ("engine", "workers", "worker_cpus", "ray_address", "cache"):  # cache: another file
        out["config"].pop(key, None)
    return out


def test_ray_engine_gives_the_local_engines_verdicts_one_call_each_within_the_global_limit(
    tmp_path: Path, sim: Any, ray_cluster: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    isolate_cli_env(tmp_path, monkeypatch)
    inp = tmp_path / "data.jsonl"
    ids = write_rel_dataset(inp, 100, 10)  # 1,000 passages
    common = [
        "--backend",
        "openai:simulated-judge",
        "--base-url",
        sim.base_url,
        "--concurrency",
        str(CONCURRENCY),
    ]

    local = _score(
        [str(inp), "-o", str(tmp_path / "local.jsonl"), "--cache", str(tmp_path / "l.sqlite"), *common],
        capsys,
    )
    assert sim.stats()["total"] == 1000
    sim.reset()
    ray_argv = [str(inp), "-o", str(tmp_path / "ray.jsonl"), "--cache", str(tmp_path / "r.sqlite"), *common]
    ray_argv += ["--engine", "ray", "--workers", "2", "--worker-cpus", "0.5"]
    ray = _score(ray_argv, capsys)

    stats = sim.stats()
    assert stats["total"] == 1000 and stats["distinct_keys"] == 1000 and stats["repeated_keys"] == 0
    assert stats["max_inflight"] <= CONCURRENCY  # one limiter for both workers
    assert [r["id"] for r in _records(tmp_path / "ray.jsonl")] == ids
    assert _records(tmp_path / "ray.jsonl") == _records(tmp_path / "local.jsonl")
    assert ray["this_run"]["executor"] == "ray" and local["this_run"]["executor"] == "local"
    assert ray["config"]["engine"] == "ray" and ray["config"]["workers"] == 2
    assert ray["this_run"]["backend"]["calls"] == 1000
    # The same summary, apart from timing, the output and cache paths and the engine.
    assert _comparable(ray) == _comparable(local)

    # A re-run with the same cache (another output file) asks the server nothing.
    sim.reset()
    ray_argv[2] = str(tmp_path / "ray2.jsonl")
    again = _score(ray_argv, capsys)
    assert sim.stats()["total"] == 0
    assert again["this_run"]["passages_cached"] == 1000 and again["this_run"]["backend"]["calls"] == 0
    assert again["judge"] == local["judge"]


async def _run(
    inp: Path, out: Path, executor: RayExecutor, base_url: str, concurrency: int = CONCURRENCY
) -> Any:
    backend = ensure_resilient(
        resolve_backend("openai:simulated-judge", base_url=base_url), concurrency=concurrency
    )
    try:
        return await score_dataset(
            inp,
            out,
            backend,
            JudgeConfig(),
            options=BatchOptions(concurrency=concurrency, progress="quiet", executor=executor),
        )
    finally:
        await backend.aclose()


def test_a_429_retry_after_pauses_every_worker(
    tmp_path: Path, ray_cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    inp = tmp_path / "data.jsonl"
    write_rel_dataset(inp, 8, 5)
    log = tmp_path / "requests.jsonl"
    # Capacity 2 under 6 calls in flight: 429s with Retry-After 1 s.
    with sim_mod.SimProcess(str(log), latency_ms=100, jitter_ms=0, capacity=2, retry_after_s=1.0) as sim:
        executor = RayExecutor(
            BackendSpec("openai:simulated-judge", sim.base_url), workers=2, cpus_per_worker=0.5, concurrency=6
        )

        async def go() -> tuple[Any, dict[str, Any]]:
            try:
                outcome = await _run(inp, tmp_path / "out.jsonl", executor, sim.base_url, 6)
                return outcome, await executor.limiter_state()
            finally:
                await executor.aclose()

        outcome, state = asyncio.run(go())
        entries = sim.log_entries()
    assert outcome.summary["unjudged"] == 0 and outcome.summary["queries"] == 8
    first = min(e["mono"] for e in entries if e["outcome"] == "429")
    # Every worker waits: the limiter grants no slot inside a pause, so the requests that
    # reach the server before a pause ends are at most the slots granted before it began
    # (calls that had their slot before the 429 was heard). Ordered by cause, not by a
    # grace period: how late a loaded machine delivers the 429 to the limiter doesn't matter.
    pauses = state["pause_log"]
    assert pauses and all(p["at"] > first for p in pauses)  # a pause follows a 429
    for p in pauses:
        assert p["until"] >= p["at"] + 0.99  # Retry-After: 1 s
        arrived = sum(1 for e in entries if e["mono"] < p["until"])
        assert arrived <= p["granted"], (p, arrived)
    assert any(e["mono"] >= pauses[0]["until"] for e in entries)
    assert state["pauses"] >= 1 and state["limit"] < 6  # AIMD: the global window halved
    assert outcome.summary["this_run"]["backend"]["rate_limited"] >= 1


def test_a_killed_worker_is_replaced_and_its_passages_are_asked_again(
    tmp_path: Path, sim: Any, ray_cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    sim.configure(latency_ms=60)
    inp = tmp_path / "data.jsonl"
    ids = write_rel_dataset(inp, 30, 8)
    out = tmp_path / "out.jsonl"
    executor = RayExecutor(
        BackendSpec("openai:simulated-judge", sim.base_url),
        workers=2,
        cpus_per_worker=0.5,
        concurrency=CONCURRENCY,
    )

    async def kill_one_when_busy() -> None:
        deadline = time.monotonic() + 240  # bounded; room for a loaded 2-core machine (pytest-timeout: 300 s)
        while sim.stats()["total"] < 60:
            assert time.monotonic() < deadline, "kill point not reached in 240 s"
            await asyncio.sleep(0.05)
        ray.kill(executor.worker_handles()[0], no_restart=True)

    async def go() -> Any:
        try:
            killer = asyncio.ensure_future(kill_one_when_busy())
            outcome = await _run(inp, out, executor, sim.base_url)
            await killer
            return outcome
        finally:
            await executor.aclose()

    outcome = asyncio.run(go())
    assert executor.restarts == 1
    records = _records(out)
    assert [r["id"] for r in records] == ids and all(r["unjudged"] == 0 for r in records)
    for r in records:  # the markers decide: yes iff grade >= 2
        i = int(r["id"][1:])
        assert [v["verdict"] for v in r["verdicts"]] == [
            "yes" if (i * 7 + j) % 4 >= 2 else "no" for j in range(8)
        ]
    stats = sim.stats()
    # Only the calls the dead worker had in flight were asked again.
    assert stats["distinct_keys"] == 240
    assert stats["total"] - 240 == stats["repeated_keys"] <= executor.per_worker
    assert executor.reasked >= stats["repeated_keys"]
    assert outcome.summary["queries"] == 30


async def test_a_dead_workers_waiting_calls_give_their_slots_back_to_the_limiter() -> None:
    """A worker killed while some of its calls wait for a slot: when those waits end (the
    limiter actor does not know the caller died), the slots go straight back; kept, they
    would shrink the global window for good, and with every slot leaked the run hangs."""
    limiter = _Limiter(concurrency=2, rpm=None, tpm=None)
    await limiter.acquire("w1", 10)
    await limiter.acquire("w2", 10)
    waiting = asyncio.ensure_future(limiter.acquire("w1", 10))  # the window is full
    await asyncio.sleep(0)
    assert not waiting.done()
    assert await limiter.forget("w1") == 1  # w1 died holding one slot
    await waiting  # the freed slot goes to w1's waiting call, which gives it straight back
    assert (await limiter.state())["in_flight"] == 1  # only w2's call
    await limiter.release("w2", 10, 10)
    assert (await limiter.state())["in_flight"] == 0
    # A late release from the dead worker changes nothing.
    await limiter.release("w1", 10, 10)
    assert (await limiter.state())["in_flight"] == 0
    for owner in ("w3", "w3"):
        await asyncio.wait_for(limiter.acquire(owner, 10), 1.0)  # the whole window is free
    assert (await limiter.state())["in_flight"] == 2


async def test_an_unreachable_actor_is_asked_again_without_being_replaced() -> None:
    """``ActorUnavailableError`` (Ray cannot reach the actor for now) asks again; only a
    death starts a replacement (else two actors would run where the run asked for one)."""
    import ray

    executor = RayExecutor(BackendSpec("openai:x", "http://127.0.0.1:9"), workers=1)
    executor._ray = ray
    executor._changed = asyncio.Condition()
    calls: list[tuple[Any, ...]] = []

    class Method:
        def remote(self, *args: Any) -> Any:
            async def answer() -> Any:
                calls.append(args)
                if len(calls) == 1:
                    raise ray.exceptions.ActorUnavailableError("node under load", None)
                return "verdict", BackendStats(calls=1)

            return answer()

    class Handle:
        judge_one = Method()

    slot = _Slot("w1", Handle())
    executor._slots = [slot]
    assert await executor._call("judge_one", "q", 0) == "verdict"
    assert calls == [("q", 0), ("q", 0)]
    assert executor.restarts == 0 and executor.reasked == 1
    assert slot.alive and slot.busy == 0 and slot.unavailable == 0
    assert executor.stats.calls == 1


async def test_a_limiter_that_never_starts_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    import judge.batch._ray as ray_engine

    class Never:
        def remote(self, *args: Any) -> Any:
            return asyncio.get_running_loop().create_future()  # never answers

    class LimiterHandle:
        state = Never()

    class LimiterClass:
        def options(self, **options: Any) -> Any:
            return self

        def remote(self, *args: Any) -> Any:
            return LimiterHandle()

    class Context:
        def get_node_id(self) -> str:
            return "a" * 56  # the driver's node: where the limiter is placed

    class FakeRay:
        def is_initialized(self) -> bool:
            return True

        def get_runtime_context(self) -> Context:
            return Context()

        def remote(self, **options: Any) -> Any:
            return lambda cls: LimiterClass()

    monkeypatch.setattr(ray_engine, "_import_ray", FakeRay)
    executor = RayExecutor(BackendSpec("openai:x", "http://127.0.0.1:9"), workers=1, ready_timeout_s=0.2)
    with pytest.raises(WorkerLostError, match=r"limiter actor did not start within 0\.2 s"):
        await asyncio.wait_for(executor.start(), 10)


def test_an_object_backend_is_shipped_by_pickling_and_a_bad_one_is_refused(
    tmp_path: Path, ray_cluster: str
) -> None:
    backend = RuleBackend.keyword("RELEVANT")
    executor = RayExecutor(backend, workers=1, cpus_per_worker=0.5)
    assert executor.spec is None and executor._pickled
    inp = tmp_path / "data.jsonl"
    with open(inp, "w", encoding="utf-8") as fh:
        for i in range(3):
            ctx = [f"passage {j} RELEVANT" if (i + j) % 2 else f"passage {j}" for j in range(4)]
            fh.write(json.dumps({"id": f"q{i}", "query": f"query {i}", "retrieval_context": ctx}) + "\n")

    async def go() -> Any:
        try:
            opts = BatchOptions(progress="quiet", executor=executor)
            return await score_dataset(inp, tmp_path / "out.jsonl", backend, JudgeConfig(), options=opts)
        finally:
            await executor.aclose()

    outcome = asyncio.run(go())
    assert backend.calls == 0  # the workers judged with their own copies
    assert outcome.summary["this_run"]["backend"]["calls"] == 12
    for r in _records(tmp_path / "out.jsonl"):
        i = int(r["id"][1:])
        assert [v["verdict"] for v in r["verdicts"]] == ["yes" if (i + j) % 2 else "no" for j in range(4)]

    local = RayExecutor("local:qwen2.5-coder-1.5b-q4km", workers=1, cpus_per_worker=2)
    assert local.spec is not None and local.spec.options["n_threads"] == 2

    class Unpicklable(RuleBackend):
        def __reduce__(self) -> Any:
            raise TypeError("holds a live connection")

    with pytest.raises(ConfigurationError, match="cannot be shipped to Ray workers"):
        RayExecutor(Unpicklable(lambda request: "no"), workers=1)


def test_ray_flags_need_the_ray_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    isolate_cli_env(tmp_path, monkeypatch)
    inp = tmp_path / "data.jsonl"
    write_rel_dataset(inp, 1, 1)
    assert (
        main(
            ["score", str(inp), "--backend", "openai:x", "--base-url", "http://127.0.0.1:9", "--workers", "2"]
        )
        == 2
    )
    assert "field '--workers': needs --engine ray" in capsys.readouterr().err


def _log_len(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        return fh.read().count(b"\n")


def test_a_driver_killed_with_kill_9_resumes_asking_at_most_the_calls_in_flight(
    tmp_path: Path, sim: Any, ray_cluster: str
) -> None:
    n_queries, n_passages = 30, 5
    inp = tmp_path / "data.jsonl"
    ids = write_rel_dataset(inp, n_queries, n_passages)
    out = tmp_path / "out.jsonl"
    log = Path(sim.log_path)
    env = dict(os.environ)
    env.update(
        {
            "JUDGE_HOME": str(tmp_path / "home"),
            "OPENAI_API_KEY": "sk-test-not-a-real-key",
            "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
    )
    env.pop("DASHSCOPE_API_KEY", None)
    cmd = [
        sys.executable, "-m", "judge", "score", str(inp), "-o", str(out),
        "--backend", "openai:simulated-judge", "--base-url", sim.base_url,
        "--cache", str(tmp_path / "cache.sqlite"), "--concurrency", str(CONCURRENCY),
        "--engine", "ray", "--ray-address", ray_cluster, "--workers", "2", "--worker-cpus", "0.5",
        "--quiet",
    ]  # fmt: skip

    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240  # bounded; room for a loaded 2-core machine (pytest-timeout: 300 s)
    while _log_len(log) < 40:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"scorer ended before the kill point (rc={proc.returncode}): {err}")
        assert time.monotonic() < deadline, "kill point not reached in 240 s"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    at_kill = _log_len(log)
    proc.wait()
    if proc.stderr:
        proc.stderr.close()
    time.sleep(1.0)  # the cluster notices the dead driver and stops its workers
    mark = _log_len(log)

    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["id"] for r in records) == ids  # every query exactly once
    assert all(r["n_passages"] == n_passages and r["unjudged"] == 0 for r in records)
    assert summary["queries"] == n_queries and summary["this_run"]["executor"] == "ray"

    entries = sim.log_entries()
    asked = Counter(e["key"] for e in entries)
    assert len(asked) == n_queries * n_passages
    twice = [k for k, c in asked.items() if c > 1]
    first_seen: dict[str, int] = {}
    for pos, e in enumerate(entries):
        first_seen.setdefault(e["key"], pos)
    # A passage asked twice was in flight at the kill: handed to a worker (the executor's
    # window, 2 x concurrency) and asked before the cluster stopped the dead driver's actors.
    window = 2 * CONCURRENCY
    assert len(twice) <= window
    for key in twice:
        assert asked[key] == 2 and at_kill - window <= first_seen[key] < mark, (
            first_seen[key],
            at_kill,
            mark,
        )


def test_the_workers_stat_records_are_kept_latest_first_and_summed() -> None:
    """Each worker's newest snapshot counts once (one that arrives late changes nothing),
    and the executor's stats are the sum over workers, unpriced calls included."""
    executor = RayExecutor(BackendSpec("openai:x", "http://127.0.0.1:9"), workers=2)
    assert executor.stats == BackendStats()
    executor._keep_stats("w1", BackendStats(requests=2, calls=3, retries=1, unpriced_calls=2, cost=0.5))
    executor._keep_stats("w1", BackendStats(requests=1, calls=1, unpriced_calls=1, cost=0.25))  # late
    executor._keep_stats("w2", BackendStats(requests=4, calls=4, unpriced_calls=4, currency="USD"))
    assert executor.stats == BackendStats(
        requests=6, calls=7, retries=1, unpriced_calls=6, cost=0.5, currency="USD"
    )


def test_a_template_file_is_shipped_to_the_workers_as_its_bytes(tmp_path: Path) -> None:
    """A worker host need not have the driver's template file: the executor reads it on the
    driver, the worker writes the same bytes on its host, so the template's id and hash (and
    every cache key and verdict) are the driver's. A built-in template id ships nothing."""
    from dataclasses import replace as dc_replace

    from judge.batch._ray_actors import _with_local_template, local_template_path, read_template_file
    from judge.judging import load_template

    source = ROOT / "prompts" / "binary.en.v2.toml"
    mine = tmp_path / "driver-only" / "binary.en.v2.toml"
    mine.parent.mkdir()
    mine.write_bytes(source.read_bytes() + b"\n# edited on the driver\n")
    shipped = read_template_file(str(mine))
    assert shipped is not None and shipped[1] == mine.read_bytes()
    driver_template = load_template(str(mine))
    mine.unlink()  # the worker host has no such file
    mine.parent.rmdir()

    config = _with_local_template(dc_replace(JudgeConfig(), template=str(mine)), shipped)
    assert config.template is not None and config.template != str(mine)
    worker_template = load_template(config.template)
    assert (worker_template.id, worker_template.hash) == (driver_template.id, driver_template.hash)
    assert worker_template.hash != load_template("binary.en.v2").hash  # the edited bytes, not the built-in
    assert local_template_path(shipped) == config.template  # written once, found again

    assert read_template_file("binary.en.v2") is None and read_template_file(None) is None
    assert _with_local_template(JudgeConfig(), None) == JudgeConfig()
