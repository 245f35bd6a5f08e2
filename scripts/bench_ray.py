#!/usr/bin/env python
"""The Ray engine beside the local engine, on one machine, in one run.

1. **Simulated provider** (``scripts/sim_llm_server.py``, latency with jitter, capacity far
   above the client's): the same N passages are scored by the local engine
   (:class:`~judge.batch.LocalExecutor`) and by the Ray engine (:class:`~judge.batch.RayExecutor`,
   ``--workers`` actors, one limiter actor) at the same total ``--concurrency``, alternating
   ``--rounds`` times with a fresh cache each time. Printed: passages/s of each, the
   Ray/local ratio (goal >= 0.9), requests per passage, the most requests the server saw in
   flight (must not exceed ``--concurrency``) and whether the verdicts are identical. Ray's
   start-up (cluster and actors) is outside the timed part: it is paid once per run.
2. **Embedded model** (``--embedded-passages``, default 12; 0 skips): the same passages
   judged by 1 actor with every CPU (its llama.cpp threads = the CPUs) and by 2 actors
   with half each; needs ``judge[local]``. Skipped with a message when the embedded
   backend cannot be imported.

Run: ``python scripts/bench_ray.py`` (``--passages 2000 --concurrency 32 --latency-ms 200``
by default; about 1-2 minutes plus Ray's start-up). The local Ray cluster gets
``--cpus`` CPUs (default: all of this machine's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sim_llm_server

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-real-key")

from judge.backends import ensure_resilient, resolve_backend  # noqa: E402
from judge.batch import BatchOptions, score_dataset  # noqa: E402
from judge.batch._ray import BackendSpec, RayExecutor  # noqa: E402
from judge.judging import JudgeConfig  # noqa: E402
from judge.store import SQLiteVerdictStore  # noqa: E402


def make_dataset(path: Path, n_passages: int, per_query: int = 10) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(-(-n_passages // per_query)):
            n = min(per_query, n_passages - i * per_query)
            ctx = [
                f"第 {i} 个查询的第 {j} 段资料，关于检索评测。<rel={(i * 5 + j * 3) % 4}>" for j in range(n)
            ]
            row = {"id": f"q{i}", "query": f"检索评测问题 {i}", "retrieval_context": ctx}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def verdicts_of(path: Path) -> list[tuple[str, list[str]]]:
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    return sorted((r["id"], [v["verdict"] for v in r["verdicts"]]) for r in rows)


async def score(
    inp: Path, out: Path, spec: str, base_url: str | None, concurrency: int, executor: Any, cache: Path
) -> dict[str, Any]:
    backend = ensure_resilient(resolve_backend(spec, base_url=base_url), concurrency=concurrency)
    store = SQLiteVerdictStore(cache)
    try:
        opts = BatchOptions(concurrency=concurrency, progress="quiet", executor=executor)
        outcome = await score_dataset(inp, out, backend, JudgeConfig(), store=store, options=opts)
        return outcome.summary
    finally:
        await store.aclose()
        await backend.aclose()


def bench_sim(args: argparse.Namespace, work: Path) -> None:
    inp = work / "sim.jsonl"
    make_dataset(inp, args.passages)
    print(f"== simulated provider: {args.passages} passages, latency {args.latency_ms:g} ms, "
          f"concurrency {args.concurrency} (Ray: {args.workers} workers)")  # fmt: skip
    with sim_llm_server.SimProcess(
        None, latency_ms=args.latency_ms, jitter_ms=args.latency_ms / 10, capacity=100_000
    ) as sim:
        executor = RayExecutor(
            BackendSpec("openai:simulated-judge", sim.base_url),
            workers=args.workers,
            cpus_per_worker=args.cpus / args.workers,
            concurrency=args.concurrency,
        )
        rates: dict[str, list[float]] = {"local": [], "ray": []}
        same = True

        async def go() -> None:
            nonlocal same
            await executor.start()  # Ray's start-up is paid once, outside the timed runs
            try:
                for rnd in range(args.rounds):
                    outs = {}
                    for engine in ("local", "ray"):
                        out = work / f"sim-{engine}-{rnd}.jsonl"
                        sim.reset()
                        started = time.perf_counter()
                        summary = await score(
                            inp, out, "openai:simulated-judge", sim.base_url, args.concurrency,
                            executor if engine == "ray" else None, work / f"cache-{engine}-{rnd}.sqlite",
                        )  # fmt: skip
                        wall = time.perf_counter() - started
                        stats = sim.stats()
                        rate = args.passages / wall
                        rates[engine].append(rate)
                        outs[engine] = out
                        print(
                            f"  round {rnd + 1} {engine:5s}: {wall:6.2f} s, {rate:7.1f} passages/s, "
                            f"{stats['total'] / args.passages:.3f} requests/passage, "
                            f"max in flight {stats['max_inflight']}, unjudged {summary['unjudged']}"
                        )
                    same = same and verdicts_of(outs["local"]) == verdicts_of(outs["ray"])
            finally:
                await executor.aclose()

        asyncio.run(go())
    local, ray = max(rates["local"]), max(rates["ray"])
    print(f"  best of {args.rounds}: local {local:.1f}/s, ray {ray:.1f}/s, ray/local = {ray / local:.2f}x "
          f"(goal >= 0.9x); identical verdicts: {same}")  # fmt: skip


def bench_embedded(args: argparse.Namespace, work: Path) -> None:
    n = args.embedded_passages
    print(f"== embedded model: {n} passages, 1 worker x {args.cpus:g} CPUs vs 2 workers x {args.cpus / 2:g}")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("  skipped: the embedded backend is not installed (pip install 'judge[local]')")
        return
    inp = work / "embedded.jsonl"
    make_dataset(inp, n, per_query=4)
    results = {}
    for workers in (1, 2):
        executor = RayExecutor(
            "local:", workers=workers, cpus_per_worker=args.cpus / workers, concurrency=workers
        )
        out = work / f"embedded-{workers}.jsonl"

        async def go(executor: RayExecutor = executor, out: Path = out, workers: int = workers) -> float:
            try:
                await executor.start()
                # Load each actor's model before timing (one passage per actor).
                warm = work / f"warm-{workers}.jsonl"
                make_dataset(warm, workers, per_query=1)
                await score(warm, work / f"warm-out-{workers}.jsonl", "local:", None, workers, executor,
                            work / f"warm-cache-{workers}.sqlite")  # fmt: skip
                started = time.perf_counter()
                await score(inp, out, "local:", None, workers, executor, work / f"emb-cache-{workers}.sqlite")
                return time.perf_counter() - started
            finally:
                await executor.aclose()

        wall = asyncio.run(go())
        results[workers] = n / wall
        print(f"  {workers} worker(s): {wall:6.1f} s, {n / wall:.3f} passages/s")
    same = verdicts_of(work / "embedded-1.jsonl") == verdicts_of(work / "embedded-2.jsonl")
    print(f"  2 workers / 1 worker = {results[2] / results[1]:.2f}x; identical verdicts: {same}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--latency-ms", type=float, default=200.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cpus", type=float, default=float(os.cpu_count() or 2))
    p.add_argument("--embedded-passages", type=int, default=12)
    args = p.parse_args()
    import ray

    ray.init(num_cpus=int(args.cpus), include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        with tempfile.TemporaryDirectory(prefix="bench_ray_") as tmp:
            work = Path(tmp)
            if args.passages > 0:
                bench_sim(args, work)
            if args.embedded_passages > 0:
                bench_embedded(args, work)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
