"""Thin adapters from the batch scorer's lists to :mod:`judge.metrics`.

Kept in one place so that the batch layer states its conventions once: ``rel`` is the
binary relevance of each ranked item (1/0), ``gains`` the graded gain of each ranked item;
linear gain, log2 discount, P@k divided by k (trec_eval's conventions).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from judge import metrics


def _arr(values: Sequence[float]) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    return np.asarray(values, dtype=np.float64)


def average_precision(rel: Sequence[int], n_relevant: int) -> float:
    """AP with ``n_relevant`` as denominator (trec_eval ``map``); 0.0 when there are none."""
    return float(metrics.average_precision(_arr(rel), n_relevant=n_relevant))


def reciprocal_rank(rel: Sequence[int]) -> float:
    return float(metrics.reciprocal_rank(_arr(rel)))


def precision_at(rel: Sequence[int], k: int) -> float:
    return float(metrics.precision_at_k(_arr(rel), k))


def recall_at(rel: Sequence[int], n_relevant: int, k: int) -> float:
    return float(metrics.recall_at_k(_arr(rel), n_relevant, k))


def ndcg_at(gains: Sequence[float], ideal_gains: Sequence[float], k: int) -> float:
    """NDCG@k, linear gain; IDCG from ``ideal_gains`` (e.g. all qrels grades)."""
    return float(metrics.ndcg(_arr(gains), ideal=_arr(ideal_gains), k=k, gain="linear"))
