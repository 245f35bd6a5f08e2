#!/usr/bin/env python
"""Does a prediction-powered *paired difference* choose a configuration better than the judge?

Input: a finished ``judge experiment`` folder (``report.json``, ``pool.judged.jsonl`` with the
judge's verdicts on the pooled pairs, ``runs/NAME.run`` / ``.trec`` per configuration, as
``scripts/agreement_on_choice.py`` leaves it) and the qrels with a level (relevant = grade >=
``--level``). The people's labels are the qrels (a pooled pair not in them: grade 0).

The judge: ``--judge real`` (the folder's verdicts) or ``--judge sim`` (NIST's labels at the
level with a stated share flipped, a new judge per draw, seed ``10000 + draw``, as
``scripts/eval_ppi.py``: each not-relevant pair ``yes`` with probability ``--false-yes``,
each relevant one ``no`` with ``--false-no``).

For each label budget ``--share`` (of the pool's judged pairs: ``n = round(share * J)``) and
each of ``--draws`` draws (sample seed ``--seed + draw``), three orders of the
configurations by P@10 and by nDCG@10:

(a) **judge**: the judge alone, pooled, as the experiment reports (P@10 of the verdicts;
    nDCG@10 with the ideal from the query's pooled verdicts, trec_eval on pool.qrels);
(b) **levels**: each configuration's level corrected on its own from one uniform sample of
    ``n`` judged pooled pairs (:func:`judge.metrics.ppi_figure` on the configuration's lists,
    the product's ``ppi`` block: the label-free conventions, nDCG's calibrated rectifier);
(c) **paired**: the corrected mean paired difference of every pair of configurations
    (:func:`judge.metrics.paired_difference`; P@10, and for nDCG@10 DCG@10 divided by the
    query's ideal DCG@10 of the judge's pooled verdicts, floored at 1: a normaliser fixed
    without the labels and shared by both sides), from one uniform sample of ``n`` pairs
    drawn from the union of the comparisons' differing pairs (a uniform sample of the union
    is, given its count there, a uniform sample of each comparison's differing pairs). The
    order: Copeland (wins minus losses over the 36 comparisons by the sign of the estimate),
    ties broken by the mean estimated difference. Beside it, **star**: every configuration
    against the judge's best only (8 comparisons, the sample drawn from their differing
    pairs), ordered by the estimated difference; and **guarded**: (c)'s Copeland order where a
    comparison whose 95% interval contains 0 keeps the judge's own paired difference (the
    labels overrule the judge only where they settle the sign).

Reported per share and measure: mean Kendall's tau (scipy, tau-b) of each order against the
labels' order (each configuration's P@10 / nDCG@10 under the qrels, trec_eval conventions
via :func:`judge.metrics.evaluate`, P@10 at ``--level``, nDCG@10 graded), the share of
draws whose best is in the labels' tie group (``agreement_on_choice.tie_group``: Holm-
adjusted paired randomization p >= 0.05 against the labels' best), the share of draws
where (c)'s tau is at least (a)'s, and the coverage of (c)'s 95% intervals against the
true differences (every differing pair labelled: exact for P@10; for nDCG the estimand with
the judge's normaliser and binary gains), over the comparisons with at least two labels.

    nice -n 19 python scripts/eval_paired_ppi.py \\
        --experiment /tmp/jbench/aoc-dl19/experiment-local_qwen2.5-coder-1.5b-q4km \\
        --qrels /work/shared/data/trec_dl19/2019qrels-pass.txt --level 2 --judge real
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from agreement_on_choice import tie_group
from scipy.stats import kendalltau

from judge.io import join_run_qrels, read_qrels, read_run
from judge.metrics import (
    DifferingPairs,
    JudgedList,
    differing_pairs,
    evaluate,
    judge_measure,
    paired_difference,
    parse_measure_args,
    ppi_figure,
)

MEASURES = {"P@10": ("P_10", "P"), "nDCG@10": ("ndcg_cut_10", "dcg")}
K = 10
Key = tuple[str, str]


def load(folder: Path) -> tuple[dict[str, dict[str, list[str]]], dict[str, Path], dict[Key, int]]:
    """Configurations' rankings (``runs/NAME.run``, the experiment's order), their TREC runs
    and the pool's verdicts (1 yes, 0 no, -1 unjudged)."""
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    rankings: dict[str, dict[str, list[str]]] = {}
    trec: dict[str, Path] = {}
    for c in report["experiment"]["configurations"]:
        name = str(c["name"])
        trec[name] = Path(str(c["trec"]))
        ranked: dict[str, list[tuple[float, str]]] = {}
        for line in (folder / "runs" / f"{name}.run").read_text(encoding="utf-8").splitlines():
            if line.strip():
                qid, _, docno, _, score, _ = line.split()
                ranked.setdefault(qid, []).append((-float(score), docno))
        rankings[name] = {q: [d for _, d in sorted(r)][:K] for q, r in ranked.items()}
    verdicts: dict[Key, int] = {}
    for line in (folder / "pool.judged.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            for docno, v in zip(rec["docnos"], rec["verdicts"], strict=True):
                verdict = v.get("verdict")
                verdicts[(str(rec["id"]), str(docno))] = {"yes": 1, "no": 0}.get(verdict, -1)
    return rankings, trec, verdicts


def label_scores(qrels_path: Path, trec: Path, text: str, level: int) -> dict[str, float]:
    (m,) = parse_measure_args([text])
    ev = evaluate([m], join_run_qrels(read_qrels(qrels_path), read_run(trec)), relevance_level=level)
    return dict(zip(ev.qids, (float(x) for x in ev.query_scores(m)), strict=True))


def tau(a: dict[str, float], b: dict[str, float]) -> float:
    """Kendall's tau-b; values rounded to 9 decimals so that equal means computed in another
    order (0.6 and 0.5999999999999999) tie, as they do."""
    names = sorted(a)
    t = kendalltau([round(a[n], 9) for n in names], [round(b[n], 9) for n in names]).statistic
    return 0.0 if np.isnan(t) else float(t)


def judge_levels(rankings: dict[str, dict[str, list[str]]], f: dict[Key, int]) -> dict[str, dict[str, float]]:
    """(a): each configuration's pooled P@10 and nDCG@10 of the judge's verdicts."""
    by_query: dict[str, list[int]] = {}
    for (q, _), v in f.items():
        by_query.setdefault(q, []).append(v)
    p10, ndcg = judge_measure("P_10"), judge_measure("ndcg_cut_10")
    out: dict[str, dict[str, float]] = {"P@10": {}, "nDCG@10": {}}
    for name, ranked in rankings.items():
        ps, ns = [], []
        for q, docs in ranked.items():
            top = [max(0, f[(q, d)]) for d in docs]
            rest = [max(0, f[(q, d)]) for d in {d for (qq, d) in f if qq == q} - set(docs)]
            jl = JudgedList.of(top, top, pool_relevant=rest, pool_gains=rest)
            ps.append(jl.value(p10) or 0.0)
            ns.append(jl.value(ndcg) or 0.0)
        out["P@10"][name] = float(np.mean(ps))
        out["nDCG@10"][name] = float(np.mean(ns))
    return out


def corrected_levels(
    rankings: dict[str, dict[str, list[str]]], f: dict[Key, int], y: dict[Key, int], sample: set[Key]
) -> dict[str, dict[str, float]]:
    """(b): each configuration's prediction-powered P@10 and nDCG@10 (the product's ppi block)."""
    out: dict[str, dict[str, float]] = {"P@10": {}, "nDCG@10": {}}
    for name, ranked in rankings.items():
        lists, pairs, labels = [], [], []
        for qi, (q, docs) in enumerate(sorted(ranked.items())):
            rel = [f[(q, d)] for d in docs]
            lists.append(JudgedList.of(rel, rel))
            for pos, d in enumerate(docs):
                if (q, d) in sample and rel[pos] >= 0:
                    pairs.append((qi, pos))
                    labels.append(y[(q, d)])
        population = sum(jl.judged for jl in lists)
        for label, text in (("P@10", "P_10"), ("nDCG@10", "ndcg_cut_10")):
            fig = ppi_figure(lists, judge_measure(text), pairs, labels, labels, population=population)
            assert fig.estimate is not None
            out[label][name] = fig.estimate
    return out


def paired_order(
    comps: dict[tuple[str, str], DifferingPairs],
    f: dict[Key, int],
    labels: dict[Key, int],
    names: list[str],
    *,
    guarded: bool = False,
) -> tuple[dict[str, float], list[Any]]:
    """Copeland score (+ mean estimated difference / 100 to break ties) from the comparisons'
    corrected differences, and the comparisons' results. ``guarded``: a comparison whose
    interval contains 0 keeps the judge's own difference."""
    wins = dict.fromkeys(names, 0.0)
    diff = dict.fromkeys(names, 0.0)
    results = []
    for (a, b), pairs in comps.items():
        r = paired_difference(pairs, f, labels)
        results.append(((a, b), r))
        value = r.estimate
        if guarded and not (r.low is not None and r.high is not None and (r.low > 0.0 or r.high < 0.0)):
            value = r.judge  # the labels do not settle the sign: the judge's difference stands
        s = float(np.sign(value)) if abs(value) > 1e-12 else 0.0
        wins[a] += s
        wins[b] -= s
        diff[a] += value
        diff[b] -= value
    return {n: wins[n] + diff[n] / (100.0 * len(names)) for n in names}, results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", type=Path, required=True)
    ap.add_argument("--qrels", type=Path, required=True)
    ap.add_argument("--level", type=int, default=2)
    ap.add_argument("--judge", choices=("real", "sim"), default="real")
    ap.add_argument("--false-yes", type=float, default=0.22)
    ap.add_argument("--false-no", type=float, default=0.05)
    ap.add_argument("--share", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    started = time.monotonic()

    rankings, trec, real = load(args.experiment)
    names = sorted(rankings)
    grades = {(q, d): int(g) for q, docs in read_qrels(args.qrels).to_dict().items() for d, g in docs.items()}
    y = {key: int(grades.get(key, 0) >= args.level) for key in real}
    truth: dict[str, dict[str, float]] = {}
    groups: dict[str, list[str]] = {}
    for label, (text, _) in MEASURES.items():
        per_query = {n: label_scores(args.qrels, trec[n], text, args.level) for n in names}
        truth[label] = {n: float(np.mean(list(v.values()))) for n, v in per_query.items()}
        best = max(names, key=lambda n: truth[label][n])
        groups[label] = tie_group(per_query, best, args.seed)[0]
    judged = sorted(k for k, v in real.items() if v >= 0)

    def judge_of(draw: int) -> dict[Key, int]:
        if args.judge == "real":
            return real
        rng = np.random.default_rng(10_000 + draw)
        u = rng.random(len(real))
        keys = sorted(real)
        return {
            k: (0 if u[i] < args.false_no else 1) if y[k] else (1 if u[i] < args.false_yes else 0)
            for i, k in enumerate(keys)
        }

    # the comparisons' differing pairs depend on the rankings only (normalisers on the judge)
    stats: dict[float, dict[str, dict[str, list[float]]]] = {s: {m: {} for m in MEASURES} for s in args.share}
    a_levels: dict[str, dict[str, float]] | None = None
    comps: dict[str, dict[tuple[str, str], DifferingPairs]] = {}
    for draw in range(args.draws):
        f = judge_of(draw)
        if a_levels is None or args.judge == "sim":
            a_levels = judge_levels(rankings, f)
            ideal: dict[str, float] = {}
            for q in {q for q, _ in f}:
                yes = sorted((max(0, v) for (qq, _), v in f.items() if qq == q), reverse=True)[:K]
                ideal[q] = max(1.0, sum(g / np.log2(r + 2) for r, g in enumerate(yes)))
            for label, (_, kind) in MEASURES.items():
                comps[label] = {
                    (a, b): differing_pairs(
                        rankings[a],
                        rankings[b],
                        K,
                        measure=kind,
                        normalisers=ideal if kind == "dcg" else None,
                    )  # type: ignore[arg-type]
                    for a, b in itertools.combinations(names, 2)
                }
        fp = {k: max(0, v) for k, v in f.items()}  # an unjudged pair predicts 0
        for share in args.share:
            n = max(2, round(share * len(judged)))
            rng = np.random.default_rng(args.seed + draw)
            uniform = {judged[i] for i in rng.choice(len(judged), size=n, replace=False)}
            b_levels = corrected_levels(rankings, f, y, uniform)
            for label in MEASURES:
                acc = stats[share][label]
                truth_l = truth[label]
                a_best = max(names, key=lambda n_: a_levels[label][n_])
                union = sorted({k for p in comps[label].values() for k in p.keys})
                pick = rng.choice(len(union), size=min(n, len(union)), replace=False)
                labels = {union[i]: y[union[i]] for i in pick}
                c_score, results = paired_order(comps[label], fp, labels, names)
                g_score, _ = paired_order(comps[label], fp, labels, names, guarded=True)
                star = {(a, b): p for (a, b), p in comps[label].items() if a_best in (a, b)}
                s_union = sorted({k for p in star.values() for k in p.keys})
                s_pick = rng.choice(len(s_union), size=min(n, len(s_union)), replace=False)
                s_labels = {s_union[i]: y[s_union[i]] for i in s_pick}
                s_score = {a_best: 0.0}
                for (a, b), p in star.items():
                    r = paired_difference(p, fp, s_labels)
                    other, sign = (b, -1.0) if a == a_best else (a, 1.0)
                    s_score[other] = sign * r.estimate
                orders = {
                    "judge": a_levels[label],
                    "levels": b_levels[label],
                    "paired": c_score,
                    "star": s_score,
                    "guarded": g_score,
                }
                for key, order in orders.items():
                    acc.setdefault(f"tau_{key}", []).append(tau(order, truth_l))
                    best = max(names, key=lambda n_: order[n_])
                    acc.setdefault(f"best_in_group_{key}", []).append(float(best in groups[label]))
                for key in ("levels", "paired", "star", "guarded"):
                    acc.setdefault(f"tau_ge_judge_{key}", []).append(
                        float(acc[f"tau_{key}"][-1] >= acc["tau_judge"][-1] - 1e-12)
                    )
                acc.setdefault("paired_labels_used", []).append(float(len(labels)))
                for pair_names, r in results:
                    acc.setdefault("labels_per_comparison", []).append(float(r.labels))
                    if r.low is None or r.high is None:
                        continue
                    pairs = comps[label][pair_names]
                    true_diff = float(np.sum(pairs.weights * np.array([y[k] for k in pairs.keys])))
                    acc.setdefault("cover", []).append(float(r.low - 1e-12 <= true_diff <= r.high + 1e-12))
                    acc.setdefault("width", []).append(r.high - r.low)

    result: dict[str, Any] = {
        "experiment": str(args.experiment),
        "qrels": str(args.qrels),
        "level": args.level,
        "judge": args.judge
        if args.judge == "real"
        else f"sim (false yes {args.false_yes}, false no {args.false_no})",
        "configurations": len(names),
        "queries": len({q for q, _ in real}),
        "pool_judged_pairs": len(judged),
        "draws": args.draws,
        "seed": args.seed,
        "labels_tie_group": {m: len(g) for m, g in groups.items()},
        "labels": truth,
        "judge_levels_first_draw": judge_levels(rankings, judge_of(0)),
        "differing_pairs_union": {m: len({k for p in c.values() for k in p.keys}) for m, c in comps.items()},
        "shares": {},
    }
    for share in args.share:
        block: dict[str, Any] = {"labels": max(2, round(share * len(judged)))}
        for label in MEASURES:
            block[label] = {k: round(statistics.fmean(v), 4) for k, v in stats[share][label].items() if v}
            block[label]["intervals"] = len(stats[share][label].get("cover", []))
        result["shares"][str(share)] = block
    result["seconds"] = round(time.monotonic() - started, 1)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
