#!/usr/bin/env python
"""Pooling benchmark: ``judge compare-systems`` beside two separate ``judge score`` runs.

Two systems answer the same N queries with P passages each; a share of each list (default
half) is the same passages in both, the rest each system's own. On one simulated
OpenAI-compatible server (``scripts/sim_llm_server.py``: latency with jitter, a concurrency
capacity) it runs, each from a fresh verdict cache:

1. separate: ``judge score A`` then ``judge score B`` (each team scores its own list);
2. pooled: ``judge compare-systems A=... B=...`` (the union judged once, then both scored
   against it);
3. separate with one shared cache: the second ``judge score`` finds the overlap cached, so
   it asks as little as the pool; what it cannot give is a fair comparison (each list's AP
   still divides by what that list found).

Printed: LLM requests the server answered, judging wall time (the scorer's own clock) and
process wall time per run, and the pooled / separate ratios.

Then adaptive judging, side by side on the same server (``--adaptive-queries`` queries, 10
passages per system, half shared): for a *clear* case (B's own passages mostly relevant,
A's mostly not) and an *unclear* one (both alike), ``judge compare-systems`` judging the full
pool and ``judge compare-systems --until-decided``, each from a fresh cache. Printed:
requests, process wall time, the fraction of the full pool's requests, and whether every
decided comparison has the full pool's decision (sign of the difference and Holm p < 0.05).

Run: ``python scripts/bench_pooling.py`` (a few minutes; ``--queries 300`` for a longer one,
``--skip-adaptive`` for the pooling part only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Sibling scripts: scripts/ is sys.path[0] when a script is run.
import sim_llm_server

ROOT = Path(__file__).resolve().parents[1]


def make_systems(work: Path, n_queries: int, n_passages: int, overlap: float) -> tuple[Path, Path, int]:
    """Two datasets; per query ``round(overlap * P)`` shared passages (at interleaved ranks)
    and the rest each system's own. Returns their paths and the unique pair count."""
    shared = round(overlap * n_passages)
    rows_a, rows_b = [], []
    unique = 0
    for i in range(n_queries):
        common = [
            {"id": f"q{i}-c{j}", "text": f"查询 {i} 的共同段落 {j} <rel={(i + j) % 4}>"}
            for j in range(shared)
        ]
        own_a = [
            {"id": f"q{i}-a{j}", "text": f"查询 {i} 的 A 段落 {j} <rel={(i * 3 + j) % 4}>"}
            for j in range(n_passages - shared)
        ]
        own_b = [
            {"id": f"q{i}-b{j}", "text": f"查询 {i} 的 B 段落 {j} <rel={(i * 5 + j) % 4}>"}
            for j in range(n_passages - shared)
        ]
        query = f"问题 {i}：光合作用需要哪些条件"
        rows_a.append({"id": f"q{i}", "query": query, "retrieval_context": _interleave(common, own_a)})
        rows_b.append({"id": f"q{i}", "query": query, "retrieval_context": _interleave(own_b, common)})
        unique += shared + 2 * (n_passages - shared)
    paths = []
    for name, rows in (("A", rows_a), ("B", rows_b)):
        path = work / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1], unique


def make_adaptive_systems(work: Path, n_queries: int, case: str) -> tuple[Path, Path]:
    """Two systems, 10 passages per query, 5 shared (at interleaved ranks). ``clear``: A's own
    passages are relevant 2 times in 10, B's 8 in 10; ``unclear``: both 5 in 10."""
    rate_a, rate_b = (2, 8) if case == "clear" else (5, 5)
    rows_a, rows_b = [], []
    for i in range(n_queries):
        common = [
            {"id": f"q{i}-c{j}", "text": f"查询 {i} 的共同段落 {j} <rel={3 * ((i + j) % 2)}>"}
            for j in range(5)
        ]
        own_a = [
            {
                "id": f"q{i}-a{j}",
                "text": f"查询 {i} 的 A 段落 {j} <rel={3 if (i * 7 + j) % 10 < rate_a else 0}>",
            }
            for j in range(5)
        ]
        own_b = [
            {
                "id": f"q{i}-b{j}",
                "text": f"查询 {i} 的 B 段落 {j} <rel={3 if (i * 3 + j) % 10 < rate_b else 0}>",
            }
            for j in range(5)
        ]
        query = f"问题 {i}：{case}"
        rows_a.append({"id": f"q{i}", "query": query, "retrieval_context": _interleave(own_a, common)})
        rows_b.append({"id": f"q{i}", "query": query, "retrieval_context": _interleave(own_b, common)})
    paths = []
    for name, rows in (("A", rows_a), ("B", rows_b)):
        path = work / f"{case}-{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def _decisions(report: dict[str, Any]) -> list[tuple[str, int, bool]]:
    out = []
    for c in report["comparisons"]:
        diff = float(c["diff"])
        sign = 0 if abs(diff) <= 1e-12 else (1 if diff > 0 else -1)
        out.append((c["measure"], sign, c["p_holm"] is not None and c["p_holm"] < 0.05))
    return out


