"""Gain-based measures: trec_eval's DCG family with per-grade gains (``ndcg``, ``dcg``,
``ideal_dcg``, ``ndcg_rel``, ``Rndcg``, ``G``), the cut-off forms (``ndcg_cut``, ``dcg_cut``),
binary ``binG`` and rank-biased precision (``rbp``).

The per-grade gains follow trec_eval's ``setup_gains``: a grade's gain is the grade
(linear) or ``2**grade - 1`` (exponential) unless the measure lists it (``ndcg.1=3,2=9``).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from judge.metrics._measure import Measure
from judge.metrics._query import RankedQuery
from judge.metrics._ranking import dcg as dcg_at_k
from judge.metrics._ranking import discounts, sequential_sum
from judge.metrics._ranking import ndcg as ndcg_at_k

__all__ = [
    "bin_g",
    "dcg",
    "dcg_cut",
    "g_measure",
    "ideal_dcg",
    "ndcg",
    "ndcg_cut",
    "ndcg_rel",
    "rbp",
    "rndcg",
]


def bin_g(m: Measure, q: RankedQuery) -> float:
    rel_idx = np.flatnonzero(q.rel)
    if rel_idx.shape[0] == 0:
        return 0.0
    rel_so_far = np.arange(1, rel_idx.shape[0] + 1)
    # 1 / log2(3 + i - rel_so_far); discounts()[x] == log2(x + 2)
    terms = 1.0 / discounts(q.num_ret + 2)[1 + rel_idx - rel_so_far]
    return sequential_sum(terms) / float(q.num_rel)


def _gain_levels(m: Measure, q: RankedQuery) -> list[tuple[int, float, int]]:
    """trec_eval's ``setup_gains``: (level, gain, count) sorted by gain ascending."""
    counts = q.rel_levels
    explicit = dict(m.gains)
    levels: dict[int, tuple[float, int]] = {level: (g, 0) for level, g in m.gains}
    for level in range(counts.shape[0]):
        if level in explicit:
            levels[level] = (explicit[level], int(counts[level]))
        else:
            default = float(level) if m.gain == "linear" else float(2**level - 1)
            levels[level] = (default, int(counts[level]))
    ordered = sorted(((lv, g, c) for lv, (g, c) in levels.items()), key=lambda t: t[1])
    return ordered


def _result_gains(levels: list[tuple[int, float, int]], grades: npt.NDArray[np.int64]) -> list[float]:
    lookup = {level: g for level, g, _ in levels}
    return [lookup.get(int(x), 0.0) for x in grades]


def _ideal_positive(levels: list[tuple[int, float, int]]) -> npt.NDArray[np.float64]:
    gains: list[float] = []
    for _, g, c in reversed(levels):
        if g <= 0.0:
            break
        gains.extend([g] * c)
    return np.asarray(gains, dtype=np.float64)


def _graded_ndcg(m: Measure, q: RankedQuery) -> tuple[float, float]:
    """(DCG, IDCG) of trec_eval's ``ndcg`` (full list, per-grade gains)."""
    if m.idcg == "list":
        g = q.grades
        own = RankedQuery(g[g >= 0], qrels=g[g >= 0], relevance_level=q.level)
        levels = _gain_levels(m, own)
    else:
        levels = _gain_levels(m, q)
    results = np.asarray(_result_gains(levels, q.grades), dtype=np.float64)
    ideal = _ideal_positive(levels)
    return (
        sequential_sum(results / discounts(results.shape[0])),
        sequential_sum(ideal / discounts(ideal.shape[0])),
    )


def ndcg(m: Measure, q: RankedQuery) -> float:
    results_dcg, ideal_dcg = _graded_ndcg(m, q)
    return results_dcg / ideal_dcg if ideal_dcg > 0.0 else 0.0


def dcg(m: Measure, q: RankedQuery) -> float:
    return _graded_ndcg(m, q)[0]


def ideal_dcg(m: Measure, q: RankedQuery) -> float:
    return _graded_ndcg(m, q)[1]


def ndcg_cut(m: Measure, q: RankedQuery) -> float:
    ideal = q.grades[q.grades >= 0] if m.idcg == "list" else q.judged
    return ndcg_at_k(q.grades, ideal=ideal, k=m.cutoff, gain=m.gain)


def dcg_cut(m: Measure, q: RankedQuery) -> float:
    return dcg_at_k(q.grades, k=m.cutoff, gain=m.gain)


