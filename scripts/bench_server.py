#!/usr/bin/env python
"""``judge serve`` benchmark, on 127.0.0.1 only, bounded in requests and time.

1. ``/v1/evaluate`` under load: ``--clients`` (default 50) concurrent clients, each sending
   ``--requests`` (default 20) one-query requests of 5 passages to a server whose judge is
   a deterministic fake answering at once (``fake_backend`` below; every request has its own
   query, so every passage is judged and its verdict written to a fresh verdict cache, which
   is checked at the end; ``--no-cache`` runs without one): latency p50 / p99, errors,
   requests/s, and the server process's CPU time per request (user + system, from /proc:
   the figure a shared machine disturbs least). What this measures is the service's own
   overhead (HTTP, validation, the judging core, the cache, JSON), not an LLM. The load
   comes from a lean client by default (one keep-alive connection per client over asyncio
   streams: on 2 cores the client shares the CPU with the server, and httpx spends several
   times the server's CPU per request); ``--client httpx`` is the earlier client,
   ``--client both`` runs each in turn. ``--code DIR`` (repeatable) runs the server from
   other checkouts too (e.g. a ``git archive`` of main), ``--code DIR:SITE`` with a
   directory of extra packages on its import path (e.g. ``pip install --target SITE
   httptools uvloop``), alternated ``--rounds`` times in one run, and prints each one's
   medians and their ratios to the first's. ``--recording-fake``: the earlier bench's fake
   judge, which keeps every request it gets (its garbage-collector work is then charged to
   the server).
2. A 3,000-passage job (300 queries x 10 passages by default) against the simulated LLM
   server (``scripts/sim_llm_server.py``: 50 ms +/- 10 ms per call, capacity 64), beside
   ``judge score`` on the same dataset and server, in the same run, each with a fresh
   verdict cache and ``--concurrency 16``, alternated ``--rounds`` times. The job's rate
   is taken from the client's side (POST of the NDJSON body to the job's ``done`` seen by
   polling), ``judge score``'s from its own ``this_run.wall_time_s`` (without interpreter
   start-up), so the ratio charges the server with its upload, queueing and polling.
   Goal: job throughput >= 0.9 x ``judge score``'s.

3. ``--kill-run``: a 2,000-passage job (400 queries x 5) against the simulated LLM server,
   the server killed with ``kill -9`` mid-job (at 1,000 LLM requests) and
   restarted until the job is done: requests the LLM server saw per passage (goal <= 1.01:
   a kill repeats only the calls in flight), for each ``--code`` checkout.

Run: ``python scripts/bench_server.py`` (about 2 minutes; needs the ``[server]`` extra);
``--skip-job`` runs part 1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

# Sibling scripts: scripts/ is sys.path[0] when a script is run.
import sim_llm_server
from bench_batch import _env, make_dataset, run_judge

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<rel=3>"


class _Unrecorded(list[Any]):
    """A request log that keeps nothing."""

    def append(self, item: Any) -> None:
        pass


def fake_backend() -> Any:
    """The judge of part 1 (``judge serve --backend-factory bench_server:fake_backend``):
    yes iff the passage carries the marker. A scripted backend records every request it
    gets (for tests); a real one keeps none, so this one does not either (the log's
    garbage-collector work would be charged to the server) unless ``BENCH_FAKE_RECORDS=1``
    (``--recording-fake``) asks for the earlier bench's judge."""
    from judge.backends import RuleBackend

    backend = RuleBackend.keyword(MARKER)
    if os.environ.get("BENCH_FAKE_RECORDS") != "1":
        backend.requests = _Unrecorded()
    return backend


