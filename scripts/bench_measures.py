#!/usr/bin/env python
"""The metric path before and after "one measure vocabulary": identical outputs, CPU side by side.

Every figure of ``judge score`` (records and summary), of ``JudgeResult`` and of a stability
report is a registry measure computed on the verdicts; at ``BASELINE_REF`` it was hand-written
numpy. This script checks that nothing printed changed and what it costs:

* **identical**: the same synthetic verdicts (seeded: binary and graded, 20% of the queries
  with ``expected_ids``, 20% with graded ``qrels``, 5% of the passages unjudged) go through
  ``summarize`` -> ``finish_record`` -> ``summarize_records`` (and ``summarize`` with qrels)
  in an "old" and a "new" child process; their JSON must be byte-identical, else the
  script exits 1;
* **cost**: CPU time (``time.process_time``) per query of that path, and per run x query of
  the stability ``analyse`` (figures, unstable queries, noise), median of the rounds,
  as the ratio new/old.

"new" imports this checkout; "old" imports ``judge/`` and ``prompts/`` at ``--baseline-ref``
(``git archive``, nothing in the repository changes). Run: ``python scripts/bench_measures.py``
(about a minute; ``--queries`` / ``--rounds`` to scale).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE_REF = "a9901c5"  # the last commit before the measure vocabulary

_WORKER = r"""
import json, random, sys, time
from judge.batch._records import finish_record, summarize_records
from judge.io._jsonl import DatasetPassage, DatasetRecord
from judge.judging import JudgeConfig
from judge.judging._models import PassageVerdict
from judge.judging._summary import summarize
from judge.stability import RunResult, StabilityOptions, analyse

n_queries, rounds, what = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
K = (1, 3, 5, 10)


def verdicts(rng, mode, n):
    out = []
    for i in range(n):
        if rng.random() < 0.05:
            out.append(PassageVerdict(index=i, passage_id=f"d{i}", verdict="unjudged", error="timeout",
                                      template_id="t", template_hash="h", backend="b"))
            continue
        grade = rng.randint(0, 3)
        label = "yes" if (grade >= 2 if mode == "graded" else rng.random() < 0.4) else "no"
        out.append(PassageVerdict(index=i, passage_id=f"d{i}", verdict=label, reason="r",
                                  grade=grade if mode == "graded" else None,
                                  template_id="t", template_hash="h", backend="b"))
    return out


def queries(mode, seed):
    rng = random.Random(seed)
    out = []
    for q in range(n_queries):
        n = rng.randint(1, 12)
        truth = {}
        expected = qrels = None
        if q % 5 == 0:
            expected = [f"d{rng.randint(0, n)}"]
        elif q % 5 == 1:
            qrels = {f"d{j}": rng.randint(0, 3) for j in range(n + 3)}
        out.append((f"q{q}", [f"d{j}" for j in range(n)], verdicts(rng, mode, n), expected, qrels))
    return out


def batch_path(data, mode):
    records, extra = [], []
    for qid, docnos, vs, expected, qrels in data:
        config = JudgeConfig(mode=mode)
        result = summarize(qid, vs, config, "b", k=K)
        base = {"id": qid, "line": 1, "query": qid, "v": 1, "docnos": docnos, "expected_ids": expected,
                "qrels": qrels, "unjudged_passages": []}
        records.append(finish_record(base, result, K))
        if qrels:
            with_qrels = summarize(qid, vs, config, "b", k=K, qrels=qrels)
            extra.append([with_qrels.ap, with_qrels.score, {str(c): x for c, x in with_qrels.ndcg.items()}])
    return {"records": records, "summary": summarize_records(records, K), "with_qrels": extra}


if what == "identical":
    out = [batch_path(queries(mode, 11), mode) for mode in ("binary", "graded")]
    sys.stdout.write(json.dumps(out, sort_keys=True, ensure_ascii=False))
    sys.exit(0)

data = queries("graded", 5)
batch, stab = [], []
runs = 5
results = []
for r in range(runs):
    rng = random.Random(100 + r)
    judged = [summarize(q[0], verdicts(rng, "binary", 10), JudgeConfig(), "b", k=(5, 10)) for q in data]
    results.append(RunResult(r, tuple(judged), 1.0))
records = [DatasetRecord(id=q[0], query=q[0], passages=tuple(DatasetPassage(text=f"p{i}", id=f"d{i}")
           for i in range(10)), line=i + 1) for i, q in enumerate(data)]
options = StabilityOptions(runs=runs, bootstrap_resamples=50)
analyse(results, records, JudgeConfig(), options)  # warm-up: imports, scipy
for _ in range(rounds):
    t = time.process_time()
    batch_path(data, "graded")
    batch.append((time.process_time() - t) / len(data))
    t = time.process_time()
    analyse(results, records, JudgeConfig(), options)
    stab.append((time.process_time() - t) / (len(data) * runs))
print(json.dumps({"batch": batch, "stability": stab}))
"""


def _old_tree(ref: str, into: Path) -> Path:
    blob = subprocess.run(
        ["git", "archive", ref, "judge", "prompts"], cwd=ROOT, check=True, capture_output=True
    )
    with tarfile.open(fileobj=io.BytesIO(blob.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def _run(tree: Path, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree))  # cwd too: ``-c`` puts the cwd first on sys.path
    proc = subprocess.run(
        [sys.executable, "-c", _WORKER, *args], env=env, cwd=tree, check=True, capture_output=True, text=True
    )
    return proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = _old_tree(args.baseline_ref, Path(tmp))
        same = _run(old, "400", "1", "identical") == _run(ROOT, "400", "1", "identical")
        print(f"outputs identical (records, summary, JudgeResult with qrels; 800 queries): {same}")
        times: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
        for _ in range(args.rounds):  # alternate the sides
            for side, tree in (("old", old), ("new", ROOT)):
                got: dict[str, Any] = json.loads(_run(tree, str(args.queries), "1", "cost"))
                for key, values in got.items():
                    times[side].setdefault(key, []).extend(values)
    for key, label in (
        ("batch", "per query: summarize + record + summary"),
        ("stability", "per run x query: analyse"),
    ):
        o, n = statistics.median(times["old"][key]), statistics.median(times["new"][key])
        print(f"{label}: old {o * 1e6:.0f} us, new {n * 1e6:.0f} us, new/old {n / o:.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
