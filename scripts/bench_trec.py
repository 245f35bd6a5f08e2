"""Benchmark `judge trec` against pytrec_eval and ranx on a large synthetic run.

Generates (seeded, in a temporary directory) a run of QUERIES x DOCS lines with graded
qrels, then times each tool end to end — start a Python process, parse both files from
disk, evaluate map, ndcg_cut_10, P_10, recall_1000 and recip_rank, print the means — each
in its own subprocess, and records that subprocess's peak RSS
(``resource.getrusage(RUSAGE_CHILDREN)`` in a fresh wrapper process per tool).

Every tool first runs once on a tiny file so one-off costs that later runs would not pay
(numba's on-disk JIT cache for ranx) are not counted against it.

    python scripts/bench_trec.py                 # 5,000 queries x 1,000 passages (5M lines)
    python scripts/bench_trec.py --queries 200   # quick smoke run

Needs the ``bench`` extra: ``pip install pytrec-eval-terrier ranx``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MEASURES_JUDGE = ["map", "ndcg_cut_10", "P_10", "recall_1000", "recip_rank"]

PYTREC_CODE = r"""
import json, sys
import pytrec_eval
with open(sys.argv[1]) as f:
    qrels = pytrec_eval.parse_qrel(f)
with open(sys.argv[2]) as f:
    run = pytrec_eval.parse_run(f)
evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"map", "ndcg_cut.10", "P.10", "recall.1000", "recip_rank"})
per_query = evaluator.evaluate(run)
keys = ["map", "ndcg_cut_10", "P_10", "recall_1000", "recip_rank"]
print(json.dumps({k: sum(q[k] for q in per_query.values()) / len(per_query) for k in keys}))
"""

RANX_CODE = r"""
import json, sys
from ranx import Qrels, Run, evaluate
qrels = Qrels.from_file(sys.argv[1], kind="trec")
run = Run.from_file(sys.argv[2], kind="trec")
scores = evaluate(qrels, run, ["map", "ndcg@10", "precision@10", "recall@1000", "mrr"])
names = {"map": "map", "ndcg@10": "ndcg_cut_10", "precision@10": "P_10", "recall@1000": "recall_1000",
         "mrr": "recip_rank"}
print(json.dumps({names[k]: float(v) for k, v in scores.items()}))
"""

WRAPPER_CODE = r"""
import json, resource, subprocess, sys, time
command = json.loads(sys.argv[1])
start = time.perf_counter()
done = subprocess.run(command, check=True, capture_output=True, text=True)
wall = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"wall_s": wall, "peak_mib": peak_kib / 1024, "stdout": done.stdout}))
"""


def generate(directory: Path, *, queries: int, docs: int, seed: int) -> tuple[Path, Path]:
    """Write run.txt (queries x docs lines) and qrels.txt (graded, ~10% of each ranking
    judged plus unretrieved relevant documents)."""
    rng = np.random.default_rng(seed)
    run_path, qrels_path = directory / "run.txt", directory / "qrels.txt"
    with run_path.open("w") as run_file, qrels_path.open("w") as qrels_file:
        for q in range(queries):
            qid = str(1000 + q)
            ids = np.unique(rng.integers(0, 8_841_823, size=docs + docs // 5 + 16))
            rng.shuffle(ids)
            retrieved = ids[:docs]
            unretrieved = ids[docs : docs + 20]
            scores = np.sort(rng.normal(10.0, 3.0, size=docs).round(4))[::-1]
            run_file.write(
                "".join(
                    f"{qid} Q0 {d} {r} {s:.4f} bench\n"
                    for r, (d, s) in enumerate(zip(retrieved.tolist(), scores.tolist(), strict=True), start=1)
                )
            )
            judged_pos = np.unique(rng.integers(0, docs, size=docs // 10))
            top_bias = 1.0 - judged_pos / docs
            grades = np.minimum(3, rng.poisson(1.5 * top_bias**3))
            lines = [
                f"{qid} 0 {retrieved[p]} {g}\n"
                for p, g in zip(judged_pos.tolist(), grades.tolist(), strict=True)
            ]
            lines += [f"{qid} 0 {d} {int(rng.integers(0, 4))}\n" for d in unretrieved.tolist()]
            qrels_file.write("".join(lines))
    return qrels_path, run_path


def commands(qrels: Path, run: Path) -> dict[str, list[str]]:
    judge = [sys.executable, "-m", "judge", "trec", "--json"]
    for m in MEASURES_JUDGE:
        judge += ["-m", m]
    return {
        "judge trec": [*judge, str(qrels), str(run)],
        "pytrec_eval": [sys.executable, "-c", PYTREC_CODE, str(qrels), str(run)],
        "ranx": [sys.executable, "-c", RANX_CODE, str(qrels), str(run)],
    }


def measure(command: list[str]) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", WRAPPER_CODE, json.dumps(command)], check=True, capture_output=True, text=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def means(tool: str, stdout: str) -> dict[str, float]:
    data = json.loads(stdout)
    values = data["all"] if tool == "judge trec" else data
    return {k: float(values[k]) for k in MEASURES_JUDGE}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=2019)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_trec_") as tmp:
        directory = Path(tmp)
        started = time.perf_counter()
        qrels, run = generate(directory, queries=args.queries, docs=args.docs, seed=args.seed)
        lines = args.queries * args.docs
        print(
            f"generated {lines:,} run lines ({run.stat().st_size / 2**20:.0f} MiB) and "
            f"{sum(1 for _ in qrels.open()):,} qrels lines in {time.perf_counter() - started:.1f} s"
        )
        warm = directory / "warm"
        warm.mkdir()
        warm_qrels, warm_run = generate(warm, queries=3, docs=50, seed=1)
        for command in commands(warm_qrels, warm_run).values():
            measure(command)

        results: dict[str, dict[str, object]] = {}
        for tool, command in commands(qrels, run).items():
            results[tool] = measure(command)
            wall, peak = results[tool]["wall_s"], results[tool]["peak_mib"]
            print(f"{tool:12s} wall {wall:7.2f} s   peak RSS {peak:7.0f} MiB")

    judge = results["judge trec"]
    print()
    for other in ("pytrec_eval", "ranx"):
        r = results[other]
        time_ratio = float(judge["wall_s"]) / float(r["wall_s"])  # type: ignore[arg-type]
        mem_ratio = float(judge["peak_mib"]) / float(r["peak_mib"])  # type: ignore[arg-type]
        print(
            f"judge / {other:11s}: time {time_ratio:.2f}x ({1 / time_ratio:.1f}x faster), "
            f"peak memory {mem_ratio:.2f}x"
        )
    print()
    print("means (agreement check):")
    reference = means("judge trec", str(judge["stdout"]))
    for tool, r in results.items():
        values = means(tool, str(r["stdout"]))
        cells = "  ".join(f"{k}={values[k]:.4f}" for k in MEASURES_JUDGE)
        same = all(f"{values[k]:.4f}" == f"{reference[k]:.4f}" for k in MEASURES_JUDGE)
        print(f"  {tool:12s} {cells}  {'(same 4 decimals)' if same else '(differs)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