@contextmanager
def serve(
    args: list[str], home: Path, limit_s: float = 60.0, code: Path = ROOT, extra_path: tuple[str, ...] = ()
) -> Iterator[tuple[str, int]]:
    """``judge serve ARGS`` from checkout ``code`` (``extra_path``: more import directories,
    e.g. one with optional packages such as httptools), until the block ends."""
    env = _env(home)
    env["PYTHONPATH"] = os.pathsep.join([str(code), *extra_path, str(ROOT / "scripts"), env["PYTHONPATH"]])
    env.pop("JUDGE_API_KEYS", None)
    cmd = [
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
    ]
    proc = subprocess.Popen([*cmd, *args], env=env, cwd=code, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + limit_s
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"judge serve exited {proc.wait()}")
            m = re.search(r"listening on (http://\S+)", line)
            url = m.group(1) if m else None
        if url is None:
            raise RuntimeError("judge serve did not start")
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


async def _evaluate_load(url: str, clients: int, per_client: int, limit_s: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + limit_s

    async def client(c: int, http: httpx.AsyncClient) -> None:
        for r in range(per_client):
            if time.monotonic() > deadline:
                errors["time limit"] = errors.get("time limit", 0) + 1
                return
            body = _request_body(c, r)
            t0 = time.perf_counter()
            try:
                resp = await http.post("/v1/evaluate", json=body)
                ok = resp.status_code == 200 and len(resp.json()["verdicts"]) == 5
                if not ok:
                    errors[str(resp.status_code)] = errors.get(str(resp.status_code), 0) + 1
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            latencies.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=30.0, limits=limits) as http:
        await http.get("/healthz")
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c, http) for c in range(clients)))
        wall = time.perf_counter() - t0
    return _load_figures(clients * per_client, latencies, errors, wall)


def _request_body(c: int, r: int) -> dict[str, Any]:
    """The ``r``-th request of client ``c``: its own query, so every passage is judged."""
    return {
        "query": f"客户端 {c} 的第 {r} 个问题",
        "retrieval_context": [f"段落 {j}（{c}-{r}）" + (MARKER if j % 2 == 0 else "") for j in range(5)],
    }


async def _raw_load(url: str, clients: int, per_client: int, limit_s: float) -> dict[str, Any]:
    """Part 1's load from a lean client: one keep-alive HTTP/1.1 connection per client over
    asyncio streams, requests built before the clock starts, a response read by its
    ``Content-Length``. On a 2-core machine the client shares the CPU with the server; this
    one costs a fraction of httpx's per request, so the figure is the server's."""
    host, _, port = url.removeprefix("http://").rstrip("/").rpartition(":")
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + limit_s
    requests = [
        [_http_post(host, int(port), "/v1/evaluate", _request_body(c, r)) for r in range(per_client)]
        for c in range(clients)
    ]

    async def client(c: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for raw in requests[c]:
                if time.monotonic() > deadline:
                    errors["time limit"] = errors.get("time limit", 0) + 1
                    return
                t0 = time.perf_counter()
                writer.write(raw)
                status, body = await _read_response(reader)
                if status != 200 or len(json.loads(body)["verdicts"]) != 5:
                    errors[str(status)] = errors.get(str(status), 0) + 1
                    continue
                latencies.append(time.perf_counter() - t0)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return _load_figures(clients * per_client, latencies, errors, time.perf_counter() - t0)


def _http_post(host: str, port: int, path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode("latin-1") + data


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length is None:
        raise ValueError("response without Content-Length")
    return status, await reader.readexactly(length)


def _load_figures(
    requests: int, latencies: list[float], errors: dict[str, int], wall: float
) -> dict[str, Any]:
    return {
        "requests": requests,
        "ok": len(latencies),
        "errors": errors,
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(latencies) / wall, 1),
        "passages_per_s": round(5 * len(latencies) / wall, 1),
        "p50_ms": round(1000 * _pct(latencies, 0.50), 1) if latencies else None,
        "p99_ms": round(1000 * _pct(latencies, 0.99), 1) if latencies else None,
        "max_ms": round(1000 * max(latencies), 1) if latencies else None,
    }


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used (Linux /proc; else None)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cached(path: Path) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])


