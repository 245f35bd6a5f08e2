"""How much of the ranking is judged: the unjudged share at a cut-off (``unj``), the
rank-biased precision left open by unjudged documents (``rbp_resid``) and the per-query
judgement string (``relstring``)."""

from __future__ import annotations

import numpy as np

from judge.metrics._measure import Measure
from judge.metrics._query import RankedQuery
from judge.metrics._ranking import NOT_IN_POOL, UNJUDGED_IN_POOL, sequential_sum

__all__ = ["rbp_resid", "relstring", "unj"]

_RBP_RESID_P = 0.9


def unj(m: Measure, q: RankedQuery) -> float:
    k = m.cutoff or 1
    return float(np.count_nonzero(q.grades[:k] < 0)) / float(k)


def rbp_resid(m: Measure, q: RankedQuery) -> float:
    p = _RBP_RESID_P
    n = q.num_ret
    weights = np.cumprod(np.concatenate(([1.0], np.full(n, p))))
    unjudged = q.grades < 0
    if not np.any(unjudged):
        return 0.0
    return float(weights[n]) + (1 - p) * sequential_sum(np.asarray(weights[:n][unjudged], dtype=np.float64))


def relstring(m: Measure, q: RankedQuery) -> str:
    """One character per ranked document: its grade, ``>`` above 9, ``-`` not in the pool,
    ``.`` in the pool but unjudged, ``<`` another negative grade."""
    length = int(m.values[0]) if m.values else 10
    chars: list[str] = []
    for x in q.grades[: max(length, 0)]:
        rel = int(x)
        if rel > 9:
            chars.append(">")
        elif rel >= 0:
            chars.append(str(rel))
        elif rel == NOT_IN_POOL:
            chars.append("-")
        elif rel == UNJUDGED_IN_POOL:
            chars.append(".")
        else:
            chars.append("<")
    return "".join(chars)