def ndcg_rel(m: Measure, q: RankedQuery) -> float:
    levels = _gain_levels(m, q)
    results = np.asarray(_result_gains(levels, q.grades), dtype=np.float64)
    ideal = _ideal_positive(levels)
    length = max(results.shape[0], ideal.shape[0])
    disc = discounts(length)
    cum_results = np.cumsum(results / disc[: results.shape[0]]) if results.shape[0] else np.zeros(0)
    ideal_padded = np.zeros(length)
    ideal_padded[: ideal.shape[0]] = ideal
    cum_ideal = np.cumsum(ideal_padded / disc)
    num_rel = ideal.shape[0]
    positive = np.flatnonzero(results > 0)
    total = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in positive:
            total += float(cum_results[i] / cum_ideal[i])
        final_results = float(cum_results[-1]) if cum_results.shape[0] else 0.0
        final_ideal = float(cum_ideal[-1]) if cum_ideal.shape[0] else 0.0
        total += float(np.float64(num_rel - positive.shape[0]) * final_results / np.float64(final_ideal))
    if total > 0.0:
        return float(total / num_rel)
    return 0.0


def _dcg_from(lookup: dict[int, float], grades: np.ndarray, start: int, dcg: float) -> float:
    """``dcg`` plus the discounted gains of the ranks from ``start`` on, added in rank order."""
    for i in range(start, grades.shape[0]):
        gain = lookup.get(int(grades[i]), 0.0)
        if gain != 0:
            dcg += gain / math.log2(i + 2)
    return dcg


def rndcg(m: Measure, q: RankedQuery) -> float:
    """trec_eval's experimental ``Rndcg`` (nDCG averaged at the R-level boundaries)."""
    if q.num_rel == 0:
        return 0.0
    levels = _gain_levels(m, q)
    lookup = {level: g for level, g, _ in levels}
    grades = q.grades
    n_ret = grades.shape[0]
    results_dcg = ideal_dcg = total = 0.0
    cur = len(levels) - 1
    ideal_gain = levels[cur][1] if cur >= 0 else 0.0
    old_ideal = ideal_gain
    changes = 0
    at_level = 0
    i = 0

    def step_ideal() -> None:
        """The ideal ranking one rank on; where its gain changes (an R-level boundary), the
        nDCG so far counts."""
        nonlocal at_level, cur, ideal_gain, old_ideal, total, changes
        at_level += 1
        while cur >= 0 and at_level > levels[cur][2]:
            at_level = 1
            cur -= 1
            ideal_gain = levels[cur][1] if cur >= 0 else 0.0
        if old_ideal != ideal_gain:
            if ideal_dcg > 0.0:
                total += results_dcg / ideal_dcg
                changes += 1
            old_ideal = ideal_gain

    while i < n_ret and ideal_gain > 0.0:
        results_gain = lookup.get(int(grades[i]), 0.0)
        step_ideal()
        if results_gain != 0:
            results_dcg += results_gain / math.log2(i + 2)
        if ideal_gain > 0.0:
            ideal_dcg += ideal_gain / math.log2(i + 2)
        i += 1
    if i < n_ret:
        results_dcg = _dcg_from(lookup, grades, i, results_dcg)
        i = n_ret
        if ideal_dcg > 0.0:
            total += results_dcg / ideal_dcg
            changes += 1
    while ideal_gain > 0.0:
        step_ideal()
        if ideal_gain > 0.0:
            ideal_dcg += ideal_gain / math.log2(i + 2)
        i += 1
    return total / changes if changes else 0.0


def g_measure(m: Measure, q: RankedQuery) -> float:
    """trec_eval's experimental ``G`` (gain discounted by the ideal-minus-actual gain so far)."""
    levels = _gain_levels(m, q)
    results = _result_gains(levels, q.grades)
    ideal = _ideal_positive(levels)
    sum_results = sum_cost = results_g = 0.0
    for i, results_gain in enumerate(results):
        sum_results += results_gain
        ideal_gain = float(ideal[i]) if i < ideal.shape[0] else 0.0
        sum_cost += ideal_gain if ideal_gain >= 1.0 else 1.0
        if results_gain != 0:
            results_g += results_gain / math.log2(2 + sum_cost - sum_results)
    sum_ideal = sequential_sum(ideal)
    return results_g / sum_ideal if sum_ideal > 0.0 else 0.0


def rbp(m: Measure, q: RankedQuery) -> float:
    p = m.values[0] if m.values else 0.9
    levels = _gain_levels(m, q)
    gains = [g for _, g, _ in levels]
    if gains:
        low, high = min(gains), max(gains)
        if low < 0 or high > 1:
            levels = [(lv, (g - low) / (high - low), c) for lv, g, c in levels]
    results = np.asarray(_result_gains(levels, q.grades), dtype=np.float64)
    weights = np.cumprod(np.concatenate(([1.0], np.full(max(results.shape[0] - 1, 0), p))))
    return (1.0 - p) * sequential_sum(results * weights[: results.shape[0]])
