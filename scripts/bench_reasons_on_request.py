#!/usr/bin/env python
"""Reasons on request against a reason for every pooled pair, with the embedded judge, in one
run.

    nice -n 10 python scripts/bench_reasons_on_request.py --queries 3 --depth 4

Two systems of TREC DL 2019 (the ICT-BERT2 and ICT-CKNRM_B runs, their passages read in
place from the shared data folder) are compared on the first ``--queries`` queries at
``--depth`` with the default embedded judge twice, each time from an empty cache, both on
``binary.en.v2`` (the English default when docs/benchmarks.md's figures were measured, pinned
so they stay comparable):

* ``every reason``: ``JudgeConfig(explain=True)``, a reason for every pooled pair (what a
  comparison did before);
* ``on request``: the default, verdicts and P(yes) first, then reasons only for the pairs the
  report shows (``--top-queries`` queries where the systems differ most, each system's top
  ``--top-passages``; the defaults 1 and 2 keep the shown share of this small pool near what
  a 20-query, 9-configuration sweep shows of its pool).

Printed: wall and CPU seconds of each, their ratio (the speed-up), calls, reasons written,
whether every verdict and P(yes) is identical, and the load average before and after.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from _dl19 import DL19, dl19_texts  # noqa: E402

from judge.backends import ensure_resilient  # noqa: E402
from judge.backends._local import LocalBackend  # noqa: E402
from judge.judging import JudgeConfig  # noqa: E402
from judge.systems import SystemsOptions  # noqa: E402
from judge.systems._pool import read_pool_verdicts  # noqa: E402
from judge.systems._run import run_comparison  # noqa: E402

RUNS = ("ICT-BERT2", "ICT-CKNRM_B")
TEMPLATE = "binary.en.v2"


def write_systems(folder: Path, n_queries: int, depth: int) -> dict[str, Path]:
    """One dataset per run: its top ``depth`` passages (with text) of the first queries."""
    queries = dict(
        line.split("\t", 1) for line in (DL19 / "msmarco-test2019-queries.tsv").read_text().splitlines()
    )
    rankings: dict[str, dict[str, list[str]]] = {}
    for run in RUNS:
        for line in (DL19 / f"{run}.run").read_text().splitlines():
            qid, _, docno, *_ = line.split()
            rankings.setdefault(run, {}).setdefault(qid, []).append(docno)
    # The collection holds the judged passages only: rank within what has a text.
    texts = dl19_texts({d for r in RUNS for docs in rankings[r].values() for d in docs})
    for run in RUNS:
        rankings[run] = {q: [d for d in docs if d in texts] for q, docs in rankings[run].items()}
    qids = [q for q in rankings[RUNS[0]] if all(len(rankings[r].get(q, [])) >= depth for r in RUNS)]
    qids = qids[:n_queries]
    paths: dict[str, Path] = {}
    for run in RUNS:
        rows = [
            {
                "id": q,
                "query": queries[q].strip(),
                "retrieval_context": [
                    {"id": d, "text": texts[d]} for d in rankings[run][q][:depth] if d in texts
                ],
            }
            for q in qids
        ]
        paths[run] = folder / f"{run}.jsonl"
        paths[run].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return paths


def _pool(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    judged = read_pool_verdicts(folder / "pool.judged.jsonl").verdicts
    return {(q, d): v.model_dump() for q, by_docno in judged.items() for d, v in by_docno.items()}


async def _variant(
    name: str, systems: dict[str, Path], out: Path, config: JudgeConfig, options: SystemsOptions
) -> dict[str, Any]:
    backend = ensure_resilient(LocalBackend())
    began, cpu = time.perf_counter(), time.process_time()
    report = await run_comparison(systems, out, backend, config, options=options)
    seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - cpu
    await backend.aclose()
    queries = report.differences()["queries"]
    shown = [p["reason"] for q in queries for s in q["systems"] for p in s["passages"]]
    return {
        "name": name,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "calls": report.report.pool.calls,
        "pairs": report.report.pool.unique_pairs,
        "shown_with_reason": sum(1 for r in shown if r),
        "shown": len(shown),
        "pool": _pool(out),
    }


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--queries", type=int, default=3)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--top-queries", type=int, default=1)
    parser.add_argument("--top-passages", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    options = SystemsOptions(depth=args.depth, top_queries=args.top_queries, top_passages=args.top_passages)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        systems = write_systems(folder, args.queries, args.depth)
        # Pinned: the documented figures were measured on binary.en.v2 (the default then).
        every_reason = JudgeConfig(explain=True, template=TEMPLATE)
        on_request = JudgeConfig(template=TEMPLATE)
        results = [
            asyncio.run(_variant("every reason", systems, folder / "every", every_reason, options)),
            asyncio.run(_variant("on request", systems, folder / "on_request", on_request, options)),
        ]
    load_after = os.getloadavg()
    every, lazy = results
    same = {k: (v["verdict"], v["p_yes"]) for k, v in every["pool"].items()} == {
        k: (v["verdict"], v["p_yes"]) for k, v in lazy["pool"].items()
    }
    print(f"{args.queries} DL 2019 queries, 2 systems, depth {args.depth}: {every['pairs']} pooled pairs")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    for r in results:
        reasons = sum(1 for v in r["pool"].values() if v["reason"])
        print(
            f"{r['name']:>13}: {r['seconds']:.0f} s wall, {r['cpu_seconds']:.0f} s CPU, {r['calls']} calls, "
            f"{reasons} reasons in the pool, {r['shown_with_reason']}/{r['shown']} shown passages "
            "with a reason"
        )
    print(
        f"speed-up (every reason / on request): {every['seconds'] / lazy['seconds']:.2f}x wall, "
        f"{every['cpu_seconds'] / lazy['cpu_seconds']:.2f}x CPU; verdicts and P(yes) identical: {same}"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        for r in results:
            r["pool"] = {f"{q} {d}": v for (q, d), v in r["pool"].items()}
        args.json.write_text(json.dumps({"results": results, "load": [load_before, load_after]}, indent=2))


if __name__ == "__main__":
    main()
