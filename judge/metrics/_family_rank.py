"""Binary measures of the ranking down to a cut-off: precision, recall, R-precision and its
multiples, reciprocal rank, relative precision, success, F1, hit rate, MRR over all hits."""

from __future__ import annotations

from judge.metrics._measure import Measure
from judge.metrics._query import RankedQuery
from judge.metrics._ranking import (
    f1_at_k,
    mean_reciprocal_rank_all_hits,
    precision_at_k,
    r_precision,
    recall_at_k,
    reciprocal_rank,
    success_at_k,
)
from judge.metrics._ranking import hit_rate as hit_rate_at_k

__all__ = [
    "f1",
    "hit_rate",
    "mrr_all_hits",
    "precision",
    "r_prec",
    "r_prec_mult",
    "recall",
    "recip_rank",
    "relative_p",
    "success",
]


def precision(m: Measure, q: RankedQuery) -> float:
    return precision_at_k(q.rel, m.cutoff or 1)


def recall(m: Measure, q: RankedQuery) -> float:
    return recall_at_k(q.rel, q.num_rel, m.cutoff)


def r_prec(m: Measure, q: RankedQuery) -> float:
    return r_precision(q.rel, q.num_rel)


def recip_rank(m: Measure, q: RankedQuery) -> float:
    return reciprocal_rank(q.rel, k=m.cutoff)


def r_prec_mult(m: Measure, q: RankedQuery) -> float:
    point = m.point if m.point is not None else 1.0
    cut = int(point * q.num_rel + 0.9)
    if cut <= 0:
        return 0.0
    if cut > q.num_ret:
        return float(q.num_rel_ret) / float(cut)
    return float(q.hits_at(cut)) / float(cut)


def relative_p(m: Measure, q: RankedQuery) -> float:
    k = m.cutoff or 1
    denom = min(k, q.num_rel)
    return float(q.hits_at(k)) / float(denom) if denom > 0 else 0.0


def success(m: Measure, q: RankedQuery) -> float:
    return success_at_k(q.rel, m.cutoff or 1)


def f1(m: Measure, q: RankedQuery) -> float:
    return f1_at_k(q.rel, q.num_rel, m.cutoff or 1)


def hit_rate(m: Measure, q: RankedQuery) -> float:
    return hit_rate_at_k(q.rel, q.num_rel, m.cutoff)


def mrr_all_hits(m: Measure, q: RankedQuery) -> float:
    return mean_reciprocal_rank_all_hits(q.rel, m.cutoff)
