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
* **Expected-gain NDCG@k** (:func:`expected_gain_ndcg`): NDCG@k (linear gain, log2
  discount) with the expected gain of each passage — P(yes) in binary mode, the expected
  grade ``sum g * P(g)`` in graded mode — and the ideal DCG from the same expected gains
  sorted (the label-free ideal of the hard judge NDCG; ``ideal=`` may add ground-truth
  gains). This is the NDCG of the expected gains, a smooth surrogate, not E[NDCG].

With 0/1 probabilities both reduce to the hard judge metrics (a test checks it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from judge.metrics._ranking import ndcg

__all__ = [
    "borderline_count",
    "expected_average_precision",
    "expected_gain_ndcg",
    "poisson_binomial",
]


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
