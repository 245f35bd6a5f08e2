"""Agreement on the choice: does the judge pick the configuration human labels pick?

A grid of embedded-engine (BM25) configurations is run on a query set with ``judge
experiment`` (pooled, each pair judged once). The configurations are ordered twice by
nDCG@10: by the judge's pool (the experiment's report) and by the human labels (each
configuration's TREC run scored against the labels' qrels, as ``judge trec`` does). Printed
and written as JSON: Kendall's tau between the two orders (scipy), the judge's best, the
labels' best and its tie group (configurations whose per-query nDCG@10 under the labels is
not significantly different from the labels' best: paired randomization test, Holm over the
comparisons, p >= 0.05), and whether the judge's best is in that group.

Corpora (built at run time from ../shared/data, see scripts/experiment_data.py): ``dl19``
(NIST's graded qrels) and ``zh`` (zh_rgb: positives relevant, negatives not).

    nice -n 10 python scripts/agreement_on_choice.py --corpus dl19 --queries 20 --depth 5 \\
        --grid k1=0.4,1.2,2.5 --grid b=0.3,0.9 --backend local --work /tmp/jbench/dl19
    # validate the script first with a perfect judge:
    python scripts/agreement_on_choice.py --corpus dl19 --backend qrels --work /tmp/jbench/dl19

``--backend qrels`` uses the corpus's own labels as the judge (the orders must agree, tau
1 up to ties). Re-running resumes: every judged pair is in the work directory's cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from experiment_data import ensure_index, prepare_dl19, prepare_zh, write_config
from scipy.stats import kendalltau

from judge.io import join_run_qrels, read_qrels, read_run
from judge.judging import JudgeConfig
from judge.metrics import compare_scores, evaluate, holm_adjust, parse_measure_args
from judge.systems import aexperiment

MEASURE = "ndcg_cut_10"


def label_scores(qrels_path: Path, trec_path: Path) -> dict[str, float]:
    """Per query nDCG@10 of one run under the labels."""
    (m,) = parse_measure_args([MEASURE])
    ev = evaluate([m], join_run_qrels(read_qrels(qrels_path), read_run(trec_path)))
    return dict(zip(ev.qids, (float(x) for x in ev.query_scores(m)), strict=True))


def tie_group(
    per_query: dict[str, dict[str, float]], best: str, seed: int
) -> tuple[list[str], dict[str, float]]:
    """Configurations not significantly different from ``best`` (Holm p >= 0.05)."""
    others = [n for n in per_query if n != best]
    qids = sorted(set.intersection(*(set(v) for v in per_query.values())))
    comps = [
        compare_scores(
            np.array([per_query[best][q] for q in qids]),
            np.array([per_query[n][q] for q in qids]),
            measure=MEASURE,
            baseline_name=best,
            system_name=n,
            seed=seed,
        )
        for n in others
    ]
    adjusted = holm_adjust(comps) if comps else []
    p = {c.system: float(c.p_permutation_holm if c.p_permutation_holm is not None else 1.0) for c in adjusted}
    return [best, *(n for n in others if p[n] >= 0.05)], p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", choices=("dl19", "zh"), required=True)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--grid", action="append", default=None)
    ap.add_argument("--backend", default="local", help="a backend spec, or 'qrels' (the corpus's labels)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out", type=Path, default=None, help="result JSON (default WORK/agreement-BACKEND.json)"
    )
    args = ap.parse_args()
    grid = args.grid or ["k1=0.4,1.2,2.5", "b=0.3,0.9"]
    if args.corpus == "dl19":
        paths = prepare_dl19(args.work, limit=args.queries)
        ensure_index(paths, "en")
    else:
        paths = prepare_zh(args.work, limit=args.queries)
        ensure_index(paths, "zh")
    config = write_config(args.work, args.depth)
    backend_name = "qrels" if args.backend == "qrels" else args.backend.replace(":", "_").replace("/", "_")
    backend = f"qrels:{paths['qrels']}:2" if args.backend == "qrels" and args.corpus == "dl19" else (
        f"qrels:{paths['qrels']}" if args.backend == "qrels" else args.backend
    )  # fmt: skip
    out_dir = args.work / f"experiment-{backend_name}"
    started = time.monotonic()
    report = aexperiment_sync(paths["queries"], config, out_dir, grid, backend, args)
    elapsed = time.monotonic() - started
    e = report.experiment
    assert e is not None
    judge_means = {c.name: c.objective for c in e.configurations}
    per_query = {c.name: label_scores(paths["qrels"], Path(str(c.trec))) for c in e.configurations}
    label_means = {n: float(np.mean(list(v.values()))) for n, v in per_query.items()}
    names = list(judge_means)
    tau = kendalltau([judge_means[n] or 0.0 for n in names], [label_means[n] for n in names])
    label_best = max(names, key=lambda n: label_means[n])
    group, p = tie_group(per_query, label_best, args.seed)
    result = {
        "corpus": args.corpus,
        "backend": backend,
        "queries": e.queries,
        "depth": args.depth,
        "grid": grid,
        "configurations": {n: {"judge": judge_means[n], "labels": label_means[n]} for n in names},
        "kendall_tau": None if np.isnan(tau.statistic) else float(tau.statistic),
        "kendall_p": None if np.isnan(tau.pvalue) else float(tau.pvalue),
        "judge_best": e.best,
        "label_best": label_best,
        "label_tie_group": group,
        "holm_p_vs_label_best": p,
        "judge_best_in_tie_group": e.best in group,
        "judge_calls": e.calls,
        "unique_pairs": report.pool.unique_pairs,
        "nominal_pairs": e.nominal_pairs,
        "seconds": round(elapsed, 1),
    }
    out = args.out or args.work / f"agreement-{backend_name}.json"
    out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


def aexperiment_sync(
    queries: Path, config: Path, out: Path, grid: list[str], backend: str, args: argparse.Namespace
):  # type: ignore[no-untyped-def]
    import asyncio

    return asyncio.run(
        aexperiment(
            queries,
            config,
            out,
            grid=grid,
            backend=backend,
            measures=[MEASURE, "map"],
            # verdicts only: no reason is generated (the decision is the same, the call shorter)
            config=JudgeConfig(explain=False),
            cache=args.work / f"cache-{out.name}.sqlite",
            seed=args.seed,
            stability_resamples=0,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
