#!/usr/bin/env python
"""Client CPU per judged passage: the hot path of ``judge score`` before and after, side by side.

What is measured: the CPU time (``time.process_time()``: user + system of the scoring
process only; the simulated server is another process) that :func:`judge.batch.score_dataset`
spends per passage, with the same settings as ``judge score`` (OpenAI-compatible backend
wrapped in ``ResilientBackend``, SQLite verdict cache, fsync'd output, 64 calls in flight),
against ``scripts/sim_llm_server.py`` with a 100 ms latency (``bench_batch.py``'s setting is
500 ms; the shorter wait keeps a round to a few seconds and gives the same CPU per passage).
CPU time, unlike wall-clock throughput, is barely moved by other processes on a loaded
machine; a round whose judged passages or server requests differ from the expected count
stops the script.

"old" and "new" are two child processes with the same dataset and server. "new" imports
this checkout. "old" imports ``judge/`` and ``prompts/`` as they were at ``--baseline-ref``
(``git archive``; nothing in the repository changes). A whole old tree, not this checkout
with the hot-path files swapped back: later changes elsewhere (e.g. templates and judging
config read by the batch runner) made such a mix fail to import. The rounds alternate old/new and the
median per-passage CPU of each side is reported, with the ratio old/new, and the median
throughput (passages per wall-clock second of the scoring run) with the ratio new/old.

Run: ``python scripts/bench_client_cpu.py`` (about a minute; ``--queries``/``--rounds`` to
scale, ``--profile`` to print the new side's top functions by cumulative time).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

# Sibling scripts: scripts/ is sys.path[0] when a script is run.
import sim_llm_server
from bench_batch import make_dataset

ROOT = Path(__file__).resolve().parents[1]
BASELINE_REF = "49b44bf"  # the last commit before the client CPU work
WARM_QUERIES = 8  # a warm-up run before the measured one (imports, pool, sqlite file)

# --- the worker: runs in a child process whose sys.path starts with the tree under test --


async def _score(data: Path, out: Path, cache: Path, base_url: str, concurrency: int) -> dict[str, Any]:
    from judge.backends import OpenAIBackend, ResilientBackend
    from judge.batch import BatchOptions, score_dataset
    from judge.judging import JudgeConfig
    from judge.store import SQLiteVerdictStore

    inner = OpenAIBackend("simulated-judge", base_url=base_url, api_key="sk-sim-not-a-real-key")
    try:  # the one factory and call policy (the baseline tree predates them)
        from judge.backends import CallPolicy, make_backend

        backend = make_backend(inner, policy=CallPolicy(concurrency=concurrency, timeout_s=30.0))
    except ImportError:
        backend = ResilientBackend(inner, concurrency=concurrency, timeout_s=30.0)
    store = SQLiteVerdictStore(cache)
    try:
        outcome = await score_dataset(
            data,
            out,
            backend,
            JudgeConfig(),
            store=store,
            options=BatchOptions(concurrency=concurrency, progress="quiet"),
        )
    finally:
        await store.aclose()
        await backend.aclose()
    return outcome.summary


def worker(args: argparse.Namespace) -> None:
    work = Path(args.work)
    # Warm-up: imports, template load, connection pool, sqlite file.
    run = f"{args.label}-{args.round}{'-profile' if args.profile else ''}"
    warm = work / f"warm-{run}.jsonl"
    make_dataset(warm, WARM_QUERIES, args.passages, f"warm-{run}")
    asyncio.run(_score(warm, work / f"warm-{run}.out.jsonl", work / "cache.sqlite", args.base_url, 64))
    data = work / f"data-{run}.jsonl"
    make_dataset(data, args.queries, args.passages, run)
    out = work / f"out-{run}.jsonl"
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)  # CPU, not wall time on a busy machine
        profiler.enable()
    before = set(sys.modules)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    summary = asyncio.run(_score(data, out, work / "cache.sqlite", args.base_url, args.concurrency))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    if profiler is not None:
        import pstats

        late = sorted(set(sys.modules) - before)
        print(f"modules imported during the measured run: {len(late)} {late[:20]}", file=sys.stderr)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    passages = int(summary["this_run"]["passages"])
    result = {
        "cpu_s": cpu,
        "wall_s": wall,
        "passages": passages,
        "judged": int(summary["judged"]),
        "calls": int(summary["this_run"]["backend"].get("calls", 0)),
    }
    print(json.dumps(result))


# --- orchestration -------------------------------------------------------------------------


def baseline_tree(dest: Path, ref: str) -> Path:
    """``judge/`` and ``prompts/`` as they were at ``ref``, extracted under ``dest``."""
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "judge", "prompts"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(
            f"bench_client_cpu: cannot read {ref} (git archive: {archive.stderr.decode().strip()}); "
            "pass --baseline-ref"
        )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def run_worker(
    label: str, tree: Path, work: Path, base_url: str, a: argparse.Namespace, rnd: int, profile: bool
) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env["JUDGE_HOME"] = str(work)
    env.pop("OPENAI_BASE_URL", None)
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--label",
        label,
        "--round",
        str(rnd),
        "--work",
        str(work),
        "--base-url",
        base_url,
        "--queries",
        str(a.queries),
        "--passages",
        str(a.passages),
        "--concurrency",
        str(a.concurrency),
    ]
    if profile:
        cmd.append("--profile")
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench_client_cpu: {label} worker failed:\n{proc.stderr[-3000:]}")
    if profile:
        print(proc.stderr)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--queries", type=int, default=200, help="queries per round (x --passages)")
    p.add_argument("--passages", type=int, default=6)
    p.add_argument("--rounds", type=int, default=3, help="old/new pairs; the median is reported")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--latency-ms", type=float, default=100.0, help="simulated server latency")
    p.add_argument("--baseline-ref", default=BASELINE_REF, help="git ref of the 'old' hot-path files")
    p.add_argument("--profile", action="store_true", help="print a cProfile of one extra new round")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--label", help=argparse.SUPPRESS)
    p.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--base-url", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a)
        return 0

    n = a.queries * a.passages
    print(
        f"bench_client_cpu: {a.queries} queries x {a.passages} passages = {n} passages per run, "
        f"{a.rounds} round(s); server latency {a.latency_ms:g} ms; baseline: judge/ at {a.baseline_ref}"
    )
    with tempfile.TemporaryDirectory(prefix="bench_client_cpu_") as tmp:
        work = Path(tmp)
        old_tree = baseline_tree(work / "old", a.baseline_ref)
        settings = {"latency_ms": a.latency_ms, "jitter_ms": 0.0, "capacity": 100_000}
        per: dict[str, list[float]] = {"old": [], "new": []}
        rate: dict[str, list[float]] = {"old": [], "new": []}
        with sim_llm_server.SimProcess(None, **settings) as sim:
            for rnd in range(a.rounds):
                for label, tree in (("old", old_tree), ("new", ROOT)):
                    sim.reset()
                    r = run_worker(label, tree, work, sim.base_url, a, rnd, profile=False)
                    st = sim.stats()
                    if r["judged"] != n or st["total"] != n + WARM_QUERIES * a.passages:
                        raise SystemExit(
                            f"bench_client_cpu: {label} judged {r['judged']} of {n} with "
                            f"{st['total']} requests: not comparable"
                        )
                    us = r["cpu_s"] / n * 1e6
                    per[label].append(us)
                    rate[label].append(n / r["wall_s"])
                    print(
                        f"  round {rnd + 1} {label}: {us:7.0f} us CPU/passage  "
                        f"(cpu {r['cpu_s']:.2f} s, wall {r['wall_s']:.2f} s, {r['calls']} calls)"
                    )
            if a.profile:
                run_worker("new", ROOT, work, sim.base_url, a, a.rounds, profile=True)
    old, new = statistics.median(per["old"]), statistics.median(per["new"])
    print(f"\nmedian CPU per passage: old {old:.0f} us, new {new:.0f} us")
    print(f"ratio old/new: {old / new:.2f}x")
    old_rate, new_rate = statistics.median(rate["old"]), statistics.median(rate["new"])
    print(f"median throughput: old {old_rate:.0f} passages/s, new {new_rate:.0f} passages/s (wall)")
    print(f"throughput ratio new/old: {new_rate / old_rate:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
