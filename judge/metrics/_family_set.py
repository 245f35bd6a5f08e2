"""Measures of the retrieved set as a whole, rank order ignored: the counts (``num_ret``,
``num_rel``, ``num_rel_ret``, ``num_nonrel_judged_ret``), set precision, recall, relative
precision, MAP and F, and the linear ``utility``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from judge.metrics._measure import Measure
from judge.metrics._query import RankedQuery

__all__ = [
    "num_nonrel_judged_ret",
    "query_count",
    "set_f",
    "set_map",
    "set_p",
    "set_recall",
    "set_relative_p",
    "utility",
]


def query_count(attr: str) -> Callable[[Measure, RankedQuery], float]:
    """The formula that reads the count ``attr`` of the query (``num_ret``, ``num_rel`` ...)."""

    def compute(m: Measure, q: RankedQuery) -> float:
        return float(getattr(q, attr))

    return compute


def num_nonrel_judged_ret(m: Measure, q: RankedQuery) -> float:
    g = q.grades
    return float(np.count_nonzero((g >= 0) & (g < q.level)))


def set_p(m: Measure, q: RankedQuery) -> float:
    return float(q.num_rel_ret) / float(q.num_ret) if q.num_ret else 0.0


def set_relative_p(m: Measure, q: RankedQuery) -> float:
    denom = min(q.num_ret, q.num_rel)
    return float(q.num_rel_ret) / float(denom) if denom > 0 else 0.0


def set_recall(m: Measure, q: RankedQuery) -> float:
    return float(q.num_rel_ret) / float(q.num_rel) if q.num_rel else 0.0


def set_map(m: Measure, q: RankedQuery) -> float:
    if q.num_ret == 0 or q.num_rel == 0:
        return 0.0
    return (float(q.num_rel_ret) / float(q.num_ret)) * (float(q.num_rel_ret) / float(q.num_rel))


def set_f(m: Measure, q: RankedQuery) -> float:
    if q.num_ret == 0 or q.num_rel == 0 or q.num_rel_ret == 0:
        return 0.0
    beta = m.values[0] if m.values else 1.0
    p = float(q.num_rel_ret) / float(q.num_ret)
    r = float(q.num_rel_ret) / float(q.num_rel)
    return (beta + 1.0) * p * r / (beta * p + r)


def utility(m: Measure, q: RankedQuery) -> float:
    a, b, c, d = m.values or (1.0, -1.0, 0.0, 0.0)
    rr, ret, rel = q.num_rel_ret, q.num_ret, q.num_rel
    return a * rr + b * (ret - rr) + c * (rel - rr) + d * (0 + rr - ret - rel)
