"""Expected (probability-weighted) ranking metrics: relevance as a probability, not 0/1.

A judge that reports P(yes) for every passage gives a *distribution* over relevance
labelings. The hard metrics first cut that distribution at a decision threshold, so a
P(yes) of 0.574 and one of 0.576 on either side of a 0.575 threshold make a whole verdict
of difference, and a tiny numeric change (another CPU's float kernels) can flip it. The
expected metrics below use the probabilities themselves: they are smooth in every P(yes)
(a change of 0.01 in one probability moves them by at most about 0.01 / rank) and do not
depend on the decision threshold at all.

Definitions (``p`` = P(relevant) of the judged passages in rank order; unjudged passages are
dropped first, as for the hard metrics):

* **Expected AP** (:func:`expected_average_precision`): ``E[AP(r)]`` where the relevance
  labels ``r_i ~ Bernoulli(p_i)`` are independent and AP uses the label-free denominator
  (the number of relevant passages in the list; AP = 0 when there is none), exactly the
  hard judge AP applied to every possible labeling and averaged with its probability.
  Computed **exactly** (no sampling): with ``r_i^2 = r_i``,
  ``AP = sum_i (r_i / i) * (1 + A_i) / (1 + A_i + B_i)`` on the labelings with ``r_i = 1``,
  where ``A_i`` = relevant above rank ``i`` and ``B_i`` = relevant below it. ``A_i`` and
  ``B_i`` are independent Poisson-binomial counts whose distributions come from a prefix
  and a suffix dynamic programme, so
  ``E[AP] = sum_i (p_i / i) * sum_{a,b} P(A_i=a) P(B_i=b) (1 + a) / (1 + a + b)``:
  O(n^3) time, O(n^2) memory for n passages (a 100-passage list costs milliseconds).
  Note that E[AP] is *not* AP computed with p as fractional relevance (the expectation of a
  ratio is not the ratio of expectations); with all p in {0, 1} it equals the hard AP.
* **Expected NDCG@k** (:func:`expected_ndcg`): ``E[NDCG@k(g)]`` where each passage's
  grade ``g_i`` is drawn independently from its distribution (binary: ``Bernoulli(p_i)``;
  graded: ``P(grade = 0..3)``) and NDCG is the label-free judge NDCG of that labeling (linear
  gain, log2 discount, ideal = the same labeling sorted, plus optional fixed ``ideal`` grades
  such as unretrieved qrels; 0 when the ideal DCG is 0). By linearity
  ``E[NDCG@k] = sum_{i<=k} d_i sum_g P_i(g) g E[1 / IDCG@k(C_{-i} + e_g)]``, where ``d_i`` is
  the discount of rank i and ``C_{-i}`` the counts of each positive grade among the other
  passages. IDCG@k only needs each count capped at k, so ``C_{-i}`` has at most
  ``(k+1)^G`` states (G positive grades: 1 binary, 3 graded) and its distribution comes from
  a dynamic programme over the other passages: **exact**, O(k n (k+1)^G) (binary lists of
  any length; graded lists while that stays below :data:`EXACT_LIMIT`). Beyond that, a
  **seeded Monte Carlo** estimate over ``samples`` labelings with its standard error
  (:class:`Expectation`). Unlike the NDCG of the expected gains (:func:`expected_gain_ndcg`,
  kept for reference), which divides by the ideal ordering of those same soft gains and so
  scores every ordering near 1 when the probabilities are alike, this is the NDCG one would
  observe on average if the labels were drawn from the judge's probabilities.

With 0/1 probabilities both reduce to the hard judge metrics (a test checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from judge.metrics._ranking import ndcg

__all__ = [
    "EXACT_LIMIT",
    "Expectation",
    "borderline_count",
    "expected_average_precision",
    "expected_gain_ndcg",
    "expected_ndcg",
    "poisson_binomial",
]

#: Largest ``k * n * states`` the exact expected NDCG computes; beyond it, Monte Carlo.
EXACT_LIMIT = 20_000_000
#: Monte Carlo labelings drawn by default (standard error about 0.3 / sqrt(samples)).
DEFAULT_SAMPLES = 4096


def _probabilities(p: npt.ArrayLike) -> npt.NDArray[np.float64]:
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"probabilities must be a 1-d array in rank order, got shape {arr.shape}")
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0.0 or arr.max() > 1.0):
        raise ValueError("probabilities must be finite and within [0, 1]")
    return arr


def poisson_binomial(p: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The distribution of the number of successes of independent Bernoulli(p_i) trials:
    ``out[c] = P(count = c)`` for c = 0..n (dynamic programme, exact up to rounding)."""
    probs = _probabilities(p)
    pmf = np.zeros(probs.size + 1, dtype=np.float64)
    pmf[0] = 1.0
    for i, q in enumerate(probs):
        pmf[1 : i + 2] = pmf[1 : i + 2] * (1.0 - q) + pmf[: i + 1] * q
        pmf[0] *= 1.0 - q
    return pmf


