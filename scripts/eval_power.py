"""Discriminative power of the judge's comparisons: which pairs of configurations its paired
test separates, against the pairs human labels separate.

Reads a finished ``judge experiment`` folder of ``scripts/agreement_on_choice.py`` (the
pool's verdicts with P(yes), every configuration's run, ``pool.qrels``) and the corpus's
qrels; no judge call. For every variant of the experiment's per-query objective (nDCG@10 over
the judged pool; the variants differ in the gain a pooled passage carries and in the
normaliser), every configuration's per-query figure is computed; for each of the
``C(n, 2)`` pairs of configurations the paired two-sided sign-flip test of the mean
difference is run **exactly** (all ``2^q`` sign vectors, by meet in the middle), separated
at p < 0.05 **unadjusted** (Sakai's discriminative power counts pairs this way). The
reference: NIST's labels scoring each configuration's run (nDCG@10, trec_eval's conventions,
every label). Per variant:

* ``separated``: the pairs its test separates (Sakai's discriminative power is this / pairs);
* ``agree``: of the pairs the labels separate, those whose mean difference has the labels'
  sign (the same order);
* ``separated_agree``: of the pairs the labels separate, those it separates the same way;
* ``wrong``: pairs it separates in the direction opposite to the labels' mean difference
  (over all pairs);
* ``tau``: Kendall's tau-b of its order of the configurations against the labels';
* ``best`` and whether it is in the labels' tie group (the configurations whose per-query
  labels' nDCG@10 the exact test with Holm over the comparisons with the labels' best does
  not separate from it, p >= 0.05).

Intervals over queries: the queries are resampled with replacement (``--bootstrap`` times,
seed ``--seed``); in each resample the labels' separated pairs, the variant's tests and tau
are recomputed; percentile 2.5-97.5%.

Variants (binary judge, relevant at the corpus's level):

* ``verdicts``: the thresholded verdicts, the experiment's objective (``pool.qrels``);
* ``p_yes``: each pooled passage's gain is the judge's P(yes); the ideal from the pool's
  P(yes) (trec_eval's nDCG formula with fractional gains);
* ``dcg_verdicts`` / ``dcg_p_yes``: DCG@10 with those gains, not normalised;
* ``expected``: E[nDCG@10] with each pooled passage relevant with probability P(yes),
  independently, the ideal from the drawn pool (exact, label-free);
* ``verdicts+labels`` / ``p_yes+labels``: ``--labels-per-query`` labelled pooled pairs per query
  (drawn as ``agreement_on_choice.py --adapt`` draws them, seed ``--label-seed``) filled
  in, 1 / 0 at the level, into either;
* ``adapted`` / ``adapted_p`` (with ``--adapted DIR``, the folder of ``agreement_on_choice.py
  --adapt N``'s adapted run): its thresholded verdicts, and its adapted probabilities as the
  gain (labelled pairs at their label);
* ``labels_on_pool``: NIST's labels filled into the same pool (graded gains; a pooled pair
  without a label scores 0): what the labels say about the pool the judge saw.

    python scripts/eval_power.py --experiment WORK/experiment-local_qwen2.5-coder-1.5b-q4km \\
        --qrels ../shared/data/trec_dl19/2019qrels-pass.txt --level 2 --out power-dl19.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.stats import kendalltau

sys.path.insert(0, str(Path(__file__).resolve().parent))

K = 10
ALPHA = 0.05
Matrix = npt.NDArray[np.float64]


# ---------------------------------------------------------------------------------------------
# the exact paired test and the power counts (the core; unit-tested)


def _signed_sums(d: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """All ``2^len(d)`` sums ``sum(s * d)`` over sign vectors ``s``."""
    sums = np.zeros(1)
    for x in d:
        sums = np.concatenate([sums + x, sums - x])
    return sums


def exact_sign_flip_p(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Two-sided p of the paired sign-flip test of mean(b - a), exact: the share of all
    ``2^n`` sign vectors whose |sum| is at least the observed |sum| (the observed one
    included), counted by meet in the middle (two halves of ``2^(n/2)`` sums each). Sums equal
    up to rounding (1e-9 of the total |difference|) count as equal."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    n = d.shape[0]
    if n == 0:
        return 1.0
    scale = float(np.abs(d).sum())
    if scale == 0.0:
        return 1.0
    threshold = abs(float(d.sum())) - 1e-9 * scale
    if threshold <= 0.0:
        return 1.0
    left, right = _signed_sums(d[: n // 2]), np.sort(_signed_sums(d[n // 2 :]))
    # |l + r| >= t  <=>  r >= t - l  or  r <= -t - l  (disjoint for t > 0)
    upper = right.shape[0] - np.searchsorted(right, threshold - left, side="left")
    lower = np.searchsorted(right, -threshold - left, side="right")
    return float((upper + lower).sum()) / float(2**n)


def pair_tests(
    scores: Matrix,
) -> tuple[list[tuple[int, int]], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Every pair ``(i, j)``, ``i < j``, of the rows of ``scores`` (configurations x queries):
    the pairs, mean(row j - row i) and the exact two-sided p."""
    pairs = list(itertools.combinations(range(scores.shape[0]), 2))
    diff = np.array([float(np.mean(scores[j] - scores[i])) for i, j in pairs])
    p = np.array([exact_sign_flip_p(scores[i], scores[j]) for i, j in pairs])
    return pairs, diff, p


