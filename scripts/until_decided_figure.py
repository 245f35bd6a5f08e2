"""Until-decided judging on the expected figure against the thresholded one, on synthetic sweeps.

Each sweep: ``--queries`` queries, ``--systems`` configurations ranking ``--depth`` passages
from a per-query candidate set; every passage has a latent relevance, the fake judge's
P(yes) is a noisy Beta draw around it, and a configuration ranks by the latent relevance
plus its own noise (the first is the baseline). Both runs judge with the same oracle
(thresholded label: P(yes) >= 0.5; expected: also the P(yes) as the pair's distribution),
the same prior, seed, batch and draws (``judge.systems._adaptive.simulate``). Printed per
sweep and figure: pairs judged until every decision held, the pool's pairs, and whether
the decisions equal those of that figure on the fully judged pool.

    python scripts/until_decided_figure.py --sweeps 3
"""

from __future__ import annotations

import argparse
import copy
import json

import numpy as np

from judge.metrics import parse_measure_args
from judge.systems._adaptive import (
    UNKNOWN,
    Problem,
    ProblemQuery,
    SignFlips,
    decide,
    score_states,
    simulate,
)


def sweep(
    rng: np.random.Generator, queries: int, systems: int, depth: int, candidates: int
) -> tuple[Problem, list[np.ndarray]]:
    """A problem with every pooled pair unknown, and each query's P(yes) per docno."""
    noise = np.linspace(0.8, 1.2, systems)
    out: list[ProblemQuery] = []
    p_yes: list[np.ndarray] = []
    signatures: dict[int, int] = {}  # which configurations pooled a passage -> its group
    for qi in range(queries):
        latent = rng.beta(0.7, 1.6, size=candidates)
        judge = np.clip(rng.beta(1 + 6 * latent, 1 + 6 * (1 - latent)), 0.0, 1.0)
        lists = [
            np.argsort(-(latent + rng.normal(0, 0.35 * noise[s], candidates)))[:depth] for s in range(systems)
        ]
        pooled = sorted({int(d) for lst in lists for d in lst})
        where = {d: i for i, d in enumerate(pooled)}
        ranks = [np.array([where[int(d)] for d in lst], dtype=np.intp) for lst in lists]
        best = np.zeros(len(pooled), dtype=np.int64)
        masks = [0] * len(pooled)
        for bit, idx in enumerate(ranks):
            for r, i in enumerate(idx.tolist()):
                best[i] = r + 1 if best[i] == 0 else min(best[i], r + 1)
                masks[i] |= 1 << bit
        group = np.array([signatures.setdefault(m, len(signatures)) for m in masks], dtype=np.intp)
        out.append(
            ProblemQuery(
                token=f"q{qi:03d}",
                docnos=[str(d) for d in pooled],
                labels=np.full(len(pooled), UNKNOWN, dtype=np.int64),
                prior=np.full(len(pooled), 0.5),
                ranks=ranks,
                best_rank=best,
                group=group,
            )
        )
        p_yes.append(judge[pooled])
    problem = Problem(
        queries=out,
        systems=[f"s{s}" for s in range(systems)],
        measures=tuple(parse_measure_args(["ndcg_cut_10"])),
        resamples=2000,
    )
    return problem, p_yes


def full_decisions(problem: Problem, p_yes: list[np.ndarray], expected: bool) -> list[str]:
    full = copy.deepcopy(problem)
    full.expected = expected
    for q, p in zip(full.queries, p_yes, strict=True):
        q.labels = (p >= 0.5).astype(np.int64)
        if expected:
            q.soft = {j: np.array([1 - x, x, 0.0, 0.0]) for j, x in enumerate(p.tolist())}
    states = [q.labels[None, :].copy() for q in full.queries]
    values = score_states(full, states, 1)
    flips = SignFlips(len(full.queries), full.resamples, full.seed)
    return [d.label for d in decide(full, values, flips)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--systems", type=int, default=3)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=25)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--batch", type=int, default=10)
    args = ap.parse_args()
    rows = []
    for seed in range(args.sweeps):
        problem, p_yes = sweep(
            np.random.default_rng(seed), args.queries, args.systems, args.depth, args.candidates
        )
        pool = problem.unknown_count()
        for figure in ("thresholded", "expected"):
            run = copy.deepcopy(problem)
            run.expected = figure == "expected"

            def oracle(qi: int, j: int, probs: list[np.ndarray] = p_yes) -> int:
                return int(probs[qi][j] >= 0.5)

            def soft(
                qi: int, j: int, expected: bool = run.expected, probs: list[np.ndarray] = p_yes
            ) -> np.ndarray | None:
                x = float(probs[qi][j])
                return np.array([1 - x, x, 0.0, 0.0]) if expected else None

            decisions, judged = simulate(
                run, oracle, draws=args.draws, batch=args.batch, seed=seed, soft_oracle=soft
            )
            truth = full_decisions(problem, p_yes, run.expected)
            row = {
                "sweep": seed,
                "figure": figure,
                "judged": judged,
                "pool": pool,
                "decisions": [d.label for d in decisions],
                "full_pool": truth,
                "agree": [d.label for d in decisions] == truth,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    for figure in ("thresholded", "expected"):
        mine = [r for r in rows if r["figure"] == figure]
        judged = sum(int(r["judged"]) for r in mine)
        pool = sum(int(r["pool"]) for r in mine)
        agree = sum(bool(r["agree"]) for r in mine)
        print(
            f"{figure}: judged {judged} of {pool} pairs ({judged / pool:.1%}); decisions as the full pool in "
            f"{agree} of {len(mine)} sweeps"
        )


if __name__ == "__main__":
    main()
