#!/usr/bin/env python
"""The Ray engine on a cluster of network-namespace hosts, side by side in one run.

Uses the multi-host fixture of the tests (``tests/_netns_cluster.py``: head on host 1, worker
hosts 2 and 3 with 1 CPU each, the simulated LLM on host 4; needs root and ``ip``). The same
``--passages`` job (``judge score --engine ray --workers 2 --worker-cpus 0.5``, a fresh cache
each time) is run:

1. on **1 worker host** (only host 2 has joined: both actors there);
2. on **2 worker hosts** (host 3 joined: one actor each), undisturbed;
3. on 2 worker hosts, **host 2 lost** (``kill -9`` of everything in its namespace) once
   ``--kill-at`` requests have reached the LLM.

Printed for each: wall time, passages/s, requests per passage (counted by the LLM), and for
the host-loss run the ratio of its wall time to the undisturbed run's. The LLM's latency
dominates on a 2-core machine: the point is correctness and the cost of crossing hosts and
of losing one, not speed-up. Run as root: ``python scripts/bench_ray_cluster.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _netns_cluster import BIN, NetnsCluster, can_make_namespaces  # noqa: E402


def make_dataset(path: Path, n_passages: int, per_query: int = 10) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(-(-n_passages // per_query)):
            n = min(per_query, n_passages - i * per_query)
            ctx = [f"查询 {i} 的段落 {j} <rel={(i * 7 + j) % 4}>" for j in range(n)]
            fh.write(json.dumps({"id": f"q{i}", "query": f"问题 {i}", "retrieval_context": ctx}) + "\n")


def run_job(
    cluster: NetnsCluster, inp: Path, tag: str, args: argparse.Namespace, kill_at: int | None = None
) -> dict[str, float]:
    work = cluster.workdir
    out, cache = work / f"{tag}.jsonl", work / f"{tag}.sqlite"
    argv = [
        str(BIN / "judge"), "score", str(inp), "-o", str(out), "--cache", str(cache),
        "--backend", "openai:sim-judge", "--base-url", cluster.sim_url + "/v1",
        "--concurrency", str(args.concurrency), "--quiet",
        "--engine", "ray", "--ray-address", cluster.head, "--workers", "2", "--worker-cpus", "0.5",
    ]  # fmt: skip
    before = cluster.requests_logged()
    started = time.perf_counter()
    proc = cluster.start(f"client-{tag}@1", 1, argv)
    if kill_at is not None:
        while cluster.requests_logged() < before + kill_at and proc.poll() is None:
            time.sleep(0.05)
        cluster.kill_host(2)
    rc = proc.wait(timeout=1800)
    wall = time.perf_counter() - started
    cluster.procs.pop(f"client-{tag}@1", None)
    if rc != 0:
        raise SystemExit(f"{tag}: judge score failed (rc={rc}): see {work}/client-{tag}@1.log")
    requests = cluster.requests_logged() - before
    summary = json.loads((work / f"{tag}.summary.json").read_text())
    nodes = {ip: n["passages"] for ip, n in summary["this_run"]["ray"]["nodes"].items()}
    row = {
        "wall_s": wall,
        "passages_per_s": args.passages / wall,
        "requests_per_passage": requests / args.passages,
    }
    print(
        f"  {tag:22s} {wall:7.2f} s  {row['passages_per_s']:7.1f} passages/s  "
        f"{row['requests_per_passage']:.3f} requests/passage  judged per node {nodes}",
        flush=True,
    )
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--passages", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--latency-ms", type=float, default=100.0)
    p.add_argument("--kill-at", type=int, default=300, help="requests seen before host 2 is lost")
    args = p.parse_args()
    why = can_make_namespaces()
    if why:
        print(f"skipped: {why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_ray_cluster_") as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(
            {
                "PYTHONPATH": str(ROOT),
                "RAY_USAGE_STATS_ENABLED": "0",
                "OPENAI_API_KEY": "sk-bench-not-a-real-key",
                "JUDGE_HOME": str(work / "home"),
            }
        )
        cluster = NetnsCluster(work, env=env)
        try:
            cluster.make_network()
            cluster.start_sim(latency_ms=args.latency_ms, jitter_ms=args.latency_ms / 10, capacity=100_000)
            inp = work / "data.jsonl"
            make_dataset(inp, args.passages)
            print(
                f"== {args.passages} passages, simulated LLM {args.latency_ms:g} ms, concurrency "
                f"{args.concurrency}, 2 actors x 0.5 CPU"
            )
            cluster.start_ray((1, 2))
            one = run_job(cluster, inp, "1 worker host", args)
            cluster.start_ray((3,))
            two = run_job(cluster, inp, "2 worker hosts", args)
            lost = run_job(cluster, inp, "2 hosts, host 2 lost", args, kill_at=args.kill_at)
            print(
                f"  2 hosts / 1 host: {two['passages_per_s'] / one['passages_per_s']:.2f}x passages/s; "
                f"host lost / undisturbed: {lost['wall_s'] / two['wall_s']:.2f}x wall time, "
                f"{lost['requests_per_passage']:.3f} vs {two['requests_per_passage']:.3f} requests/passage"
            )
        finally:
            cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