def _kill_run(tmp: Path, code: Path, latency_ms: float, limit_s: float) -> dict[str, Any]:
    """Part 3: a 2,000-passage job, ``kill -9`` at 1,000 LLM requests, restarted
    until done; the LLM server's requests per passage."""
    import signal

    queries, passages = 400, 5
    data = tmp / "data.jsonl"
    tmp.mkdir(parents=True)
    make_dataset(data, queries, passages)
    args = ["--backend", "openai:simulated-judge", "--concurrency", "16", "--db", str(tmp / "s.sqlite")]
    args += ["--cache", str(tmp / "cache.sqlite")]
    job_id = None
    starts = 0
    deadline = time.monotonic() + limit_s
    with sim_llm_server.SimProcess(latency_ms=latency_ms, jitter_ms=10, capacity=64) as sim:
        for kill_at in (1000, None):
            starts += 1
            with (
                serve([*args, "--base-url", sim.base_url], tmp / "home", code=code) as (url, pid),
                httpx.Client(base_url=url, timeout=60.0) as http,
            ):
                if job_id is None:
                    resp = http.post(
                        "/v1/jobs",
                        content=data.read_bytes(),
                        headers={"Content-Type": "application/x-ndjson"},
                    )
                    resp.raise_for_status()
                    job_id = resp.json()["id"]
                while True:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"kill run not done in {limit_s} s")
                    if kill_at is not None and sim.stats()["total"] >= kill_at:
                        os.kill(pid, signal.SIGKILL)
                        break
                    job = http.get(f"/v1/jobs/{job_id}").json()
                    if job["status"] in ("done", "failed", "cancelled"):
                        break
                    time.sleep(0.01)
            if kill_at is None:
                break
        stats = sim.stats()
    asked = stats["total"] - stats["outcomes"].get("429", 0)
    n = queries * passages
    return {
        "code": str(code),
        "status": job["status"],
        "starts": starts,
        "attempts": job["attempts"],
        "queries_done": job["queries_done"],
        "passages": n,
        "llm_requests": asked,
        "requests_per_passage": round(asked / n, 4),
        "goal": "<= 1.01",
    }


def _job_run(url: str, data: Path, passages: int, limit_s: float) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=60.0) as http:
        t0 = time.perf_counter()
        resp = http.post(
            "/v1/jobs", content=data.read_bytes(), headers={"Content-Type": "application/x-ndjson"}
        )
        resp.raise_for_status()
        job_id = resp.json()["id"]
        deadline = time.monotonic() + limit_s
        while True:
            job = http.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in ("done", "failed", "cancelled"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"job not done in {limit_s} s")
            time.sleep(0.05)
        wall = time.perf_counter() - t0
    if job["status"] != "done" or job["passages_done"] != passages:
        raise RuntimeError(f"job ended {job['status']}: {job.get('error')}")
    return {
        "wall_s": wall,
        "passages_per_s": passages / wall,
        "driver_wall_s": job["summary"]["this_run"]["wall_time_s"],
    }


def _serve_evaluate(args: argparse.Namespace, home: Path, code: str, client: str) -> dict[str, Any]:
    """One server of part 1 (fresh job database and verdict cache) under one client's load."""
    cache = home / "cache.sqlite"
    cache_args = ["--no-cache"] if args.no_cache else ["--cache", str(cache)]
    server_args = ["--backend-factory", "bench_server:fake_backend", *cache_args]
    server_args += ["--concurrency", "64", "--db", str(home / "eval.sqlite")]
    run = _raw_load if client == "raw" else _evaluate_load
    checkout, *extra = code.split(os.pathsep)
    with serve(server_args, home, code=Path(checkout), extra_path=tuple(extra)) as (url, pid):
        cpu0 = _cpu_s(pid)
        load = asyncio.run(run(url, args.clients, args.requests, args.limit_s))
        cpu1 = _cpu_s(pid)
    if cpu0 is not None and cpu1 is not None and load["ok"]:
        # The server's own CPU per request: what a shared, loaded machine disturbs least
        # (wall-clock rates follow the other processes' load).
        load["server_cpu_ms_per_request"] = round(1000 * (cpu1 - cpu0) / load["ok"], 3)
    if not args.no_cache:
        load["cached_verdicts"] = _cached(cache)
        load["every_verdict_cached"] = load["cached_verdicts"] == 5 * load["ok"]
    return load


