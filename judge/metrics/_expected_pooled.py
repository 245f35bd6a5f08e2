"""Pooled measures with each judged passage's relevance as a probability: the figure a
comparison of systems tests when the judge reports P(yes).

A pooled comparison scores every system against one pool of judgements (trec_eval over
``pool.qrels``). Thresholded, each judge verdict is a grade: yes/no cut at the template's
P(yes) threshold, or the argmax grade. Here each pooled passage is a *distribution over
grades* instead: the judge's ``[1 - P(yes), P(yes)]`` (binary) or its grade probabilities
(graded), a human label a certainty at its grade. Every formula is trec_eval's, with the
relevance of a passage replaced by its probability of being relevant ``r = P(grade >= level)``
and its gain by its expected gain ``g = sum_grade P(grade) * gain(grade)``:

* ``ndcg_cut_k`` / ``ndcg``: DCG@k of the expected gains in rank order (log2 discount,
  linear or exponential gain) over the ideal DCG@k of the pool's expected gains sorted
  ("P(yes) as the gain, nDCG over the pool's ideal"); 0 when the pool's ideal is 0.
* ``P_k``: the expected share of relevant passages in the top k, ``sum_{i<=k} r_i / k``
  (an exact expectation).
* ``recall_k``: ``sum_{i<=k} r_i / R`` with ``R = sum over the pool of r`` (the expected
  relevant retrieved over the expected relevant in the pool).
* ``recip_rank``: ``E[1 / rank of the first relevant]`` under independent relevance,
  ``sum_i r_i / i * prod_{j<i} (1 - r_j)`` (exact).
* ``success_k``: ``1 - prod_{i<=k} (1 - r_i)`` (exact).
* ``map`` / ``map_cut_k``: ``E[sum_i rel_i * precision@i] / R`` with
  ``E[rel_i * precision@i] = r_i * (1 + sum_{j<i} r_j) / i`` (exact under independence:
  ``rel_i^2 = rel_i``) over the expected relevant in the pool, ``R`` as for recall. This is
  the ratio of the expectations of AP's numerator and denominator, not ``E[AP]``.

With every probability 0 or 1 each formula is trec_eval's on the thresholded grades, so a
judge that gives certainties (human labels, the qrels judge) scores exactly as before. A
measure not listed above (bpref, infAP, R-precision, set measures, explicit per-grade gains,
``idcg=list``, ``unjudged=drop``, ``denominator=retrieved``) has no expected form here:
:func:`has_expected_form` is False and callers keep its thresholded figure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from judge.metrics._measure import Measure
from judge.metrics._ranking import ndcg

__all__ = ["EXPECTED_FORMS", "expected_pooled_values", "has_expected_form"]

#: The measure families with an expected form, and the form (written into conventions).
EXPECTED_FORMS: dict[str, str] = {
    "ndcg_cut": "DCG@k of expected gains over the pool's ideal DCG@k of expected gains",
    "ndcg": "DCG of expected gains over the pool's ideal DCG of expected gains",
    "P": "sum of P(relevant) in the top k / k (exact expectation)",
    "recall": "sum of P(relevant) in the top k / sum of P(relevant) over the pool",
    "recip_rank": "E[1/rank of the first relevant], independent relevance (exact)",
    "success": "1 - prod of (1 - P(relevant)) in the top k (exact)",
    "map": "E[sum rel_i * precision@i] / sum of P(relevant) over the pool (ratio of expectations)",
    "map_cut": "E[sum_{i<=k} rel_i * precision@i] / sum of P(relevant) over the pool",
}


def has_expected_form(m: Measure) -> bool:
    """Whether ``m`` has a probability-weighted form (:data:`EXPECTED_FORMS`) under its
    conventions; False: its thresholded figure stands."""
    if m.name not in EXPECTED_FORMS or m.unjudged != "nonrelevant":
        return False
    if m.name in ("ndcg", "ndcg_cut"):
        return not m.gains and m.idcg == "qrels"
    if m.name in ("map", "map_cut"):
        return m.ap_denominator == "qrels"
    return True


def _grade_gains(m: Measure, grades: int) -> npt.NDArray[np.float64]:
    g = np.arange(grades, dtype=np.float64)
    return g if m.gain == "linear" else np.asarray(np.exp2(g) - 1.0, dtype=np.float64)


def _check(name: str, probs: npt.ArrayLike) -> npt.NDArray[np.float64]:
    arr = np.asarray(probs, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array (passages x grades), got shape {arr.shape}")
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0.0 or np.any(arr.sum(axis=1) > 1.0 + 1e-9)):
        raise ValueError(f"{name}: each row must be probabilities in [0, 1] summing to at most 1")
    return arr


def _value(m: Measure, ranked: npt.NDArray[np.float64], pool: npt.NDArray[np.float64], level: int) -> float:
    lvl = level if m.rel is None else m.rel
    k = m.cutoff
    if m.name in ("ndcg", "ndcg_cut"):
        gains = _grade_gains(m, ranked.shape[1])
        return float(ndcg(ranked @ gains, ideal=pool @ gains, k=k if m.name == "ndcg_cut" else None))
    r = ranked[:, lvl:].sum(axis=1) if lvl < ranked.shape[1] else np.zeros(ranked.shape[0])
    top = r if k is None else r[:k]
    if m.name == "P":
        return float(top.sum()) / float(k or 1)
    if m.name == "success":
        return 1.0 - float(np.prod(1.0 - top))
    if m.name == "recip_rank":
        none_above = np.concatenate([[1.0], np.cumprod(1.0 - top)[:-1]]) if top.size else top
        return float(np.sum(top * none_above / np.arange(1, top.size + 1)))
    total = float(pool[:, lvl:].sum()) if lvl < pool.shape[1] else 0.0
    if total <= 0.0:
        return 0.0
    if m.name == "recall":
        return float(top.sum()) / total
    # map, map_cut: E[rel_i * (1 + relevant above i)] / i, summed, over the expected R.
    above = np.concatenate([[0.0], np.cumsum(top)[:-1]]) if top.size else top
    return float(np.sum(top * (1.0 + above) / np.arange(1, top.size + 1))) / total


def expected_pooled_values(
    measures: Sequence[Measure],
    ranked: npt.ArrayLike,
    pool: npt.ArrayLike,
    *,
    level: int = 1,
) -> npt.NDArray[np.float64]:
    """One query's probability-weighted value of each of ``measures`` (NaN where
    :func:`has_expected_form` is False).

    ``ranked``: the system's passages in rank order, one row each of probabilities over the
    grades 0..G-1 (a row of zeros: not in the pool, so not relevant, gain 0); ``pool``: one
    row per judged passage of the query, retrieved or not (the ideal and the relevant
    count ``R``); ``level``: the grade counted relevant (a measure's own ``rel=`` wins)."""
    r = _check("ranked", ranked)
    p = _check("pool", pool)
    width = max(r.shape[1], p.shape[1], 1)
    r = np.pad(r, ((0, 0), (0, width - r.shape[1])))
    p = np.pad(p, ((0, 0), (0, width - p.shape[1])))
    return np.array(
        [_value(m, r, p, level) if has_expected_form(m) else np.nan for m in measures], dtype=np.float64
    )
