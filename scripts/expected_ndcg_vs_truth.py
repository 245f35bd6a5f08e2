"""Does the expected NDCG track the ground-truth NDCG per query? (docs/embedded_determinism.md)

Reads a ``judge score`` output whose input had ground truth (``qrels``/``expected_ids``) and
verdicts with P(yes), and prints, per cutoff k, how three per-query judge figures correlate
with the ground-truth NDCG@k (trec_eval conventions, graded qrels) over the queries:

* ``hard``: the judge's NDCG@k on its yes/no verdicts (label-free ideal);
* ``expected``: E[NDCG@k] under independent Bernoulli(P(yes)) relevance (graded: the grade
  probabilities), :func:`judge.metrics._expected_ranking.expected_ndcg`;
* ``expected_gain``: the NDCG of the expected gains (P(yes) as gain, ideal of the same soft
  gains), the definition the expected NDCG replaced.

Pearson r and Kendall tau-b (scipy), the means, and the mean absolute error against the
ground truth. Reproduce the docs' figures::

    judge score datasets/sample.jsonl -o /tmp/sample.judged.jsonl   # embedded judge, P(yes)
    python scripts/expected_ndcg_vs_truth.py /tmp/sample.judged.jsonl -k 5 10
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from judge.judging._expected_verdicts import expected_metrics
from judge.metrics._expected_ranking import expected_gain_ndcg


def _rows(path: Path, k: int) -> list[dict[str, float]]:
    rows: list[dict[str, float]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record: dict[str, Any] = json.loads(line)
        truth = record.get("ground_truth")
        hard = (record.get("ndcg") or {}).get(str(k))
        if not truth or hard is None:
            continue
        mode = str(record.get("mode", "binary"))
        block = expected_metrics(record["verdicts"], mode, (k,))
        if block is None:
            continue
        judged = [v for v in record["verdicts"] if v.get("verdict") != "unjudged"]
        gains = [
            float(v.get("expected_grade") or v.get("grade") or 0.0)
            if mode == "graded"
            else float(v["p_yes"] if v.get("p_yes") is not None else (1.0 if v["verdict"] == "yes" else 0.0))
            for v in judged
        ]
        rows.append(
            {
                "truth": float(truth["ndcg"][str(k)]),
                "hard": float(hard),
                "expected": float(block["ndcg"][str(k)]),
                "expected_gain": expected_gain_ndcg(gains, k),
            }
        )
    return rows


def report(path: Path, ks: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"file": str(path), "cutoffs": {}}
    for k in ks:
        rows = _rows(path, k)
        if len(rows) < 3:
            raise SystemExit(f"{path}: {len(rows)} queries with ground truth and P(yes); need >= 3")
        truth = np.array([r["truth"] for r in rows])
        figures: dict[str, Any] = {"queries": len(rows), "truth_mean": round(float(truth.mean()), 4)}
        for name in ("hard", "expected", "expected_gain"):
            x = np.array([r[name] for r in rows])
            varies = bool(np.ptp(x) > 0)  # a constant figure has no correlation (None)
            pearson = round(float(stats.pearsonr(x, truth)[0]), 4) if varies else None
            kendall = round(float(stats.kendalltau(x, truth)[0]), 4) if varies else None
            figures[name] = {
                "mean": round(float(x.mean()), 4),
                "pearson": pearson,
                "kendall_tau_b": kendall,
                "mae": round(float(np.abs(x - truth).mean()), 4),
            }
        out["cutoffs"][str(k)] = figures
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("judged", type=Path, help="judge score output (JSONL) with ground truth and P(yes)")
    parser.add_argument("-k", type=int, nargs="+", default=[5, 10], help="cutoffs (default 5 10)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    result = report(args.judged, args.k)
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
        return 0
    print(f"{result['file']}")
    for k, f in result["cutoffs"].items():
        print(f"NDCG@{k}: {f['queries']} queries, ground-truth mean {f['truth_mean']:.4f}")
        print(f"  {'figure':<14} {'mean':>7} {'pearson':>8} {'kendall':>8} {'MAE':>7}")
        for name in ("hard", "expected", "expected_gain"):
            g = f[name]
            r = "–" if g["pearson"] is None else f"{g['pearson']:.4f}"
            tau = "–" if g["kendall_tau_b"] is None else f"{g['kendall_tau_b']:.4f}"
            cells = f"{g['mean']:>7.4f} {r:>8} {tau:>8} {g['mae']:>7.4f}"
            print(f"  {name:<14} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
