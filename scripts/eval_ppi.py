#!/usr/bin/env python
"""How well do prediction-powered figures hold on TREC DL 2019?

The run: a DL 2019 passage run's top ``--depth`` passages of every NIST-judged query that
have text (default ICT-BERT2, 43 queries x 10 = 430 pairs; scripts/eval_review_queue.py's
``dl19_dataset``). NIST's grades are the people's labels: relevant when grade >=
``--level`` (default 2, as docs/agreement.md reads DL 2019), gains 1/0 (binary mode).

The judge:

* ``--judge sim`` (default): NIST's labels with a stated share flipped: each not-relevant
  pair becomes ``yes`` with probability ``--false-yes`` (default 0.22), each relevant one
  ``no`` with ``--false-no`` (default 0.05): a lenient judge, with the error profile the
  embedded judge showed on this run (41 false yes among 189 not-relevant pairs, 11 false no
  among 241 relevant ones). A new judge per draw (seed =
  the draw).
* ``--judge FILE``: a ``judge score`` output over the same dataset (the embedded judge's real
  verdicts; pairs it left unjudged leave the population). docs/agreement.md's figures were
  measured on ``binary.en.v2`` (the English default then): ``judge score --template
  binary.en.v2`` reproduces them.

Each draw labels a uniform sample (without replacement) of ``--share`` of the pairs and
computes, at ``--confidence`` (default 0.95), for P@10, nDCG@10 and mAP (the judge's
conventions: AP over the judged list, nDCG's ideal from the judged list):

* the judge's figure and the prediction-powered one (:func:`judge.metrics.ppi_figure`;
  the nonlinear measures' interval computed even where the product would withhold it);
* for P@10 (linear) the labels-only interval from the same labels (the rectifier with a
  judge that says no to everything: ``N * mean(w * Y)``, the same finite-population
  standard error);
* the truth: the measure with every verdict replaced by NIST's label.

Printed and written as JSON (``--out``): per share and measure, the coverage of the
intervals, their mean width, the labels-only width (P@10), the mean absolute error of the
judge alone and of the prediction-powered estimate, over ``--draws`` draws (default 200).

    python scripts/eval_ppi.py --share 0.05 0.10 0.15 0.30
    python scripts/eval_ppi.py --judge /tmp/ppi/bert2_top10.judged.jsonl --share 0.15
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from eval_review_queue import dl19_dataset

from judge.metrics import JudgedList, calibrated_effects, judge_measure, label_effects, rectified_mean

MEASURES = {"P@10": "P_10", "nDCG@10": "ndcg_cut_10", "mAP": "map"}


def load_run(data_dir: Path, run: str, depth: int) -> list[tuple[str, list[str], list[int]]]:
    """``[(qid, docnos, NIST grades)]`` of the run's top ``depth`` passages with text."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.jsonl"
        dl19_dataset(data_dir, run, path, depth=depth)
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            docnos = [p["id"] for p in rec["retrieval_context"]]
            out.append((rec["id"], docnos, [int(rec["qrels"].get(d, 0)) for d in docnos]))
    return out


