"""Pure ranking metrics: one score for one ranked list, from numpy arrays.

Every function takes the relevance of a ranked list *in rank order* (index 0 is rank 1)
and returns a ``float``. Nothing here reads files, averages over queries or calls a model.

Conventions are explicit keyword arguments:

* ``n_relevant`` — the number of relevant items known for the query. ``None`` means "no
  ground truth": the denominator is taken from the (cut-off) list itself.
* ``ideal`` — the grades the ideal ranking is built from (e.g. every qrels grade of the
  query). ``None`` means the list itself sorted by grade (no ground truth).
* ``gain`` — ``"linear"`` (the grade, as trec_eval) or ``"exponential"`` (``2**grade - 1``,
  as Burges et al. and gdeval).
* ``k`` — a cutoff; ``None`` means the whole list. ``k`` larger than the list is allowed
  (the missing ranks count as non-relevant).

Binary functions accept 0/1 or bool arrays. Graded functions treat negative grades (the
"unjudged" markers used by trec_eval: -1 not in the pool, -2 pooled but unjudged) as gain 0;
use :func:`apply_unjudged` first to drop them instead. Sums run left to right in rank order
(``cumsum``), the order trec_eval uses, so results agree with it to the last bit.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt

Gain = Literal["linear", "exponential"]
UnjudgedPolicy = Literal["nonrelevant", "drop"]

# Marker grades used by trec_eval for retrieved documents without a usable judgement.
NOT_IN_POOL = -1
UNJUDGED_IN_POOL = -2

__all__ = [
    "NOT_IN_POOL",
    "UNJUDGED_IN_POOL",
    "Gain",
    "UnjudgedPolicy",
    "apply_unjudged",
    "average_precision",
    "binarize",
    "dcg",
    "discounts",
    "f1_at_k",
    "gain_values",
    "hit_rate",
    "mean_reciprocal_rank_all_hits",
    "ndcg",
    "precision_at_k",
    "r_precision",
    "recall_at_k",
    "reciprocal_rank",
    "sequential_sum",
    "set_precision",
    "success_at_k",
]

_DISCOUNT_CACHE: npt.NDArray[np.float64] = np.empty(0, dtype=np.float64)


def discounts(n: int) -> npt.NDArray[np.float64]:
    """``log2(rank + 1)`` for ranks 1..n, computed with the C library's ``log2``.

    ``math.log2`` calls the same libm routine trec_eval uses, so discounted gains are
    bit-identical to trec_eval's (numpy's vectorised log2 may differ in the last ulp).
    """
    global _DISCOUNT_CACHE
    if n > _DISCOUNT_CACHE.shape[0]:
        size = max(n, 2 * _DISCOUNT_CACHE.shape[0], 1024)
        _DISCOUNT_CACHE = np.array([math.log2(i + 2) for i in range(size)], dtype=np.float64)
    return _DISCOUNT_CACHE[:n]


def sequential_sum(values: npt.NDArray[np.float64]) -> float:
    """Left-to-right sum (numpy's ``sum`` is pairwise and can differ in the last bit)."""
    if values.shape[0] == 0:
        return 0.0
    return float(np.cumsum(values)[-1])


def _cut(array: npt.NDArray[np.generic], k: int | None) -> npt.NDArray[np.generic]:
    if k is None:
        return array
    if k < 1:
        raise ValueError(f"cutoff k must be a positive integer, got {k}")
    return array[:k]


def _as_binary(rel: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    arr = np.asarray(rel)
    if arr.ndim != 1:
        raise ValueError(f"relevance must be a 1-d array in rank order, got shape {arr.shape}")
    if arr.dtype == np.bool_:
        return arr
    return arr > 0


def _as_grades(gains: npt.ArrayLike) -> npt.NDArray[np.float64]:
    arr = np.asarray(gains, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"grades must be a 1-d array in rank order, got shape {arr.shape}")
    return arr


def binarize(grades: npt.ArrayLike, level: int = 1) -> npt.NDArray[np.bool_]:
    """Relevant (``grade >= level``) as a bool array; trec_eval's ``-l`` is ``level``."""
    arr = np.asarray(grades)
    return np.asarray(arr >= level, dtype=np.bool_)


def apply_unjudged(grades: npt.ArrayLike, policy: UnjudgedPolicy = "nonrelevant") -> npt.NDArray[np.int64]:
    """Handle unjudged entries (negative grades) of a ranked list.

    ``"nonrelevant"`` keeps them in place with grade 0; ``"drop"`` removes them, moving
    the later items up (trec_eval's ``-J``).
    """
    arr = np.asarray(grades, dtype=np.int64)
    if policy == "nonrelevant":
        return np.where(arr < 0, 0, arr)
    if policy == "drop":
        return arr[arr >= 0]
    raise ValueError(f"unknown unjudged policy {policy!r}; expected 'nonrelevant' or 'drop'")


def gain_values(grades: npt.ArrayLike, gain: Gain = "linear") -> npt.NDArray[np.float64]:
    """Gain of each grade: the grade (linear) or ``2**grade - 1`` (exponential); <=0 -> 0."""
    arr = _as_grades(grades)
    positive = np.where(arr > 0, arr, 0.0)
    if gain == "linear":
        return positive
    if gain == "exponential":
        return np.asarray(np.exp2(positive) - 1.0, dtype=np.float64)
    raise ValueError(f"unknown gain {gain!r}; expected 'linear' or 'exponential'")


def average_precision(rel: npt.ArrayLike, *, n_relevant: int | None = None, k: int | None = None) -> float:
    """Average precision of a ranked list (``map`` / ``map_cut_k`` of trec_eval).

    ``n_relevant=None``: the denominator is the number of relevant items in the (cut-off)
    list — the only choice without ground truth. Otherwise it is ``n_relevant`` (trec_eval:
    every relevant document in the qrels). 0.0 when the denominator is 0.
    """
    hits = _cut(_as_binary(rel), k)
    ranks = np.flatnonzero(hits)
    found = ranks.shape[0]
    denominator = found if n_relevant is None else n_relevant
    if denominator <= 0 or found == 0:
        return 0.0
    precisions = np.arange(1, found + 1, dtype=np.float64) / (ranks + 1).astype(np.float64)
    return sequential_sum(precisions) / float(denominator)


def dcg(gains: npt.ArrayLike, *, k: int | None = None, gain: Gain = "linear") -> float:
    """Discounted cumulative gain, discount ``log2(rank + 1)`` (trec_eval, Järvelin-Kekäläinen)."""
    values = np.asarray(_cut(gain_values(gains, gain), k), dtype=np.float64)
    return sequential_sum(values / discounts(values.shape[0]))


def ndcg(
    gains: npt.ArrayLike,
    *,
    ideal: npt.ArrayLike | None = None,
    k: int | None = None,
    gain: Gain = "linear",
) -> float:
    """Normalised DCG. ``ideal=None``: IDCG from the list itself sorted by grade (no ground
    truth); otherwise from those grades (e.g. all qrels grades of the query). 0.0 when
    IDCG is 0."""
    ideal_grades = _as_grades(gains if ideal is None else ideal)
    ideal_sorted = np.sort(ideal_grades[ideal_grades > 0])[::-1]
    idcg = dcg(ideal_sorted, k=k, gain=gain)
    if idcg <= 0.0:
        return 0.0
    return dcg(gains, k=k, gain=gain) / idcg


def reciprocal_rank(rel: npt.ArrayLike, *, k: int | None = None) -> float:
    """1 / rank of the first relevant item (within ``k``); 0.0 if there is none."""
    ranks = np.flatnonzero(_cut(_as_binary(rel), k))
    if ranks.shape[0] == 0:
        return 0.0
    return 1.0 / float(ranks[0] + 1)


def precision_at_k(rel: npt.ArrayLike, k: int) -> float:
    """Relevant in the top ``k`` divided by ``k`` (trec_eval ``P_k``: always by ``k``,
    even when fewer than ``k`` items were retrieved)."""
    hits = _cut(_as_binary(rel), k)
    return float(np.count_nonzero(hits)) / float(k)


def set_precision(rel: npt.ArrayLike) -> float:
    """Share of the whole list that is relevant (trec_eval ``set_P``); 0.0 for an empty list."""
    hits = _as_binary(rel)
    if hits.shape[0] == 0:
        return 0.0
    return float(np.count_nonzero(hits)) / float(hits.shape[0])


def recall_at_k(rel: npt.ArrayLike, n_relevant: int, k: int | None = None) -> float:
    """Relevant in the top ``k`` divided by ``n_relevant``; 0.0 when ``n_relevant`` is 0."""
    if n_relevant <= 0:
        return 0.0
    return float(np.count_nonzero(_cut(_as_binary(rel), k))) / float(n_relevant)


def r_precision(rel: npt.ArrayLike, n_relevant: int) -> float:
    """Precision at rank R = ``n_relevant`` (trec_eval ``Rprec``); 0.0 when R is 0."""
    if n_relevant <= 0:
        return 0.0
    return float(np.count_nonzero(_as_binary(rel)[:n_relevant])) / float(n_relevant)


def success_at_k(rel: npt.ArrayLike, k: int) -> float:
    """1.0 if any of the top ``k`` is relevant, else 0.0."""
    return 1.0 if np.any(_cut(_as_binary(rel), k)) else 0.0


def f1_at_k(rel: npt.ArrayLike, n_relevant: int, k: int) -> float:
    """Harmonic mean of P@k and recall@k; 0.0 when nothing relevant is in the top ``k``."""
    found = float(np.count_nonzero(_cut(_as_binary(rel), k)))
    if found == 0.0 or n_relevant <= 0:
        return 0.0
    precision = found / float(k)
    recall = found / float(n_relevant)
    return 2.0 * precision * recall / (precision + recall)


def hit_rate(rel: npt.ArrayLike, n_expected: int, k: int | None = None) -> float:
    """Granular hit rate: hits (in the top ``k``) / number of expected items; 0.0 if none expected."""
    if n_expected <= 0:
        return 0.0
    return float(np.count_nonzero(_cut(_as_binary(rel), k))) / float(n_expected)


def mean_reciprocal_rank_all_hits(rel: npt.ArrayLike, k: int | None = None) -> float:
    """Granular MRR: the mean of 1/rank over *every* relevant item (within ``k``); 0.0 if none."""
    ranks = np.flatnonzero(_cut(_as_binary(rel), k))
    if ranks.shape[0] == 0:
        return 0.0
    return sequential_sum(1.0 / (ranks + 1).astype(np.float64)) / float(ranks.shape[0])
