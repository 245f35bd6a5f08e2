"""Every pair of an experiment's configurations on its objective, and the best's tie group.

The comparisons of a report test each configuration against the baseline; choosing among
configurations needs them against each other. :func:`pairwise_differences` runs the same
paired randomization test (:func:`judge.metrics.compare_scores`, the report's seed and
resamples) on every pair of configurations over the queries both scored and every
configuration has, on the tested figure (the per-query values the report's comparisons
read), Holm-adjusted over the family of all pairs on the objective. The best's tie group
(:func:`tie_group`) is the best and every configuration its test cannot tell from it
(Holm p >= 1 - confidence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from judge.metrics import Comparison, Evaluation, Measure, compare_scores, holm_adjust
from judge.systems._model import PairDifference
from judge.systems._scoring import common_queries

__all__ = ["pairwise_differences", "tie_group"]


def pairwise_differences(
    names: Sequence[str],
    evaluations: Mapping[str, Evaluation | None],
    objective: Measure,
    excluded: set[str],
    *,
    seed: int,
    resamples: int,
    confidence: float,
) -> list[PairDifference]:
    """Each pair ``(a, b)`` of ``names`` (a before b): ``diff`` = mean of b - mean of a over
    their common queries, the randomization p and its Holm adjustment over all pairs."""
    tested: list[tuple[str, str, Comparison]] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ea, eb = evaluations.get(a), evaluations.get(b)
            if ea is None or eb is None:
                continue
            common = common_queries(ea, eb, excluded)
            if not common:
                continue
            ia = {q: k for k, q in enumerate(ea.qids)}
            ib = {q: k for k, q in enumerate(eb.qids)}
            sa, sb = ea.query_scores(objective), eb.query_scores(objective)
            comparison = compare_scores(
                [float(sa[ia[q]]) for q in common],
                [float(sb[ib[q]]) for q in common],
                measure=objective.trec_name,
                baseline_name=a,
                system_name=b,
                resamples=resamples,
                seed=seed,
                confidence=confidence,
            )
            tested.append((a, b, comparison))
    adjusted = holm_adjust([c for _, _, c in tested])
    return [
        PairDifference(
            a=a,
            b=b,
            n=c.n,
            diff=c.difference,
            p_value=c.p_permutation,
            p_holm=c.p_permutation_holm,
        )
        for (a, b, _), c in zip(tested, adjusted, strict=True)
    ]


def tie_group(best: str | None, pairs: Sequence[PairDifference], alpha: float) -> list[str] | None:
    """The best and every configuration not significantly different from it (Holm p >=
    ``alpha``, or no test), in the order ``pairs`` names them; None without a best."""
    if best is None:
        return None
    group = [best]
    for p in pairs:
        if best not in (p.a, p.b):
            continue
        other = p.b if p.a == best else p.a
        if (p.p_holm is None or p.p_holm >= alpha) and other not in group:
            group.append(other)
    return group