def power_counts(
    ref_diff: npt.ArrayLike, ref_p: npt.ArrayLike, diff: npt.ArrayLike, p: npt.ArrayLike, alpha: float = ALPHA
) -> dict[str, int]:
    """The counts of one variant's tests against the reference's, pair by pair (same pair
    order): ``reference`` (pairs the reference separates), ``separated`` (pairs the variant
    separates), ``agree`` (reference-separated pairs whose variant difference has the
    reference's sign), ``separated_agree`` (reference-separated pairs the variant separates
    with that sign), ``wrong`` (pairs the variant separates with the sign opposite to the
    reference's difference; a reference difference of exactly 0 has no direction and counts
    in none)."""
    rd, rp = np.asarray(ref_diff, dtype=np.float64), np.asarray(ref_p, dtype=np.float64)
    vd, vp = np.asarray(diff, dtype=np.float64), np.asarray(p, dtype=np.float64)
    ref = rp < alpha
    sep = vp < alpha
    same = np.sign(vd) == np.sign(rd)
    opposite = np.sign(vd) * np.sign(rd) < 0
    return {
        "reference": int(ref.sum()),
        "separated": int(sep.sum()),
        "agree": int((ref & same & (rd != 0)).sum()),
        "separated_agree": int((ref & sep & same & (rd != 0)).sum()),
        "wrong": int((sep & opposite).sum()),
    }


def holm_tie_group(scores: Matrix, best: int, alpha: float = ALPHA) -> list[int]:
    """Rows not separated from ``best`` (exact test, Holm over the comparisons with it)."""
    others = [i for i in range(scores.shape[0]) if i != best]
    p = {i: exact_sign_flip_p(scores[best], scores[i]) for i in others}
    adjusted: dict[int, float] = {}
    running = 0.0
    for rank, i in enumerate(sorted(others, key=lambda j: (p[j], j))):
        running = max(running, min(1.0, (len(others) - rank) * p[i]))
        adjusted[i] = running
    return [best, *(i for i in others if adjusted[i] >= alpha)]


def tau_b(x: npt.ArrayLike, y: npt.ArrayLike) -> float | None:
    t = kendalltau(np.asarray(x), np.asarray(y)).statistic
    return None if math.isnan(t) else float(t)


# ---------------------------------------------------------------------------------------------
# per-query figures over the pool


def discounts(k: int = K) -> npt.NDArray[np.float64]:
    return 1.0 / np.log2(np.arange(2, k + 2))


