#!/usr/bin/env python
"""Two embedded judges on one machine against one alone, in one run.

    nice -n 10 python scripts/bench_local_share.py --pairs 6 --json out/bench_share.json

Each judge is a process of its own (``--worker``) that loads the embedded model, judges one
warm-up pair, waits for the start signal and then judges ``--pairs`` TREC DL 2019 pairs one
at a time in probability mode (``binary.en.v2``, the English default when docs/benchmarks.md's
figures were measured, pinned so they stay comparable; no reason),
reporting passages/s from the signal to its last verdict. Phases, in this order:

1. ``alone``: one judge;
2. ``two, turns``: two judges started together, taking machine-wide turns
   (:class:`~judge.backends._model_turns.MachineTurns`, the default);
3. ``two, no turns``: two judges started together with ``machine_turns=False`` (each runs
   llama.cpp on every core whenever it likes: the old behaviour);
4. ``alone`` again (the machine's load drifts: "alone" is the mean of 1 and 4).

Printed: passages/s of every judge, each as a share of alone (goal: >= 40% with turns), and
the load average before and after. The machine's other load counts: say it beside the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from _dl19 import dl19_pairs  # noqa: E402


async def _worker(args: argparse.Namespace) -> dict[str, Any]:
    from judge.backends import ensure_resilient
    from judge.backends._local import LocalBackend
    from judge.judging import JudgeConfig, Passage, judge_passage

    pairs = dl19_pairs(args.pairs + 1, args.per_query)
    local = LocalBackend(machine_turns=args.turns, reason_batch=1)
    backend = ensure_resilient(local)
    # Pinned: the documented figures were measured on binary.en.v2 (the default then).
    config = JudgeConfig(language="en", probability=True, explain=False, template="binary.en.v2")
    _, query, text, _ = pairs[-1]
    await judge_passage(backend, query, Passage(text=text), 0, config)  # load + warm up
    print("ready", flush=True)
    start = Path(args.start)
    while not start.exists():  # the parent starts every judge of a phase at once
        await asyncio.sleep(0.02)
    began, cpu = time.perf_counter(), time.process_time()
    verdicts = []
    for index, (_, query, text, _) in enumerate(pairs[: args.pairs]):
        verdict = await judge_passage(backend, query, Passage(text=text), index, config)
        verdicts.append(verdict.p_yes)
    seconds = time.perf_counter() - began
    await backend.aclose()
    return {
        "seconds": seconds,
        "cpu_seconds": time.process_time() - cpu,
        "passages": len(verdicts),
        "passages_per_s": len(verdicts) / seconds,
        "p_yes": verdicts,
    }


def _phase(args: argparse.Namespace, judges: int, turns: bool) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        start = Path(folder) / "start"
        outs = [Path(folder) / f"out{i}.json" for i in range(judges)]
        command = [sys.executable, __file__, "--worker", "--start", str(start)]
        command += ["--pairs", str(args.pairs), "--per-query", str(args.per_query)]
        command += [] if turns else ["--no-turns"]
        procs = [
            subprocess.Popen([*command, "--out", str(out)], stdout=subprocess.PIPE, text=True) for out in outs
        ]
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"a judge did not start (exit {proc.wait()})")
        start.touch()
        for proc in procs:
            if proc.wait() != 0:
                raise SystemExit(f"a judge failed (exit {proc.returncode})")
        return [json.loads(out.read_text()) for out in outs]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=6, help="pairs each judge judges")
    parser.add_argument("--per-query", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-turns", dest="turns", action="store_false", help=argparse.SUPPRESS)
    parser.add_argument("--start", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        Path(args.out).write_text(json.dumps(asyncio.run(_worker(args))))
        return
    load_before = os.getloadavg()
    phases: dict[str, list[dict[str, Any]]] = {
        "alone (1)": _phase(args, 1, True),
        "two, turns": _phase(args, 2, True),
        "two, no turns": _phase(args, 2, False),
        "alone (2)": _phase(args, 1, True),
    }
    load_after = os.getloadavg()
    alone = (phases["alone (1)"][0]["passages_per_s"] + phases["alone (2)"][0]["passages_per_s"]) / 2
    print(f"{args.pairs} DL 2019 pairs per judge, probability mode, {os.cpu_count()} CPUs")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    for name, runs in phases.items():
        rates = ", ".join(f"{r['passages_per_s']:.3f} ({r['passages_per_s'] / alone:.0%})" for r in runs)
        print(f"{name:>14}: passages/s (share of alone) {rates}")
    same = all(r["p_yes"] == phases["alone (1)"][0]["p_yes"] for runs in phases.values() for r in runs)
    print(f"P(yes) identical in every judge and phase: {same}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"phases": phases, "alone": alone, "load": [load_before, load_after], "same_p_yes": same}
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