def expected_average_precision(p: npt.ArrayLike) -> float:
    """E[AP] under independent Bernoulli(p_i) relevance, label-free denominator (exact).

    See the module docstring for the derivation; 0.0 for an empty list."""
    probs = _probabilities(p)
    n = probs.size
    if n == 0:
        return 0.0
    # prefix[i] = distribution of the relevant count among ranks 1..i (i passages above).
    prefix = np.zeros((n + 1, n + 1), dtype=np.float64)
    prefix[0, 0] = 1.0
    for i in range(n):
        prefix[i + 1, 1 : i + 2] = prefix[i, 1 : i + 2] * (1.0 - probs[i]) + prefix[i, : i + 1] * probs[i]
        prefix[i + 1, 0] = prefix[i, 0] * (1.0 - probs[i])
    # suffix[i] = distribution of the relevant count among ranks i+1..n (below rank i).
    suffix = np.zeros((n + 1, n + 1), dtype=np.float64)
    suffix[n, 0] = 1.0
    for i in range(n - 1, -1, -1):
        m = n - i  # passages from rank i+1 (0-based i) to the end
        suffix[i, 1 : m + 1] = suffix[i + 1, 1 : m + 1] * (1.0 - probs[i]) + suffix[i + 1, :m] * probs[i]
        suffix[i, 0] = suffix[i + 1, 0] * (1.0 - probs[i])
    a = np.arange(n, dtype=np.float64)[:, None]
    b = np.arange(n, dtype=np.float64)[None, :]
    share = (1.0 + a) / (1.0 + a + b)  # precision share of rank i given a above, b below
    total = 0.0
    for i in range(n):
        if probs[i] == 0.0:
            continue
        above = prefix[i, : i + 1]  # a = 0..i
        below = suffix[i + 1, : n - i]  # b = 0..n-i-1
        inner = float(above @ share[: i + 1, : n - i] @ below)
        total += probs[i] / (i + 1) * inner
    return float(min(1.0, max(0.0, total)))


def expected_gain_ndcg(
    gains: npt.ArrayLike, k: int | None = None, *, ideal: Sequence[float] | None = None
) -> float:
    """NDCG@k with expected gains (P(yes), or the expected grade) and the ideal DCG from
    the same gains sorted (plus ``ideal`` extra gains, e.g. unretrieved qrels); linear gain,
    log2 discount; 0.0 when the ideal DCG is 0."""
    values = np.asarray(gains, dtype=np.float64)
    if values.ndim != 1 or (values.size and (not np.all(np.isfinite(values)) or values.min() < 0.0)):
        raise ValueError("expected gains must be a 1-d array of finite non-negative numbers")
    pool = values if ideal is None else np.concatenate([values, np.asarray(ideal, dtype=np.float64)])
    return float(ndcg(values, ideal=pool, k=k))


def borderline_count(p: npt.ArrayLike, threshold: float, margin: float) -> int:
    """How many probabilities lie within ``margin`` of the decision ``threshold``
    (``|p - threshold| <= margin``): the verdicts another machine's rounding may flip."""
    probs = _probabilities(p)
    if margin < 0:
        raise ValueError("the borderline margin must be >= 0")
    return int(np.count_nonzero(np.abs(probs - threshold) <= margin + 1e-12))


@dataclass(frozen=True)
class Expectation:
    """An expected value: ``value``, its standard error ``stderr`` (0.0 when ``method`` is
    ``exact``), and for Monte Carlo the ``samples`` and ``seed`` that reproduce it."""

    value: float
    stderr: float
    method: Literal["exact", "monte_carlo"]
    samples: int = 0
    seed: int | None = None