def real_verdicts(path: Path) -> dict[tuple[str, str], int]:
    """``(qid, docno) -> 1/0`` of a ``judge score`` output (unjudged pairs left out)."""
    out: dict[tuple[str, str], int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        for docno, v in zip(rec["docnos"], rec["verdicts"], strict=True):
            if v["verdict"] in ("yes", "no"):
                out[(str(rec["id"]), str(docno))] = 1 if v["verdict"] == "yes" else 0
    return out


def lists_of(rows: list[list[int]]) -> list[JudgedList]:
    return [JudgedList.of(r, r) for r in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data/trec_dl19"))
    ap.add_argument("--run", default="ICT-BERT2")
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--level", type=int, default=2)
    ap.add_argument("--judge", default="sim", help="'sim' or a judge score output JSONL")
    ap.add_argument("--false-yes", type=float, default=0.22)
    ap.add_argument("--false-no", type=float, default=0.05)
    ap.add_argument("--share", type=float, nargs="+", default=[0.15])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    run = load_run(args.data, args.run, args.depth)
    real = real_verdicts(Path(args.judge)) if args.judge != "sim" else None
    if real is not None:  # the pairs the embedded judge judged
        run = [
            (q, [d for d in ds if (q, d) in real], [g for d, g in zip(ds, gs, strict=True) if (q, d) in real])
            for q, ds, gs in run
        ]
        run = [r for r in run if r[1]]
    truth_rows = [[1 if g >= args.level else 0 for g in gs] for _, _, gs in run]
    pairs = [(qi, pos) for qi, row in enumerate(truth_rows) for pos in range(len(row))]
    labels = [truth_rows[qi][pos] for qi, pos in pairs]
    population = len(pairs)
    measures = {name: judge_measure(text) for name, text in MEASURES.items()}
    truth_lists = lists_of(truth_rows)
    truth = {name: label_effects(truth_lists, m, [], [], [])[0] for name, m in measures.items()}
    zero_lists = lists_of([[0] * len(r) for r in truth_rows])
    p10 = measures["P@10"]
    _, labels_only_effects = label_effects(zero_lists, p10, pairs, labels, labels)

    results: dict[str, Any] = {
        "run": args.run,
        "queries": len(run),
        "pairs": population,
        "level": args.level,
        "judge": "sim" if real is None else str(args.judge),
        "draws": args.draws,
        "confidence": args.confidence,
        "truth": truth,
        "shares": {},
    }
    if real is None:
        results["false_yes"] = args.false_yes
        results["false_no"] = args.false_no

    def judge_rows(draw: int) -> list[list[int]]:
        if real is not None:
            return [[real[(q, d)] for d in ds] for q, ds, _ in run]
        rng = np.random.default_rng(10_000 + draw)
        rows = []
        for row in truth_rows:
            u = rng.random(len(row))
            rows.append(
                [
                    (0 if u[i] < args.false_no else 1) if y else (1 if u[i] < args.false_yes else 0)
                    for i, y in enumerate(row)
                ]
            )
        return rows

    calibrated = [name for name, m in measures.items() if m.name in ("map", "ndcg_cut")]
    per_share: dict[float, dict[str, dict[str, list[float]]]] = {
        s: {
            name: {"cover": [], "width": [], "err_judge": [], "err_ppi": []}
            for name in [*measures, *(f"{c} calibrated" for c in calibrated)]
        }
        for s in args.share
    }
    lo_width: dict[float, list[float]] = {s: [] for s in args.share}
    lo_cover: dict[float, list[float]] = {s: [] for s in args.share}
    cached_effects: dict[str, tuple[float, np.ndarray]] | None = None
    for draw in range(args.draws):
        if cached_effects is None or real is None:
            jl = lists_of(judge_rows(draw))
            judge_lists = jl
            cached_effects = {}
            for name, m in measures.items():
                value, eff = label_effects(jl, m, pairs, labels, labels)
                assert value is not None
                cached_effects[name] = (value, eff)
        rng = np.random.default_rng(draw)
        for share in args.share:
            n = max(2, round(share * population))
            sample = rng.choice(population, size=n, replace=False)
            for name in measures:
                value, eff = cached_effects[name]
                r = rectified_mean(value, eff[sample], population=population, confidence=args.confidence)
                assert r.low is not None and r.high is not None
                t = truth[name]
                assert t is not None
                acc = per_share[share][name]
                acc["cover"].append(float(r.low <= t <= r.high))
                acc["width"].append(r.high - r.low)
                acc["err_judge"].append(abs(value - t))
                acc["err_ppi"].append(abs(r.estimate - t))
            chosen = [pairs[j] for j in sample]
            chosen_labels = [labels[j] for j in sample]
            for name in calibrated:
                theta, eff = calibrated_effects(judge_lists, measures[name], chosen, chosen_labels)
                assert theta is not None
                r = rectified_mean(theta, eff, population=population, confidence=args.confidence)
                assert r.low is not None and r.high is not None
                t = truth[name]
                assert t is not None
                acc = per_share[share][f"{name} calibrated"]
                acc["cover"].append(float(r.low <= t <= r.high))
                acc["width"].append(r.high - r.low)
                acc["err_judge"].append(abs(cached_effects[name][0] - t))
                acc["err_ppi"].append(abs(r.estimate - t))
            lo = rectified_mean(
                0.0, labels_only_effects[sample], population=population, confidence=args.confidence
            )
            assert lo.low is not None and lo.high is not None
            lo_width[share].append(lo.high - lo.low)
            t10 = truth["P@10"]
            assert t10 is not None
            lo_cover[share].append(float(lo.low <= t10 <= lo.high))

    for share in args.share:
        block: dict[str, Any] = {"labels": max(2, round(share * population))}
        for name, acc in per_share[share].items():
            block[name] = {
                "coverage": round(statistics.fmean(acc["cover"]), 4),
                "mean_width": round(statistics.fmean(acc["width"]), 4),
                "mae_judge": round(statistics.fmean(acc["err_judge"]), 4),
                "mae_ppi": round(statistics.fmean(acc["err_ppi"]), 4),
            }
        block["P@10"]["labels_only_width"] = round(statistics.fmean(lo_width[share]), 4)
        block["P@10"]["labels_only_coverage"] = round(statistics.fmean(lo_cover[share]), 4)
        results["shares"][str(share)] = block
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