def dcg(gains: Sequence[float], k: int = K) -> float:
    g = np.asarray(list(gains)[:k], dtype=np.float64)
    return float((g * discounts(k)[: g.shape[0]]).sum())


def ndcg(ranked_gains: Sequence[float], all_gains: Sequence[float], k: int = K) -> float:
    """trec_eval's nDCG@k: DCG@k of the ranking over DCG@k of every judged gain sorted
    (0 when the ideal is 0)."""
    ideal = dcg(sorted((g for g in all_gains if g > 0), reverse=True), k)
    return dcg(ranked_gains, k) / ideal if ideal > 0 else 0.0


def poisson_binomial(p: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """P(M = m), m = 0..n, for M the count of successes of independent Bernoulli(p_i)."""
    dist = np.ones(1)
    for x in np.asarray(p, dtype=np.float64):
        dist = np.concatenate([dist * (1.0 - x), [0.0]]) + np.concatenate([[0.0], dist * x])
    return dist


def expected_pooled_ndcg(
    ranked_p: Sequence[float], pool_p: Sequence[float], position_in_pool: Sequence[int], k: int = K
) -> float:
    """E[DCG@k / IDCG@k] with every pooled passage relevant (gain 1) with its probability,
    independently; the ideal counts the drawn pool's relevant passages. ``ranked_p``: the
    ranking's passages' probabilities (top k, all pooled); ``position_in_pool``: each one's
    index in ``pool_p``. Exact: E[rel_d / IDCG(1 + M_-d)] = p_d E[1 / IDCG(1 + M_-d)], M_-d the
    other pooled passages' relevant count (Poisson-binomial)."""
    disc = discounts(k)
    idcg = np.concatenate([[0.0], np.cumsum(disc)])  # idcg[m] for m <= k relevant
    pool = np.asarray(pool_p, dtype=np.float64)
    total = 0.0
    for r, (p, at) in enumerate(zip(ranked_p[:k], position_in_pool[:k], strict=True)):
        if p <= 0:
            continue
        rest = poisson_binomial(np.delete(pool, at))  # P(M_-d = m), m = 0..len-1
        m = np.arange(rest.shape[0]) + 1
        inv = 1.0 / idcg[np.minimum(m, k)]
        total += disc[r] * p * float((rest * inv).sum())
    return total


# ---------------------------------------------------------------------------------------------
# reading a finished experiment


def read_trec_run(path: Path) -> dict[str, list[str]]:
    """``{qid: [docno, ...]}`` in trec_eval's order (score descending, then docno descending)."""
    rows: dict[str, list[tuple[float, str]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            qid, _, docno, _, score, *_ = line.split()
            rows.setdefault(qid, []).append((float(score), docno))
    return {q: [d for _, d in sorted(r, reverse=True)] for q, r in rows.items()}


def read_qrels_grades(path: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            qid, _, docno, grade = line.split()[:4]
            out.setdefault(qid, {})[docno] = float(grade)
    return out


def read_pool(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    verdicts: dict[tuple[str, str], dict[str, Any]] = {}
    for line in (folder / "pool.judged.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            for docno, v in zip(rec["docnos"], rec["verdicts"], strict=True):
                verdicts[(str(rec["id"]), str(docno))] = v
    return verdicts


def configuration_runs(folder: Path) -> dict[str, Path]:
    """``{name: run}``: the runs the experiment scored (``runs/NAME.run``: the engine's order,
    ties included, as ranks), which every figure here scores too."""
    return {p.name.removesuffix(".run"): p for p in sorted((folder / "runs").glob("*.run"))}


# ---------------------------------------------------------------------------------------------
# the variants


def draw_labels(
    pool: dict[str, list[str]], grades: dict[tuple[str, str], float], n: int, level: float, seed: int
) -> dict[tuple[str, str], int]:
    """``{(qid, docno): 1 / 0}``: per query up to ``n`` pooled pairs the labels grade, as
    ``agreement_on_choice.py --adapt`` draws them (balanced relevant / not, seeded)."""
    from agreement_on_choice import draw_examples

    int_grades = {k: int(v) for k, v in grades.items()}
    drawn = draw_examples(pool, int_grades, n, int(level), seed)
    return {(q, d): int(g >= level) for q, pairs in drawn.items() for d, g in pairs}


Gains = dict[str, dict[str, float]]


def pooled_scores(
    runs: dict[str, dict[str, list[str]]], qids: list[str], gains: Gains, *, normalise: bool
) -> Matrix:
    """configurations x queries: nDCG@10 (or DCG@10) of each run with ``gains`` (a pooled
    passage's gain; anything else 0), the ideal over the query's gains."""
    out = np.zeros((len(runs), len(qids)))
    for i, ranking in enumerate(runs.values()):
        for j, q in enumerate(qids):
            g = gains.get(q, {})
            ranked = [g.get(d, 0.0) for d in ranking.get(q, [])[:K]]
            out[i, j] = ndcg(ranked, list(g.values())) if normalise else dcg(ranked)
    return out


def expected_scores(runs: dict[str, dict[str, list[str]]], qids: list[str], prob: Gains) -> Matrix:
    out = np.zeros((len(runs), len(qids)))
    for j, q in enumerate(qids):
        docs = sorted(prob.get(q, {}))
        at = {d: i for i, d in enumerate(docs)}
        pool_p = [prob[q][d] for d in docs]
        for i, ranking in enumerate(runs.values()):
            # a ranked passage left unjudged is not relevant (as pool.qrels leaves it out)
            top = ranking.get(q, [])[:K]
            out[i, j] = expected_pooled_ndcg(
                [prob[q].get(d, 0.0) for d in top], pool_p, [at.get(d, -1) for d in top]
            )
    return out


def _gains(pairs: dict[tuple[str, str], float]) -> Gains:
    out: Gains = {}
    for (q, d), g in pairs.items():
        out.setdefault(q, {})[d] = g
    return out


def variants(
    folder: Path,
    runs: dict[str, dict[str, list[str]]],
    qids: list[str],
    grades: dict[tuple[str, str], float],
    level: float,
    labels_per_query: int,
    label_seed: int,
    adapted: Path | None,
) -> dict[str, Matrix]:
    pool = read_pool(folder)
    judged = {k: v for k, v in pool.items() if v.get("verdict") in ("yes", "no")}
    thresholded = {
        (q, d): float(g)
        for q, docs in read_qrels_grades(folder / "pool.qrels").items()
        for d, g in docs.items()
    }
    # a judge without probabilities (the labels as a judge): P(yes) is its verdict
    p_yes = {
        k: float(v["p_yes"]) if v.get("p_yes") is not None else float(v["verdict"] == "yes")
        for k, v in judged.items()
    }
    per_query: dict[str, list[str]] = {}
    for q, d in pool:
        per_query.setdefault(q, []).append(d)
    filled = draw_labels(per_query, grades, labels_per_query, level, label_seed)
    out: dict[str, Matrix] = {
        "verdicts": pooled_scores(runs, qids, _gains(thresholded), normalise=True),
        "p_yes": pooled_scores(runs, qids, _gains(p_yes), normalise=True),
        "dcg_verdicts": pooled_scores(runs, qids, _gains(thresholded), normalise=False),
        "dcg_p_yes": pooled_scores(runs, qids, _gains(p_yes), normalise=False),
        "expected": expected_scores(runs, qids, _gains(p_yes)),
        "verdicts+labels": pooled_scores(
            runs, qids, _gains({**thresholded, **{k: float(v) for k, v in filled.items()}}), normalise=True
        ),
        "p_yes+labels": pooled_scores(
            runs, qids, _gains({**p_yes, **{k: float(v) for k, v in filled.items()}}), normalise=True
        ),
    }
    if adapted is not None:
        ad = read_pool(adapted)
        ad_thr = {
            (q, d): float(g)
            for q, docs in read_qrels_grades(adapted / "pool.qrels").items()
            for d, g in docs.items()
        }
        ad_p: dict[tuple[str, str], float] = {}
        for k, v in ad.items():
            if k in filled:
                ad_p[k] = float(filled[k])
            elif v.get("p_adapted") is not None:
                ad_p[k] = float(v["p_adapted"])
            elif v.get("p_yes") is not None:
                ad_p[k] = float(v["p_yes"])
            elif v.get("verdict") in ("yes", "no"):
                ad_p[k] = float(v["verdict"] == "yes")
        out["adapted"] = pooled_scores(runs, qids, _gains(ad_thr), normalise=True)
        out["adapted_p"] = pooled_scores(runs, qids, _gains(ad_p), normalise=True)
    on_pool = {k: grades.get(k, 0.0) for k in pool}
    out["labels_on_pool"] = pooled_scores(runs, qids, _gains(on_pool), normalise=True)
    return out


# ---------------------------------------------------------------------------------------------
# the measurement


def measure(scores: Matrix, ref: Matrix, names: list[str]) -> dict[str, Any]:
    """One variant (configurations x queries) against the reference (the labels)."""
    _, rd, rp = pair_tests(ref)
    _, vd, vp = pair_tests(scores)
    counts = power_counts(rd, rp, vd, vp)
    ref_means, means = ref.mean(axis=1), scores.mean(axis=1)
    best = int(np.argmax(means))
    group = holm_tie_group(ref, int(np.argmax(ref_means)))
    return {
        **counts,
        "tau": tau_b(means, ref_means),
        "best": names[best],
        "best_in_tie_group": best in group,
    }


def bootstrap(
    scores: dict[str, Matrix], ref: Matrix, resamples: int, seed: int, baseline: str = "verdicts"
) -> dict[str, dict[str, Any]]:
    """Percentile 95% intervals of the counts and tau, queries resampled with replacement;
    and, paired on the same resamples, the variant's ``separated_agree`` minus the
    ``baseline``'s: its interval and the shares of resamples where the variant separates
    more / fewer of the labels' pairs the same way (``vs_baseline``)."""
    rng = np.random.default_rng(seed)
    q = ref.shape[1]
    keys = ("reference", "separated", "agree", "separated_agree", "wrong", "tau", "share")
    draws: dict[str, dict[str, list[float]]] = {v: {k: [] for k in keys} for v in scores}
    for _ in range(resamples):
        idx = rng.integers(0, q, size=q)
        r = ref[:, idx]
        _, rd, rp = pair_tests(r)
        for v, s in scores.items():
            x = s[:, idx]
            _, vd, vp = pair_tests(x)
            c = power_counts(rd, rp, vd, vp)
            for k, val in c.items():
                draws[v][k].append(float(val))
            t = tau_b(x.mean(axis=1), r.mean(axis=1))
            draws[v]["tau"].append(float("nan") if t is None else t)
            draws[v]["share"].append(
                c["separated_agree"] / c["reference"] if c["reference"] else float("nan")
            )
    out: dict[str, dict[str, Any]] = {}
    for v, d in draws.items():
        out[v] = {}
        for k, vals in d.items():
            a = np.array(vals)
            a = a[~np.isnan(a)]
            out[v][k] = (
                [float(np.percentile(a, 2.5)), float(np.percentile(a, 97.5))] if a.size else [None, None]
            )
        if baseline in draws:
            gain = np.array(d["separated_agree"]) - np.array(draws[baseline]["separated_agree"])
            out[v]["vs_baseline"] = {
                "baseline": baseline,
                "separated_agree_difference": [
                    float(np.percentile(gain, 2.5)),
                    float(np.percentile(gain, 97.5)),
                ],
                "more": float(np.mean(gain > 0)),
                "fewer": float(np.mean(gain < 0)),
            }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    folder: Path = args.experiment
    named = configuration_runs(folder)
    runs = {n: read_trec_run(p) for n, p in named.items()}
    names = list(runs)
    qrels = read_qrels_grades(args.qrels)
    qids = sorted({q for r in runs.values() for q in r if q in qrels})
    grades = {(q, d): g for q, docs in qrels.items() for d, g in docs.items()}
    ref = pooled_scores(runs, qids, {q: qrels[q] for q in qids}, normalise=True)
    scores = variants(
        folder, runs, qids, grades, args.level, args.labels_per_query, args.label_seed, args.adapted
    )
    scores = {"labels": ref, **scores}
    result: dict[str, Any] = {
        "experiment": str(folder),
        "queries": qids,
        "configurations": names,
        "pairs": len(names) * (len(names) - 1) // 2,
        "alpha": ALPHA,
        "test": "paired two-sided sign-flip test of the mean difference, exact (2^q signs), unadjusted",
        "labels_per_query": args.labels_per_query,
        "label_seed": args.label_seed,
        "means": {
            v: dict(zip(names, (float(x) for x in s.mean(axis=1)), strict=True)) for v, s in scores.items()
        },
        "labels_tie_group": [names[i] for i in holm_tie_group(ref, int(np.argmax(ref.mean(axis=1))))],
        "variants": {v: measure(s, ref, names) for v, s in scores.items()},
    }
    if args.bootstrap:
        result["bootstrap"] = {
            "resamples": args.bootstrap,
            "seed": args.seed,
            "method": "percentile, queries resampled",
        }
        result["intervals"] = bootstrap(scores, ref, args.bootstrap, args.seed)
    return result


def _interval(intervals: dict[str, list[float | None]], key: str, digits: int) -> str:
    lo, hi = intervals.get(key, [None, None])
    return "" if lo is None or hi is None else f" ({lo:.{digits}f}-{hi:.{digits}f})"


def table(result: dict[str, Any]) -> str:
    """Markdown rows of one set: variant, pairs separated, the labels' separated pairs in the
    same order, those separated the same way, wrong way, tau, the best and the tie group
    (intervals in brackets), and the same-way count against the thresholded verdicts' on the
    same resamples (the difference's interval; the shares of resamples with more / fewer)."""
    rows = []
    for v, m in result["variants"].items():
        i = result.get("intervals", {}).get(v, {})
        tau = "—" if m["tau"] is None else f"{m['tau']:.3f}"
        vs = i.get("vs_baseline")
        versus = (
            f"{vs['separated_agree_difference'][0]:+.0f} to {vs['separated_agree_difference'][1]:+.0f}; "
            f"{vs['more']:.0%} / {vs['fewer']:.0%}"
            if vs and v != vs["baseline"]
            else "—"
        )
        rows.append(
            f"| {v} | {m['separated']}{_interval(i, 'separated', 0)} | {m['agree']} / {m['reference']} "
            f"| **{m['separated_agree']}**{_interval(i, 'separated_agree', 0)} "
            f"| {m['wrong']}{_interval(i, 'wrong', 0)} | {tau}{_interval(i, 'tau', 2)} "
            f"| {m['best']} | {'yes' if m['best_in_tie_group'] else 'no'} | {versus} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", type=Path, help="a finished experiment folder")
    ap.add_argument("--qrels", type=Path, help="the corpus's labels")
    ap.add_argument("--level", type=float, default=1, help="labels: grade >= L is relevant (DL 2019: 2)")
    ap.add_argument("--labels-per-query", type=int, default=4)
    ap.add_argument("--label-seed", type=int, default=0)
    ap.add_argument(
        "--adapted", type=Path, default=None, help="agreement_on_choice.py --adapt's adapted run folder"
    )
    ap.add_argument("--bootstrap", type=int, default=1000, help="resamples of the queries (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--render", type=Path, default=None, help="print the table of a finished --out JSON")
    args = ap.parse_args()
    if args.render:
        print(table(json.loads(args.render.read_text(encoding="utf-8"))))
        return 0
    if args.experiment is None or args.qrels is None:
        ap.error("--experiment and --qrels are required")
    result = run(args)
    text = json.dumps(result, ensure_ascii=False, indent=2) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
