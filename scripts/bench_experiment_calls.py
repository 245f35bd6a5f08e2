"""Calls saved by an experiment: judge calls made / (configurations x queries x depth).

A 12-configuration grid of the embedded BM25 engine (k1 x b, 4 x 3) on TREC DL 2019 (the
10,818 passages of ``../shared/data/trec_dl19``, the 43 queries NIST judged) at depth 10,
judged with the qrels-backed judge (``--backend qrels:2019qrels-pass.txt:2``: answers from
NIST's labels, one call per pair asked, no model needed) and a fresh verdict cache. Then a
second experiment on the same query set with one new configuration, on the same cache:
only the new configuration's new pairs cost a call. Goal: the first ratio <= 25%.

    python scripts/bench_experiment_calls.py --work /tmp/jbench/dl19-calls
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from pathlib import Path

from experiment_data import ensure_index, prepare_dl19, write_config

from judge.systems import aexperiment


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/jbench/dl19-calls"))
    ap.add_argument("--depth", type=int, default=10)
    args = ap.parse_args()
    paths = prepare_dl19(args.work)
    ensure_index(paths, "en")
    config = write_config(args.work, args.depth)
    cache = args.work / "cache.sqlite"
    for p in (cache, args.work / "exp1", args.work / "exp2"):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    backend = f"qrels:{paths['qrels']}:2"
    grid = ["k1=0.6,0.9,1.2,1.5", "b=0.3,0.6,0.9"]
    first = asyncio.run(
        aexperiment(
            paths["queries"],
            config,
            args.work / "exp1",
            grid=grid,
            backend=backend,
            cache=cache,
            stability_resamples=0,
            resamples=2000,
        )
    )
    e1 = first.experiment
    assert e1 is not None
    second = asyncio.run(
        aexperiment(
            paths["queries"],
            config,
            args.work / "exp2",
            grid=["k1=0.6,0.9,1.2,1.5,2.0", "b=0.3,0.6,0.9"],
            backend=backend,
            cache=cache,
            stability_resamples=0,
            resamples=2000,
        )
    )
    e2 = second.experiment
    assert e2 is not None
    result = {
        "configurations": len(e1.configurations),
        "queries": e1.queries,
        "depth": args.depth,
        "nominal_pairs": e1.nominal_pairs,
        "pool_pairs": first.pool.pairs,
        "unique_pairs": first.pool.unique_pairs,
        "judged": first.pool.judged,
        "unjudged": first.pool.unjudged,
        "calls": e1.calls,
        "calls_ratio": e1.calls_ratio,
        "unique_ratio": round(first.pool.unique_pairs / e1.nominal_pairs, 6),
        "best": e1.best,
        "best_ndcg_cut_10": e1.best_value,
        "second_experiment": {
            "configurations": len(e2.configurations),
            "unique_pairs": second.pool.unique_pairs,
            "new_pairs": second.pool.unique_pairs - first.pool.unique_pairs,
            "unjudged": second.pool.unjudged,
            "calls": e2.calls,
            "calls_ratio": e2.calls_ratio,
        },
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
