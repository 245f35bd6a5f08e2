"""The prediction-powered paired difference of two systems (pure: rankings, verdicts and
labels in, numbers out).

Two systems ``A`` and ``B`` ranked passages for the same ``Q`` queries. The target is the
mean paired difference of a measure linear in the labels, with a person's label ``Y`` on
every pair::

    D = (1/Q) sum_q (m_q(A; Y) - m_q(B; Y)) = sum_(q,d) w_qd * Y_qd

* **P@k** (trec_eval: the denominator is ``k`` however many were retrieved):
  ``w_qd = ([d in A's top k] - [d in B's top k]) / (k Q)``;
* **DCG@k divided by a fixed per-query normaliser** ``c_q`` (known without the labels, the
  same for A and B): ``w_qd = (disc_A(d) - disc_B(d)) / (c_q Q)``, ``disc(r) = 1/log2(r+1)``
  for a rank ``r <= k``, 0 beyond. With ``c_q`` the labels' ideal DCG this is the
  difference of trec_eval's nDCG@k; that ideal is unknown before labelling, so a caller
  gives a stand-in (the judge's ideal from the pool, or 1: plain DCG). The per-query sign
  of the difference does not depend on ``c_q``, only the weight of each query in the mean.

A pair both systems rank at the same place (P@k: both in the top k) has weight 0: it
cancels. Only the **differing pairs** (weight != 0, the population, ``N`` of them) can move
the difference, so only their labels are needed. The judge's verdict ``f`` (any fixed
prediction made without the labels: an unjudged pair may take 0) gives ``D(f)``; a label's
effect is ``e = w (Y - f)``, and the estimate is the prediction-powered one of
:func:`judge.metrics.rectified_mean`: a uniform sample of ``n`` differing pairs,
``D(f) + N mean(e)``, finite-population standard error and Student's t; pairs drawn with
known inclusion probabilities ``pi`` (Poisson), ``D(f) + sum(e / pi)`` (Horvitz-Thompson).
The measure is linear, so the rectifier is exact (unbiased, no linearisation).

Labels outside the differing pairs are ignored (their weight is 0). A uniform sample of a
larger population (for example the differing pairs of several comparisons together) is,
given how many of its labels fall among one comparison's differing pairs, a uniform sample
of those: the uniform form holds with ``n`` the labels that fall there.

Two systems whose top k are the same (P@k: the same set; DCG@k: the same order) differ by
exactly 0, with no label needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from judge.metrics._ppi import estimate_dict, rectified_mean

__all__ = ["DifferingPairs", "PairedDifference", "differing_pairs", "paired_difference"]

PairKey = tuple[str, str]
PairedMeasure = Literal["P", "dcg"]


@dataclass(frozen=True)
class DifferingPairs:
    """The (query, passage) pairs where two systems' top ``k`` differ, each with its weight
    in the mean paired difference ``A - B`` (see the module docstring), over ``queries``."""

    keys: tuple[PairKey, ...]
    weights: npt.NDArray[np.float64]
    queries: int
    measure: PairedMeasure
    k: int

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class PairedDifference:
    """The corrected mean paired difference ``A - B``, its interval (None with fewer than two
    labels among the differing pairs), the judge's own difference, the labels used and the
    differing pairs (the population)."""

    estimate: float
    low: float | None
    high: float | None
    se: float | None
    judge: float
    labels: int
    population: int

    def as_dict(self, digits: int = 6) -> dict[str, object]:
        return {
            **estimate_dict(self.estimate, self.low, self.high, self.judge, digits),
            "labels": self.labels,
            "differing_pairs": self.population,
        }


def _ranks(qid: str, ranking: Sequence[str], k: int) -> dict[str, int]:
    top = list(ranking[:k])
    if len(set(top)) != len(top):
        raise ValueError(f"query {qid}: a passage appears twice in a top {k}")
    return {d: r for r, d in enumerate(top, start=1)}


def differing_pairs(
    ranked_a: Mapping[str, Sequence[str]],
    ranked_b: Mapping[str, Sequence[str]],
    k: int,
    *,
    measure: PairedMeasure = "P",
    normalisers: Mapping[str, float] | None = None,
) -> DifferingPairs:
    """The differing pairs of ``A`` (``ranked_a``: ``{qid: passages best first}``) and ``B``
    at cutoff ``k``, and their weights. The queries are those of either system (a query one
    of them lacks is an empty ranking there). ``measure="dcg"``: each query's difference is
    divided by ``normalisers[qid]`` (finite, > 0; default 1 for every query)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if measure not in ("P", "dcg"):
        raise ValueError(f"measure must be 'P' or 'dcg', got {measure!r}")
    qids = sorted(set(ranked_a) | set(ranked_b))
    keys: list[PairKey] = []
    weights: list[float] = []
    for qid in qids:
        ra = _ranks(qid, ranked_a.get(qid, ()), k)
        rb = _ranks(qid, ranked_b.get(qid, ()), k)
        scale = 1.0
        if measure == "dcg" and normalisers is not None:
            if qid not in normalisers:
                raise ValueError(f"query {qid}: no normaliser")
            scale = float(normalisers[qid])
            if not (math.isfinite(scale) and scale > 0.0):
                raise ValueError(f"query {qid}: the normaliser must be finite and > 0, got {scale}")
        for docno in sorted(set(ra) | set(rb)):
            a, b = ra.get(docno), rb.get(docno)
            if measure == "P":
                w = ((a is not None) - (b is not None)) / k
            else:
                w = (0.0 if a is None else 1.0 / math.log2(a + 1)) - (
                    0.0 if b is None else 1.0 / math.log2(b + 1)
                )
                w /= scale
            if w != 0.0:
                keys.append((qid, docno))
                weights.append(w / len(qids))
    return DifferingPairs(tuple(keys), np.asarray(weights, dtype=np.float64), len(qids), measure, k)