def adaptive_side_by_side(work: Path, sim: Any, n_queries: int, c: int) -> bool:
    """Full pool vs --until-decided on a clear and an unclear case; True when every decided
    comparison agrees with the full pool and the clear case used at most 40% of its requests."""
    print(
        f"\nadaptive judging: 2 systems x {n_queries} queries x 10 passages (5 shared), "
        "full pool vs --until-decided"
    )
    print(
        f"\n  {'case':<8} {'run':<22} {'LLM requests':>13} {'process wall':>13} {'of full':>8} "
        f"{'decided':>8} {'same decisions':>15}"
    )
    ok = True
    for case in ("clear", "unclear"):
        a, b = make_adaptive_systems(work, n_queries, case)
        rows = {}
        for label, extra in (("full pool", []), ("--until-decided", ["--until-decided"])):
            before = sim.stats()["total"]
            out = work / f"{case}-{label.strip('-')}"
            cache = work / f"{case}-{label.strip('-')}.sqlite"
            stdout, wall = _judge(
                [
                    "compare-systems",
                    f"A={a}",
                    f"B={b}",
                    "-o",
                    str(out),
                    "--json",
                    "--cache",
                    str(cache),
                    *extra,
                ],
                sim.base_url,
                work,
                c,
            )
            rows[label] = (sim.stats()["total"] - before, wall, json.loads(stdout))
        full_calls, full_wall, full = rows["full pool"]
        calls, wall, adaptive = rows["--until-decided"]
        truth = _decisions(full)
        decided = [x["adaptive"] for x in adaptive["comparisons"]]
        same = all(
            (d["sign"], d["significant"]) == (t[1], t[2])
            for d, t in zip(decided, truth, strict=True)
            if d["decided"]
        )
        n_decided = sum(d["decided"] for d in decided)
        print(f"  {case:<8} {'full pool':<22} {full_calls:>13} {full_wall:>12.2f}s {'':>8} {'':>8} {'':>15}")
        print(
            f"  {case:<8} {'--until-decided':<22} {calls:>13} {wall:>12.2f}s {calls / full_calls:>8.0%} "
            f"{n_decided:>4}/{len(decided):<3} {same!s:>15}"
        )
        undecided = [
            f"{d_c['measure']}"
            for d_c, d in zip(adaptive["comparisons"], decided, strict=True)
            if not d["decided"]
        ]
        if undecided:
            print(f"  {'':<8} undecided: {', '.join(undecided)} (reported as 'undecided')")
        ok = ok and same and (case != "clear" or (n_decided == len(decided) and calls <= 0.4 * full_calls))
    return ok


def _interleave(first: list[dict[str, str]], second: list[dict[str, str]]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for i in range(max(len(first), len(second))):
        out += first[i : i + 1] + second[i : i + 1]
    return out


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "JUDGE_HOME": str(home),
            "OPENAI_API_KEY": "sk-sim-not-a-real-key",
            "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        }
    )
    env.pop("DASHSCOPE_API_KEY", None)
    return env


