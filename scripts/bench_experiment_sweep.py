"""A real sweep, timed: ``judge experiment`` over a 9-configuration BM25 grid (k1 x b, 3 x 3)
of the embedded engine on the first 20 judged TREC DL 2019 queries (the 10,818 passages of
``../shared/data/trec_dl19``) at depth 10, judged by the default embedded judge (or any
``--backend``) with a fresh verdict cache, at default settings.

Prints (and writes to ``WORK/result.json``) the wall time, the pooled pairs judged, the
judge's calls, passages judged per second and the machine's load before and after
(``os.getloadavg``). Judge flags go after ``--`` (``-- --no-explain``). The command runs as a
subprocess whose progress lines go to ``WORK/experiment.log``; a run that stops with exit 3
is run again (it resumes: judged pairs are cached), at most ``--restarts`` times, and each
attempt is listed. Validate the script
with the qrels-backed judge first (no model, seconds):

    python scripts/bench_experiment_sweep.py --work /tmp/jbench/sweep-qrels --backend qrels:QRELS:2
    nice -n 10 python scripts/bench_experiment_sweep.py --work /tmp/jbench/sweep-local

(``QRELS``: ``../shared/data/trec_dl19/2019qrels-pass.txt``.) Goal: <= 15 minutes on 2 quiet
cores with the embedded judge.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from experiment_data import ensure_index, prepare_dl19, write_config

ROOT = Path(__file__).resolve().parents[1]
GRID = ("k1=0.6,1.2,1.8", "b=0.3,0.6,0.9")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/jbench/sweep"))
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--backend", default=None, help="judge backend spec (default: the embedded judge)")
    ap.add_argument("--restarts", type=int, default=3, help="re-runs after an exit 3 (default 3)")
    ap.add_argument("--keep", action="store_true", help="keep the cache and report of an earlier run")
    ap.add_argument("flags", nargs="*", help="more judge experiment flags, after --, e.g. -- --no-explain")
    args = ap.parse_args()
    paths = prepare_dl19(args.work, limit=args.queries)
    ensure_index(paths, "en")
    config = write_config(args.work, args.depth)
    out, cache = args.work / "sweep", args.work / "cache.sqlite"
    if not args.keep:
        for p in (out, cache):
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    cmd = [sys.executable, "-m", "judge", "experiment", str(paths["queries"]), "--config", str(config),
           *(x for g in GRID for x in ("--grid", g)), "-o", str(out), "--cache", str(cache), "--json",
           *(("--backend", args.backend) if args.backend else ()), *args.flags]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    attempts: list[dict[str, object]] = []
    load_before = _load()
    log = args.work / "experiment.log"
    stdout = ""
    with open(log, "a", encoding="utf-8") as err:
        for _ in range(args.restarts + 1):
            t0, started = time.perf_counter(), time.strftime("%H:%M:%S")
            done = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
            seconds = round(time.perf_counter() - t0, 1)
            attempts.append({"started": started, "exit": done.returncode, "seconds": seconds})
            attempts[-1]["load"] = _load()
            stdout = done.stdout
            if done.returncode != 3:
                break
    wall = sum(float(str(a["seconds"])) for a in attempts)
    calls_file = out / "calls.json"
    result: dict[str, object] = {
        "command": " ".join(cmd[1:]),
        "attempts": attempts,
        "wall_s": round(wall, 1),
        "load_before": load_before,
        "load_after": _load(),
        "cpus": os.cpu_count(),
    }
    if calls_file.exists():  # every call of every attempt (judge/systems/_call_ledger.py)
        ledger = json.loads(calls_file.read_text(encoding="utf-8"))
        result["calls_all_attempts"] = sum(int(e["calls"]) for e in ledger["experiments"].values())
    if attempts[-1]["exit"] == 0:
        report = json.loads(stdout)
        e, pool = report["experiment"], report["pool"]
        pairs = pool["judged"] + pool["unjudged"]
        result.update(
            configurations=len(e["configurations"]),
            queries=e["queries"],
            depth=args.depth,
            nominal_pairs=e["nominal_pairs"],
            pairs=pairs,
            judged=pool["judged"],
            unjudged=pool["unjudged"],
            calls=e["calls"],
            calls_per_pair=round(e["calls"] / pairs, 3) if pairs else None,
            passages_per_s=round(pairs / wall, 3) if wall else None,
            best=e["best"],
            best_value=round(e["best_value"], 4) if e["best_value"] is not None else None,
            best_vs_baseline=e["best_vs_baseline"],
        )
    (args.work / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0 if attempts[-1]["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