def paired_difference(
    pairs: DifferingPairs,
    predictions: Mapping[PairKey, float],
    labels: Mapping[PairKey, float],
    *,
    inclusion: Mapping[PairKey, float] | None = None,
    confidence: float = 0.95,
) -> PairedDifference:
    """The prediction-powered mean paired difference over ``pairs`` (see the module
    docstring). ``predictions``: the judge's gain (1/0, or a grade) of every differing pair;
    ``labels``: a person's gain of the sampled pairs (those outside ``pairs`` are ignored);
    ``inclusion``: each sampled pair's probability of having been drawn (Poisson sampling),
    or None for a uniform sample of the differing pairs."""
    if not pairs.keys:
        return PairedDifference(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0)
    f = np.empty(len(pairs), dtype=np.float64)
    for j, key in enumerate(pairs.keys):
        if key not in predictions:
            raise ValueError(f"no prediction for the differing pair {key}")
        f[j] = float(predictions[key])
    if not np.all(np.isfinite(f)):
        raise ValueError("predictions must be finite")
    judge = math.fsum(pairs.weights * f)
    used = [j for j, key in enumerate(pairs.keys) if key in labels]
    y = np.asarray([float(labels[pairs.keys[j]]) for j in used], dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError("labels must be finite")
    effects = pairs.weights[used] * (y - f[used])
    if inclusion is None:
        r = rectified_mean(judge, effects, population=len(pairs), confidence=confidence)
    else:
        missing = [pairs.keys[j] for j in used if pairs.keys[j] not in inclusion]
        if missing:
            raise ValueError(f"no inclusion probability for the labelled pair {missing[0]}")
        pi = [float(inclusion[pairs.keys[j]]) for j in used]
        r = rectified_mean(judge, effects, inclusion=pi, confidence=confidence)
    return PairedDifference(r.estimate, r.low, r.high, r.se, judge, len(used), len(pairs))
