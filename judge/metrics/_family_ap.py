"""Average precision and its relatives: AP (full and cut), bpref, infAP, interpolated
precision at recall points and the 11-point average, as trec_eval computes them."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from judge.metrics._measure import Measure
from judge.metrics._query import RankedQuery
from judge.metrics._ranking import UNJUDGED_IN_POOL, average_precision, sequential_sum

__all__ = ["ELEVEN_POINTS", "ap", "ap_cut", "bpref", "eleven_pt_avg", "inf_ap", "iprec_at_recall"]

ELEVEN_POINTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_INFAP_EPSILON = 0.00001


def _ap_denominator(m: Measure, q: RankedQuery) -> int | None:
    return None if m.ap_denominator == "retrieved" else q.num_rel


def ap(m: Measure, q: RankedQuery) -> float:
    return average_precision(q.rel, n_relevant=_ap_denominator(m, q))


def ap_cut(m: Measure, q: RankedQuery) -> float:
    return average_precision(q.rel, n_relevant=_ap_denominator(m, q), k=m.cutoff)


def _bpref_terms(q: RankedQuery) -> tuple[npt.NDArray[np.float64], int]:
    g = q.grades
    nonrel = (g >= 0) & (g < q.level)
    nonrel_before = np.cumsum(nonrel, dtype=np.int64)[q.rel]
    r = q.num_rel
    terms = np.ones(nonrel_before.shape[0], dtype=np.float64)
    seen = nonrel_before > 0
    if np.any(seen):
        denom = float(min(q.num_nonrel_judged, r))
        terms[seen] = 1.0 - np.minimum(nonrel_before[seen], r).astype(np.float64) / denom
    return terms, r


def bpref(m: Measure, q: RankedQuery) -> float:
    terms, r = _bpref_terms(q)
    total = sequential_sum(terms)
    return total / float(r) if r else total


def inf_ap(m: Measure, q: RankedQuery) -> float:
    g = q.grades
    unjudged = g == UNJUDGED_IN_POOL  # documents not in the pool at all are simply skipped
    nonrel = (g >= 0) & (g < q.level)
    rel_idx = np.flatnonzero(q.rel)
    if rel_idx.shape[0] == 0:
        return 0.0
    rel_so_far = np.arange(1, rel_idx.shape[0] + 1, dtype=np.int64)
    nonrel_so_far = np.cumsum(nonrel, dtype=np.int64)[rel_idx]
    unj_so_far = np.cumsum(unjudged, dtype=np.int64)[rel_idx]
    fj = rel_idx.astype(np.float64)
    seen = (rel_so_far - 1 + nonrel_so_far + unj_so_far).astype(np.float64)
    prior = rel_so_far - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = 1.0 / (fj + 1.0) + (fj / (fj + 1.0)) * (seen / fj) * (
            (prior.astype(np.float64) + _INFAP_EPSILON)
            / ((prior + nonrel_so_far).astype(np.float64) + 2 * _INFAP_EPSILON)
        )
    terms = np.where(rel_idx == 0, 1.0, terms)
    total = sequential_sum(terms)
    return total / float(q.num_rel) if q.num_rel else total


def _iprec_values(q: RankedQuery, points: tuple[float, ...]) -> list[float]:
    """Interpolated precision at recall points, exactly as trec_eval (lround of p*R)."""
    num_rel, n_rel_ret, n_ret = q.num_rel, q.num_rel_ret, q.num_ret
    if n_ret == 0 or n_rel_ret == 0:
        return [0.0 for _ in points]
    ranks = np.arange(1, n_ret + 1, dtype=np.float64)
    precision = q.cum_rel.astype(np.float64) / ranks
    best_after = np.maximum.accumulate(precision[::-1])[::-1]
    rel_positions = np.flatnonzero(q.rel)
    out: list[float] = []
    for p in points:
        cut = math.floor(p * num_rel + 0.5)  # lround for non-negative values
        if cut > n_rel_ret:
            out.append(0.0)
        else:
            out.append(float(best_after[rel_positions[max(cut, 1) - 1]]))
    return out


def iprec_at_recall(m: Measure, q: RankedQuery) -> float:
    point = m.point if m.point is not None else 0.0
    return _iprec_values(q, (point,))[0]


def eleven_pt_avg(m: Measure, q: RankedQuery) -> float:
    points = m.values or ELEVEN_POINTS
    values = _iprec_values(q, points)
    total = 0.0
    for v in reversed(values):  # trec_eval adds from the highest recall point down
        total += v
    return total / float(len(points))