def _judge(args: list[str], base_url: str, home: Path, concurrency: int) -> tuple[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "judge",
        *args,
        "--backend",
        "openai:simulated-judge",
        "--base-url",
        base_url,
        "--concurrency",
        str(concurrency),
        "--quiet",
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=_env(home), cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"judge {args[0]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout, wall


def _score(data: Path, out: Path, cache: Path, sim: Any, home: Path, c: int) -> tuple[int, float, float]:
    before = sim.stats()["total"]
    stdout, wall = _judge(["score", str(data), "-o", str(out), "--cache", str(cache)], sim.base_url, home, c)
    summary: dict[str, Any] = json.loads(stdout)
    return sim.stats()["total"] - before, float(summary["this_run"]["wall_time_s"]), wall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--queries", type=int, default=150)
    p.add_argument("--passages", type=int, default=10)
    p.add_argument("--overlap", type=float, default=0.5, help="share of each list both systems return")
    p.add_argument("--latency-ms", type=float, default=200.0)
    p.add_argument("--jitter-ms", type=float, default=50.0)
    p.add_argument("--capacity", type=int, default=32)
    p.add_argument("--adaptive-queries", type=int, default=40, help="queries of the adaptive side by side")
    p.add_argument("--skip-adaptive", action="store_true", help="only the pooling part")
    a = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench_pooling_") as tmp:
        work = Path(tmp)
        sys_a, sys_b, unique = make_systems(work, a.queries, a.passages, a.overlap)
        pairs = 2 * a.queries * a.passages
        print(
            f"bench_pooling: 2 systems x {a.queries} queries x {a.passages} passages = {pairs} pairs, "
            f"{a.overlap:.0%} of each list in both -> {unique} unique; "
            f"server {a.latency_ms:g}±{a.jitter_ms:g} ms, capacity {a.capacity}"
        )
        settings = {"latency_ms": a.latency_ms, "jitter_ms": a.jitter_ms, "capacity": a.capacity}
        c = a.capacity
        with sim_llm_server.SimProcess(None, **settings) as sim:
            # 1. Separate runs, each with its own fresh cache.
            calls_a, judge_a, proc_a = _score(
                sys_a, work / "A.judged.jsonl", work / "ca.sqlite", sim, work, c
            )
            calls_b, judge_b, proc_b = _score(
                sys_b, work / "B.judged.jsonl", work / "cb.sqlite", sim, work, c
            )
            separate = (calls_a + calls_b, judge_a + judge_b, proc_a + proc_b)

            # 2. Pooled.
            before = sim.stats()["total"]
            report_dir = work / "report"
            stdout, proc_pool = _judge(
                [
                    "compare-systems",
                    f"A={sys_a}",
                    f"B={sys_b}",
                    "-o",
                    str(report_dir),
                    "--json",
                    "--cache",
                    str(work / "cp.sqlite"),
                ],
                sim.base_url,
                work,
                c,
            )
            report = json.loads(stdout)
            pool_summary = json.loads((report_dir / "pool.judged.summary.json").read_text(encoding="utf-8"))
            pooled = (
                sim.stats()["total"] - before,
                float(pool_summary["this_run"]["wall_time_s"]),
                proc_pool,
            )

            # 3. Separate runs sharing one cache.
            shared_cache = work / "shared.sqlite"
            calls_a2, judge_a2, proc_a2 = _score(sys_a, work / "A2.judged.jsonl", shared_cache, sim, work, c)
            calls_b2, judge_b2, proc_b2 = _score(sys_b, work / "B2.judged.jsonl", shared_cache, sim, work, c)
            shared = (calls_a2 + calls_b2, judge_a2 + judge_b2, proc_a2 + proc_b2)
            adaptive_ok = a.skip_adaptive or adaptive_side_by_side(work, sim, a.adaptive_queries, c)

        print(f"\n  {'':<40} {'LLM requests':>13} {'judging wall':>13} {'process wall':>13}")
        for label, row in (
            ("two judge score runs (own caches)", separate),
            ("judge compare-systems (pooled)", pooled),
            ("two judge score runs (shared cache)", shared),
        ):
            print(f"  {label:<40} {row[0]:>13} {row[1]:>12.2f}s {row[2]:>12.2f}s")
        print(
            f"\n  pooled / separate: requests {pooled[0] / separate[0]:.3f} "
            f"(unique/pairs = {unique / pairs:.3f}), judging wall {pooled[1] / separate[1]:.3f}, "
            f"process wall {pooled[2] / separate[2]:.3f}"
        )
        ma, mb = (report["systems"][n]["measures"] for n in ("A", "B"))
        print(
            f"  report: pool.calls {report['pool']['calls']}, calls_saved {report['pool']['calls_saved']}, "
            f"map A {ma['map']:.4f} / B {mb['map']:.4f} (isolated {ma['map_isolated']:.4f} / "
            f"{mb['map_isolated']:.4f})"
        )
        ok = pooled[0] == unique and separate[0] == pairs
        print(f"  one request per unique pair (pooled) and per pair (separate): {ok}")
        if not a.skip_adaptive:
            print(
                f"  adaptive: same decisions, clear case decided with <= 40% of the requests: {adaptive_ok}"
            )
    return 0 if ok and adaptive_ok else 1


if __name__ == "__main__":
    sys.exit(main())