def _grade_distribution(dist: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(n,)`` P(relevant) -> ``(n, 2)``; ``(n, G+1)`` P(grade = 0..G) rows renormalised."""
    arr = np.asarray(dist, dtype=np.float64)
    if arr.ndim == 1:
        p = _probabilities(arr)
        return np.stack([1.0 - p, p], axis=1)
    if arr.ndim != 2 or arr.shape[1] < 2 or arr.shape[1] > 4:
        raise ValueError(f"grade distributions must be (n,) or (n, 2..4), got shape {arr.shape}")
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0.0):
        raise ValueError("grade probabilities must be finite and >= 0")
    totals = arr.sum(axis=1, keepdims=True)
    if arr.size and np.any(totals <= 0.0):
        raise ValueError("every passage needs a grade distribution with positive mass")
    return arr / np.where(totals > 0, totals, 1.0)


def _discounts(n: int) -> npt.NDArray[np.float64]:
    return 1.0 / np.log2(np.arange(2, n + 2, dtype=np.float64))


def _idcg_table(cap: int, grades: int, k: int) -> npt.NDArray[np.float64]:
    """IDCG@k for every capped count vector: index ``(c_G, ..., c_1)`` (each 0..cap)."""
    disc = _discounts(k)
    shape = (cap + 1,) * grades
    table = np.zeros(shape, dtype=np.float64)
    for idx in np.ndindex(*shape):
        slot = 0
        total = 0.0
        for pos, count in enumerate(idx):  # highest grade first
            g = grades - pos
            take = min(count, k - slot)
            if take > 0:
                total += g * float(disc[slot : slot + take].sum())
                slot += take
        table[idx] = total
    return table


def _add_grade(state: npt.NDArray[np.float64], g: int, grades: int, cap: int) -> npt.NDArray[np.float64]:
    """The count distribution after adding one passage of grade ``g`` (> 0), capped."""
    axis = grades - g
    out = np.zeros_like(state)
    src = [slice(None)] * grades
    dst = [slice(None)] * grades
    src[axis], dst[axis] = slice(0, cap), slice(1, cap + 1)
    out[tuple(dst)] += state[tuple(src)]
    src[axis], dst[axis] = slice(cap, cap + 1), slice(cap, cap + 1)
    out[tuple(dst)] += state[tuple(src)]
    return out


def _exact_ndcg(dist: npt.NDArray[np.float64], k: int, ideal: Sequence[int], grades: int) -> float:
    n = dist.shape[0]
    cap = k
    base = np.zeros((cap + 1,) * grades, dtype=np.float64)
    start = [0] * grades
    for g in ideal:
        if g > 0:
            axis = grades - min(int(g), grades)
            start[axis] = min(start[axis] + 1, cap)
    base[tuple(start)] = 1.0
    table = _idcg_table(cap, grades, k)
    inverse = np.where(table > 0, 1.0 / np.where(table > 0, table, 1.0), 0.0)
    disc = _discounts(min(k, n))
    total = 0.0
    for i in range(min(k, n)):
        state = base
        for j in range(n):
            if j == i:
                continue
            step = state * dist[j, 0]
            for g in range(1, grades + 1):
                if dist[j, g] > 0.0:
                    step = step + dist[j, g] * _add_grade(state, g, grades, cap)
            state = step
        inner = 0.0
        for g in range(1, grades + 1):
            if dist[i, g] > 0.0:
                inner += dist[i, g] * g * float((_add_grade(state, g, grades, cap) * inverse).sum())
        total += float(disc[i]) * inner
    return float(min(1.0, max(0.0, total)))


def _monte_carlo_ndcg(
    dist: npt.NDArray[np.float64], k: int, ideal: Sequence[int], samples: int, seed: int
) -> tuple[float, float]:
    n = dist.shape[0]
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(dist, axis=1)
    u = rng.random((samples, n))
    drawn = np.minimum((u[:, :, None] >= cdf[None, :, :]).sum(axis=2), dist.shape[1] - 1)
    extra = np.array([g for g in ideal if g > 0], dtype=np.int64)
    disc = _discounts(k)
    top = min(k, n)
    dcg = (drawn[:, :top] * disc[:top]).sum(axis=1)
    pool = np.concatenate([drawn, np.broadcast_to(extra, (samples, extra.size))], axis=1)
    best = -np.sort(-pool, axis=1)[:, :k]
    idcg = (best * disc[: best.shape[1]]).sum(axis=1)
    values = np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(samples)) if samples > 1 else 0.0


def expected_ndcg(
    dist: npt.ArrayLike,
    k: int | None = None,
    *,
    ideal: Sequence[int] = (),
    method: Literal["auto", "exact", "monte_carlo"] = "auto",
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
) -> Expectation:
    """E[NDCG@k] under independent relevance drawn from ``dist`` (see the module docstring).

    ``dist``: P(relevant) per passage in rank order (``(n,)``), or P(grade = 0..G) per
    passage (``(n, G+1)``, G <= 3). ``ideal``: fixed grades that join the ideal ranking only
    (e.g. unretrieved qrels). ``method="auto"``: exact when ``k * n * (k+1)^G <=``
    :data:`EXACT_LIMIT`, else Monte Carlo over ``samples`` labelings seeded with ``seed``.
    0.0 for an empty list."""
    probs = _grade_distribution(dist)
    n = probs.shape[0]
    if k is not None and k < 1:
        raise ValueError("k must be >= 1")
    if n == 0:
        return Expectation(0.0, 0.0, "exact")
    cut = n + len(ideal) if k is None else k
    grades = probs.shape[1] - 1
    cost = min(cut, n) * n * (min(cut, n + len(ideal)) + 1) ** grades
    if method == "exact" or (method == "auto" and cost <= EXACT_LIMIT):
        return Expectation(_exact_ndcg(probs, min(cut, n + len(ideal)), ideal, grades), 0.0, "exact")
    if samples < 2:
        raise ValueError("Monte Carlo needs at least 2 samples")
    value, stderr = _monte_carlo_ndcg(probs, cut, ideal, samples, seed)
    return Expectation(value, stderr, "monte_carlo", samples=samples, seed=seed)