def _evaluate_part(args: argparse.Namespace, tmp: Path, codes: list[str]) -> None:
    """Part 1: every checkout under every client kind, alternated ``--rounds`` times."""
    clients = ["raw", "httpx"] if args.client == "both" else [args.client]
    print(
        f"== /v1/evaluate: {args.clients} clients x {args.requests} requests x 5 passages, fake judge, "
        f"{'no cache' if args.no_cache else 'verdict cache'}; load {os.getloadavg()[0]:.2f}"
    )
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {(k, c): [] for k in clients for c in codes}
    for rnd in range(args.rounds if len(codes) > 1 else 1):
        for kind in clients:
            for i, code in enumerate(codes):
                load = _serve_evaluate(args, tmp / f"eval-{rnd}-{kind}-{i}", code, kind)
                load.update(client=kind, code=_code_name(code), round=rnd)
                load["load_avg_1m"] = round(os.getloadavg()[0], 2)
                rows[(kind, code)].append(load)
                print(json.dumps(load, ensure_ascii=False))
    if len(codes) > 1:
        for kind in clients:
            _print_medians(kind, codes, rows)


def _print_medians(kind: str, codes: list[str], rows: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    """Each checkout's medians under one client kind, and their ratios to the first's."""

    def median(code: str, key: str) -> float | None:
        found = [r[key] for r in rows[(kind, code)] if r.get(key) is not None]
        return statistics.median(found) if found else None

    first = _code_name(codes[0])
    base_rate, base_cpu = median(codes[0], "requests_per_s"), median(codes[0], "server_cpu_ms_per_request")
    for code in codes:
        row: dict[str, Any] = {"client": kind, "code": _code_name(code)}
        for key in ("requests_per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_request"):
            row[f"median_{key}"] = median(code, key)
        rate, cpu = row["median_requests_per_s"], row["median_server_cpu_ms_per_request"]
        if base_rate and rate is not None:
            row[f"rate_ratio_vs_{first}"] = round(rate / base_rate, 3)
        if base_cpu and cpu is not None:
            row[f"cpu_ratio_vs_{first}"] = round(cpu / base_cpu, 3)
        print(json.dumps(row))


def _code_name(code: str) -> str:
    """A checkout's name in the figures: its directory, ``+site`` when extra paths are given."""
    checkout, *extra = code.split(os.pathsep)
    return Path(checkout).name + ("+" + "+".join(Path(e).name for e in extra) if extra else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=20, help="requests per client")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--passages", type=int, default=10)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--limit-s", type=float, default=300.0, help="time limit of each part")
    ap.add_argument("--no-cache", action="store_true", help="part 1 without a verdict cache")
    ap.add_argument(
        "--code",
        action="append",
        default=None,
        help="a checkout to run the server from (repeatable; default: this one); "
        f"CHECKOUT{os.pathsep}DIR... also puts DIR on the server's import path (e.g. a directory "
        "with httptools and uvloop installed by pip install --target)",
    )
    ap.add_argument(
        "--client",
        choices=("raw", "httpx", "both"),
        default="raw",
        help="part 1's load generator: lean keep-alive HTTP over asyncio streams (default), "
        "httpx (the earlier client, CPU-heavy), or both in turn",
    )
    ap.add_argument(
        "--recording-fake",
        action="store_true",
        help="part 1's judge keeps every request it gets, as the earlier bench's did",
    )
    ap.add_argument("--skip-job", action="store_true", help="part 1 only")
    ap.add_argument("--kill-run", action="store_true", help="part 3 only: the kill -9 run")
    args = ap.parse_args(argv)
    if args.recording_fake:
        os.environ["BENCH_FAKE_RECORDS"] = "1"
    if args.kill_run:
        with tempfile.TemporaryDirectory(prefix="bench_server_kill_") as tmp_s:
            checkouts = [Path(c.split(os.pathsep)[0]).resolve() for c in (args.code or [str(ROOT)])]
            for i, code in enumerate(checkouts):
                print(json.dumps(_kill_run(Path(tmp_s) / str(i), code, args.latency_ms, args.limit_s)))
        return 0

    with tempfile.TemporaryDirectory(prefix="bench_server_") as tmp_s:
        tmp = Path(tmp_s)
        _evaluate_part(args, tmp, args.code or [str(ROOT)])
        codes = [Path(c.split(os.pathsep)[0]).resolve() for c in (args.code or [str(ROOT)])]
        if args.skip_job:
            return 0

        n_passages = args.queries * args.passages
        print(
            f"== a {n_passages}-passage job vs judge score, simulated LLM "
            f"({args.latency_ms:.0f} ms, capacity 64), concurrency {args.concurrency}"
        )
        data = tmp / "data.jsonl"
        make_dataset(data, args.queries, args.passages)
        score_rates: list[float] = []
        job_rates: list[float] = []  # the first checkout's
        by_code: dict[Path, list[float]] = {c: [] for c in codes}
        with sim_llm_server.SimProcess(latency_ms=args.latency_ms, jitter_ms=10, capacity=64) as sim:
            for rnd in range(args.rounds):
                home = tmp / f"score-{rnd}"
                summary, proc_wall = run_judge(
                    [str(data), "-o", str(home / "out.jsonl"), "--concurrency", str(args.concurrency)],
                    sim.base_url,
                    home,
                )
                wall = summary["this_run"]["wall_time_s"]
                score_rates.append(n_passages / wall)
                print(
                    f"round {rnd}: judge score {n_passages / wall:7.1f} passages/s "
                    f"(scorer {wall:.2f} s, process {proc_wall:.2f} s)"
                )
                for i, code in enumerate(codes):
                    home = tmp / f"serve-{rnd}-{i}"
                    with serve(
                        [
                            "--backend",
                            "openai:simulated-judge",
                            "--base-url",
                            sim.base_url,
                            "--concurrency",
                            str(args.concurrency),
                            "--db",
                            str(home / "s.sqlite"),
                        ],
                        home,
                        code=code,
                    ) as (url, _):
                        job = _job_run(url, data, n_passages, args.limit_s)
                    by_code[code].append(job["passages_per_s"])
                    if i == 0:
                        job_rates.append(job["passages_per_s"])
                    print(
                        f"round {rnd}: judge serve job {job['passages_per_s']:7.1f} passages/s "
                        f"(submit->done {job['wall_s']:.2f} s, driver {job['driver_wall_s']:.2f} s; {code})"
                    )
        if len(codes) > 1:
            first = statistics.median(by_code[codes[0]])
            for code in codes:
                median = statistics.median(by_code[code])
                print(
                    json.dumps(
                        {
                            "code": str(code),
                            "job_passages_per_s": round(median, 1),
                            f"job_ratio_vs_{codes[0].name}": round(median / first, 3),
                        }
                    )
                )
        ratio = statistics.median(job_rates) / statistics.median(score_rates)
        print(
            json.dumps(
                {
                    "passages": n_passages,
                    "judge_score_passages_per_s": round(statistics.median(score_rates), 1),
                    "job_passages_per_s": round(statistics.median(job_rates), 1),
                    "ratio_job_vs_score": round(ratio, 3),
                    "goal": ">= 0.9",
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
