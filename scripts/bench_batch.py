#!/usr/bin/env python
"""Batch-scoring benchmark: ``judge score`` beside ``deepeval.evaluate`` on one simulated server.

Both judge the same N queries x P passages (default 500 x 6) against the same simulated
OpenAI-compatible server (``scripts/sim_llm_server.py``: latency with jitter, a concurrency
capacity beyond which it answers 429 + Retry-After). deepeval runs its
``ContextualRelevancyMetric`` with ``GPTModel`` pointed at the server, through
``deepeval.evaluate`` with its default async settings.

Printed per system: wall time, passages/s, the fraction of the server's ceiling
(capacity / latency passages per second) reached, requests per passage, the server's 429s,
and with faults on (5% HTTP 500, 5% non-JSON replies, 1% hung requests by default): queries
in the output, passages judged / explicitly unjudged / failed, and what
``judge score --retry-unjudged`` leaves once the faults stop.

Run: ``python scripts/bench_batch.py`` (about 3-5 minutes; ``--skip-deepeval`` for judge alone,
``--queries 100`` for a quick look). ``judge score`` runs as a subprocess (the CLI a user
runs); its rate is taken from the scorer's own wall time (``this_run.wall_time_s``, without
interpreter start-up) and the process time is printed too. deepeval runs in a child
process of this script (so its global state and imports do not touch the judge run).
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


TOPICS = ["感冒用药", "高铁时刻", "光合作用", "个人所得税", "Python 异步", "咖啡因", "地震预警", "量子计算"]


def make_dataset(path: Path, n_queries: int, n_passages: int, tag: str = "") -> list[dict[str, Any]]:
    """Synthetic queries whose passages carry their grade (``<rel=g>``) for the simulated
    server; a ``tag`` makes every passage new to the verdict cache (bench_client_cpu)."""
    rows = []
    suffix = f"，{tag}" if tag else ""
    for i in range(n_queries):
        topic = TOPICS[i % len(TOPICS)]
        ctx = []
        for j in range(n_passages):
            grade = (i * 5 + j * 3) % 4
            ctx.append(
                {"id": f"q{i}-p{j}", "text": f"关于{topic}的第 {j} 段资料（查询 {i}{suffix}）。<rel={grade}>"}
            )
        rows.append({"id": f"q{i}", "query": f"{topic}相关问题 {i}", "retrieval_context": ctx})
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return rows


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "JUDGE_HOME": str(home),
            "OPENAI_API_KEY": "sk-sim-not-a-real-key",
            "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
            "DEEPEVAL_TELEMETRY_OPT_OUT": "1",
            "DEEPEVAL_FILE_SYSTEM": "READ_ONLY",
            "DEEPEVAL_DISABLE_DOTENV": "1",
        }
    )
    env.pop("DASHSCOPE_API_KEY", None)
    return env


def run_judge(args: list[str], base_url: str, home: Path) -> tuple[dict[str, Any], float]:
    cmd = [
        sys.executable,
        "-m",
        "judge",
        "score",
        *args,
        "--backend",
        "openai:simulated-judge",
        "--base-url",
        base_url,
        "--quiet",
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=_env(home), cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"judge score exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout), wall


# --- deepeval side (runs in a child process) ---------------------------------------------


def deepeval_worker(data: Path, base_url: str, result: Path, timeout_s: float) -> None:
    import judge._env  # noqa: F401 - deepeval opt-outs before deepeval is imported

    if timeout_s > 0:
        # Optional: deepeval's per-attempt timeout. Its per-task budget is derived from it,
        # and test cases still queued when that budget runs out are dropped from the results.
        os.environ.setdefault("DEEPEVAL_PER_ATTEMPT_TIMEOUT_SECONDS_OVERRIDE", str(timeout_s))
    from deepeval.evaluate.configs import AsyncConfig, DisplayConfig, ErrorConfig
    from deepeval.evaluate.evaluate import evaluate
    from deepeval.metrics import BaseMetric, ContextualRelevancyMetric
    from deepeval.models import GPTModel
    from deepeval.test_case import LLMTestCase

    rows = [json.loads(x) for x in data.read_text(encoding="utf-8").splitlines()]
    model = GPTModel(model="gpt-4o-mini", base_url=base_url, api_key="sk-sim-not-a-real-key")
    cases = [
        LLMTestCase(
            input=r["query"],
            actual_output="(not used by contextual relevancy)",
            retrieval_context=[p["text"] for p in r["retrieval_context"]],
        )
        for r in rows
    ]
    metric = ContextualRelevancyMetric(model=model, threshold=0.5, include_reason=True, async_mode=True)
    metrics: list[BaseMetric] = [metric]
    t0 = time.monotonic()
    crashed: str | None = None
    scored = failed = results = 0
    try:
        out = evaluate(
            test_cases=cases,
            metrics=metrics,
            async_config=AsyncConfig(run_async=True),
            display_config=DisplayConfig(show_indicator=False, print_results=False, verbose_mode=False),
            error_config=ErrorConfig(ignore_errors=True),
        )
        results = len(out.test_results)
        for tr in out.test_results:
            for md in tr.metrics_data or []:
                if md.error or md.score is None:
                    failed += 1
                else:
                    scored += 1
    except Exception as exc:  # report, do not hide: the bench prints it
        crashed = f"{type(exc).__name__}: {exc}"[:300]
    wall = time.monotonic() - t0
    result.write_text(
        json.dumps(
            {"wall_s": wall, "results": results, "scored": scored, "failed": failed, "crashed": crashed}
        ),
        encoding="utf-8",
    )


def run_deepeval(data: Path, base_url: str, home: Path, timeout_s: float, limit_s: float) -> dict[str, Any]:
    result = home / f"deepeval-{time.monotonic_ns()}.json"
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "deepeval",
        "--data",
        str(data),
        "--base-url",
        base_url,
        "--result",
        str(result),
        "--timeout",
        str(timeout_s),
    ]
    try:
        proc = subprocess.run(cmd, env=_env(home), cwd=home, capture_output=True, text=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return {"wall_s": limit_s, "scored": 0, "failed": 0, "crashed": f"no result within {limit_s:g} s"}
    if not result.exists():
        return {
            "wall_s": 0.0,
            "scored": 0,
            "failed": 0,
            "crashed": f"exit {proc.returncode}: {proc.stderr[-500:]}",
        }
    data_out: dict[str, Any] = json.loads(result.read_text(encoding="utf-8"))
    return data_out


# --- orchestration -----------------------------------------------------------------------


def _line(label: str, value: str) -> None:
    print(f"  {label:<34} {value}")


def _util(st: dict[str, Any]) -> None:
    _line(
        "server utilization",
        f"{st['utilization']:.1%} (mean {st['mean_inflight']:.1f} in flight; "
        f"measured service time {st['mean_service_s'] * 1000:.0f} ms)",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--passages", type=int, default=6)
    p.add_argument("--latency-ms", type=float, default=500.0)
    p.add_argument("--jitter-ms", type=float, default=100.0)
    p.add_argument("--capacity", type=int, default=64)
    p.add_argument("--error-rate", type=float, default=0.05)
    p.add_argument("--garbage-rate", type=float, default=0.05)
    p.add_argument("--hang-rate", type=float, default=0.01)
    p.add_argument("--timeout", type=float, default=5.0, help="judge score's per-call timeout (s)")
    p.add_argument(
        "--deepeval-timeout",
        type=float,
        default=0.0,
        help="deepeval per-attempt timeout override (s); 0 = deepeval's defaults (the default)",
    )
    p.add_argument("--skip-deepeval", action="store_true")
    p.add_argument("--skip-faults", action="store_true")
    p.add_argument("--worker", choices=("deepeval",), help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--base-url", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker == "deepeval":
        deepeval_worker(Path(a.data), a.base_url, Path(a.result), a.timeout)
        return 0

    ceiling = a.capacity / (a.latency_ms / 1000.0)
    n_pass = a.queries * a.passages
    print(
        f"bench_batch: {a.queries} queries x {a.passages} passages = {n_pass} passages; server latency "
        f"{a.latency_ms:g}±{a.jitter_ms:g} ms, capacity {a.capacity} -> ceiling {ceiling:.1f} requests/s"
    )
    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp:
        work = Path(tmp)
        data = work / "bench.jsonl"
        make_dataset(data, a.queries, a.passages)
        settings = {
            "latency_ms": a.latency_ms,
            "jitter_ms": a.jitter_ms,
            "capacity": a.capacity,
            "retry_after_s": 1.0,
        }
        with sim_llm_server.SimProcess(None, **settings) as sim:
            # 1. judge score, no faults.
            sim.reset()
            summary, proc_wall = run_judge(
                [
                    str(data),
                    "-o",
                    str(work / "judge.jsonl"),
                    "--concurrency",
                    str(a.capacity),
                    "--cache",
                    str(work / "c1.sqlite"),
                    "--timeout",
                    str(a.timeout),
                ],
                sim.base_url,
                work,
            )
            st = sim.stats()
            wall = float(summary["this_run"]["wall_time_s"])
            pps = n_pass / wall
            print("\njudge score (no faults)")
            _line("wall time (scoring / process)", f"{wall:.2f} s / {proc_wall:.2f} s")
            _line("passages/s", f"{pps:.1f}")
            _line("fraction of server ceiling", f"{pps / ceiling:.1%}")
            _util(st)
            _line("requests per passage", f"{st['total'] / n_pass:.3f}")
            _line("429 replies / max in flight", f"{st['outcomes'].get('429', 0)} / {st['max_inflight']}")
            _line("queries / unjudged", f"{summary['queries']} / {summary['unjudged']}")
            judge_row = (wall, pps, st["total"] / n_pass)

            de_row = None
            if not a.skip_deepeval:
                sim.reset()
                de = run_deepeval(
                    data, sim.base_url, work, a.deepeval_timeout, limit_s=max(600.0, 20 * n_pass / ceiling)
                )
                st = sim.stats()
                print("\ndeepeval.evaluate + ContextualRelevancyMetric (no faults)")
                if de["wall_s"] > 0:
                    # Only passages of test cases that got a score count as done.
                    de_pps = de["scored"] * a.passages / de["wall_s"]
                    _line("wall time", f"{de['wall_s']:.2f} s")
                    _line("passages/s", f"{de_pps:.1f}")
                    _line("fraction of server ceiling", f"{de_pps / ceiling:.1%}")
                    _util(st)
                    _line("requests per passage", f"{st['total'] / n_pass:.3f}")
                    _line(
                        "429 replies / max in flight",
                        f"{st['outcomes'].get('429', 0)} / {st['max_inflight']}",
                    )
                    _line(
                        "test cases scored / failed / missing",
                        f"{de['scored']} / {de['failed']} / {a.queries - de.get('results', 0)} "
                        f"of {a.queries}",
                    )
                    de_row = (de["wall_s"], de_pps, st["total"] / n_pass)
                if de.get("crashed"):
                    _line("crashed", str(de["crashed"]))

            if not a.skip_faults:
                faults = {
                    "error_rate": a.error_rate,
                    "garbage_rate": a.garbage_rate,
                    "hang_rate": a.hang_rate,
                }
                print(
                    f"\nwith faults: {a.error_rate:.0%} HTTP 500, {a.garbage_rate:.0%} non-JSON, "
                    f"{a.hang_rate:.0%} hung; per-call timeout {a.timeout:g} s"
                )
                sim.reset()
                sim.configure(**faults, seed=11)
                out = work / "judge-faults.jsonl"
                fsum, _ = run_judge(
                    [
                        str(data),
                        "-o",
                        str(out),
                        "--concurrency",
                        str(a.capacity),
                        "--cache",
                        str(work / "c2.sqlite"),
                        "--timeout",
                        str(a.timeout),
                    ],
                    sim.base_url,
                    work,
                )
                st = sim.stats()
                records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
                verdicts = [v for r in records for v in r["verdicts"]]
                explicit = all(v["verdict"] in ("yes", "no") or v.get("error") for v in verdicts)
                print("judge score (faults on)")
                _line(
                    "wall time / passages/s",
                    f"{fsum['this_run']['wall_time_s']:.2f} s / "
                    f"{n_pass / fsum['this_run']['wall_time_s']:.1f}",
                )
                _line("server outcomes", json.dumps(st["outcomes"], sort_keys=True))
                _line("requests per passage", f"{st['total'] / n_pass:.3f}")
                _line(
                    "queries in output",
                    f"{len(records)} of {a.queries} (distinct ids {len({r['id'] for r in records})})",
                )
                _line(
                    "passages judged / unjudged", f"{fsum['judged']} / {fsum['unjudged']} of {len(verdicts)}"
                )
                _line("every unjudged has its error", str(explicit))
                sim.configure(error_rate=0.0, garbage_rate=0.0, hang_rate=0.0)
                sim.reset()
                rsum, _ = run_judge(
                    [
                        "--retry-unjudged",
                        str(out),
                        "--cache",
                        str(work / "c2.sqlite"),
                        "--timeout",
                        str(a.timeout),
                    ],
                    sim.base_url,
                    work,
                )
                st = sim.stats()
                _line(
                    "--retry-unjudged (faults off)",
                    f"asked {st['total']} requests; unjudged now {rsum['unjudged']}, "
                    f"queries {rsum['queries']}",
                )

                if not a.skip_deepeval:
                    sim.reset()
                    sim.configure(**faults, seed=11)
                    de = run_deepeval(
                        data,
                        sim.base_url,
                        work,
                        a.deepeval_timeout,
                        limit_s=max(900.0, 30 * n_pass / ceiling),
                    )
                    st = sim.stats()
                    sim.configure(error_rate=0.0, garbage_rate=0.0, hang_rate=0.0)
                    print("deepeval.evaluate (faults on, ignore_errors=True)")
                    _line("wall time", f"{de['wall_s']:.2f} s")
                    _line("server outcomes", json.dumps(st["outcomes"], sort_keys=True))
                    _line(
                        "test cases scored / failed / missing",
                        f"{de['scored']} / {de['failed']} / {a.queries - de.get('results', 0)} "
                        f"of {a.queries}",
                    )
                    if de.get("crashed"):
                        _line("crashed", str(de["crashed"]))

        print("\nsummary (no faults)")
        print(f"  {'system':<40} {'wall s':>8} {'passages/s':>11} {'of ceiling':>11} {'req/passage':>12}")
        print(
            f"  {'judge score':<40} {judge_row[0]:>8.2f} {judge_row[1]:>11.1f} "
            f"{judge_row[1] / ceiling:>11.1%} {judge_row[2]:>12.3f}"
        )
        if de_row is not None:
            print(
                f"  {'deepeval ContextualRelevancyMetric':<40} {de_row[0]:>8.2f} {de_row[1]:>11.1f} "
                f"{de_row[1] / ceiling:>11.1%} {de_row[2]:>12.3f}"
            )
            print(f"  judge score / deepeval throughput: {judge_row[1] / de_row[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
