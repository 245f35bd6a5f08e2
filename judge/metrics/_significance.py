"""Paired significance tests over per-query scores of two systems.

* :func:`permutation_test` — two-sided paired randomization test (sign flips of the
  per-query differences). Exact when the differences that are not zero number at most
  :data:`EXACT_LIMIT`: every one of the ``2 ** m`` sign assignments of the ``m`` non-zero
  differences is counted (a zero difference does not move the mean under a flip), and
  ``p = b / 2 ** m`` with ``b`` the assignments whose |mean| is at least the observed one
  (the identity among them, so no ``+1`` is needed). Beyond the limit, ``R`` seeded random
  sign vectors give ``p = (b + 1) / (R + 1)`` with its Monte Carlo standard error
  ``sqrt(p (1 - p) / R)``. Seed and resamples matter only there.
* :func:`permutation_interval` — the interval of that same test: the shifts ``delta`` of the
  mean difference it does not reject (the sign flips of ``d - delta``: every assignment
  up to :data:`INTERVAL_EXACT_LIMIT` differences, else the test's own random signs;
  ``p(delta) >= 1 - confidence``; at ``delta = 0`` the test's own p). It excludes 0
  exactly when the test's p-value is below ``1 - confidence``, so an interval and a p-value
  shown together cannot disagree.
* :func:`paired_t_test` — ``scipy.stats.ttest_rel``.
* :func:`bootstrap_ci` — percentile bootstrap CI of the mean difference (``scipy.stats.bootstrap``).
* :func:`holm` — Holm's step-down adjustment of a family of p-values (:func:`holm_with_se`
  carries each adjusted p's Monte Carlo error: its multiplier times the raw p's).
* :func:`significance` — the one decision rule: ``significant``, ``not significant``, or
  ``undecided`` when a Monte Carlo p lies within twice its standard error of the level.

Same inputs and seed give the same numbers, whatever else is being compared.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from judge.metrics._ranking import sequential_sum

__all__ = [
    "EXACT_LIMIT",
    "INTERVAL_EXACT_LIMIT",
    "MC_MARGIN",
    "PERMUTATION_CONVENTION",
    "UNDECIDED",
    "Comparison",
    "PairedTest",
    "bootstrap_ci",
    "compare_scores",
    "exact_sign_flip_p",
    "holm",
    "holm_adjust",
    "holm_with_se",
    "monte_carlo_se",
    "paired_t_test",
    "permutation_interval",
    "permutation_test",
    "significance",
]

_MAX_BLOCK = 1 << 20  # random numbers drawn per block (8 MiB of float64)

EXACT_LIMIT = 30
"""Most non-zero differences whose ``2 ** m`` sign assignments :func:`permutation_test`
enumerates. Counted meet-in-the-middle (the signed sums of each half, one half sorted, the
other searched in it: ``2 ** 15`` sums a side at the limit), measured at about 0.2 ms for
20 and 2 ms for 30 (``2 ** 30`` assignments), cheap enough for adaptive judging, which
tests every drawn state."""

INTERVAL_EXACT_LIMIT = 24
"""Most differences (all ``n``: a shift makes zeros non-zero) for which
:func:`permutation_interval` enumerates every assignment at each of its ~100 trial shifts:
measured at about 0.06 s an interval for 24, 0.3 s for 28, 0.75 s for 30."""

MC_MARGIN = 2.0
"""A Monte Carlo p within this many standard errors of the level is undecided."""

PERMUTATION_CONVENTION = (
    "two-sided paired randomization (sign flipping): exact, p=b/2^m over every sign assignment of the m "
    f"non-zero differences, when m <= {EXACT_LIMIT}; else R seeded random ones, p=(b+1)/(R+1) with its "
    "Monte Carlo standard error sqrt(p(1-p)/R)"
)
"""How reports state the test (their ``permutation_test`` convention)."""

UNDECIDED = "undecided: p within Monte Carlo error of alpha; raise --resamples"


@dataclass(frozen=True)
class PairedTest:
    """Test statistic (positive when the second system scores higher) and two-sided p-value.
    ``method``: ``exact`` (every sign assignment), ``monte carlo`` (random ones; ``se`` is
    the standard error of ``p_value``) or ``t`` (the t-test; ``se`` 0)."""

    statistic: float
    p_value: float
    se: float = 0.0
    method: str = "exact"


@dataclass(frozen=True)
class Comparison:
    """One system against the baseline on one measure, over ``n`` paired queries.
    ``p_permutation_method`` is ``exact`` or ``monte carlo``; ``p_permutation_se`` the Monte
    Carlo standard error of ``p_permutation`` (0 when exact) and ``p_permutation_holm_se``
    that of the Holm-adjusted p (the raw error times Holm's multiplier)."""

    measure: str
    baseline: str
    system: str
    n: int
    mean_baseline: float
    mean_system: float
    difference: float
    p_permutation: float
    t_statistic: float
    p_t_test: float
    ci_low: float
    ci_high: float
    p_permutation_holm: float | None = None
    p_t_test_holm: float | None = None
    p_permutation_se: float = 0.0
    p_permutation_method: str = "exact"
    p_permutation_holm_se: float | None = None

    def to_json(self) -> dict[str, object]:
        def clean(x: float | int | str | None) -> float | int | str | None:
            if isinstance(x, float) and not math.isfinite(x):
                return None
            return x

        return {key: clean(value) for key, value in self.__dict__.items()}


def _pair(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"paired scores must be 1-d arrays of equal length, got {x.shape} and {y.shape}")
    if x.shape[0] == 0:
        raise ValueError("no paired scores")
    return y - x


def _mean(values: npt.NDArray[np.float64]) -> float:
    """Left-to-right mean (the order trec_eval averages in)."""
    return sequential_sum(values) / int(values.shape[0])


def _threshold(d: npt.NDArray[np.float64]) -> tuple[float, float]:
    """(observed mean, the |mean| a flipped mean must reach to count as extreme): the
    observed |mean| less a tolerance of 1e-12 of the mean |difference|, so that an
    assignment equal to the observed one up to rounding counts."""
    observed = float(d.mean())
    tolerance = 1e-12 * max(float(np.abs(d).mean()), 1e-300)
    return observed, abs(observed) - tolerance


def _signed_sums(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The ``2 ** len(values)`` sums ``s @ values`` over every sign vector ``s``."""
    sums = np.zeros(1)
    for v in values.tolist():
        sums = np.concatenate((sums + v, sums - v))
    return sums


def _count_extreme(values: npt.NDArray[np.float64], threshold: float) -> int:
    """How many of the ``2 ** m`` sign assignments of ``values`` give ``|s @ values| >=
    threshold`` (a sum). The flip of every sign keeps |sum|, so only the assignments with
    the first sign + are counted (doubled); the rest is split in two halves whose signed
    sums meet by binary search (``2 ** (m / 2)`` work and memory a side)."""
    m = int(values.shape[0])
    if threshold <= 0.0 or m == 0:
        return 1 << m
    half = (m + 1) // 2
    left = values[0] + _signed_sums(values[1:half])
    right = np.sort(_signed_sums(values[half:]))
    above = right.shape[0] - np.searchsorted(right, threshold - left, side="left")
    below = np.searchsorted(right, -threshold - left, side="right")
    return 2 * int(above.sum() + below.sum())


def exact_sign_flip_p(d: npt.ArrayLike) -> float | None:
    """The exact two-sided sign-flip p of the paired differences ``d`` (share of every
    sign assignment of the non-zero ones whose |mean| reaches the observed), or None when
    more than :data:`EXACT_LIMIT` differences are non-zero."""
    x = np.asarray(d, dtype=np.float64)
    nonzero = x[x != 0.0]
    m = int(nonzero.shape[0])
    if m > EXACT_LIMIT:
        return None
    _, threshold = _threshold(x)
    return _count_extreme(nonzero, threshold * x.shape[0]) / float(1 << m)


def _monte_carlo(d: npt.NDArray[np.float64], resamples: int, seed: int) -> tuple[float, float]:
    """(p, its standard error) from ``resamples`` seeded random sign vectors over all ``n``
    differences (the stream :class:`judge.systems` adaptive judging draws too)."""
    n = d.shape[0]
    _, threshold = _threshold(d)
    rng = np.random.default_rng(seed)
    block = max(1, min(resamples, _MAX_BLOCK // n))
    extreme = 0
    done = 0
    while done < resamples:
        rows = min(block, resamples - done)
        signs = np.where(rng.random((rows, n)) < 0.5, -1.0, 1.0)
        means = (signs @ d) / n
        extreme += int(np.count_nonzero(np.abs(means) >= threshold))
        done += rows
    p = (extreme + 1) / (resamples + 1)
    return p, monte_carlo_se(p, resamples)


def monte_carlo_se(p: float, resamples: int) -> float:
    """Binomial standard error of a Monte Carlo p from ``resamples`` draws, at the estimate
    ``p = (b + 1) / (R + 1)`` (never 0: with no hit it is about ``1 / R``)."""
    return math.sqrt(p * (1.0 - p) / resamples)


def permutation_test(
    a: npt.ArrayLike, b: npt.ArrayLike, *, resamples: int = 10_000, seed: int = 0
) -> PairedTest:
    """Two-sided paired randomization test of mean(b - a) against 0 by sign flipping: exact
    up to :data:`EXACT_LIMIT` non-zero differences (``resamples`` and ``seed`` unused),
    else Monte Carlo with its standard error."""
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    d = _pair(a, b)
    observed = float(d.mean())
    exact = exact_sign_flip_p(d)
    if exact is not None:
        return PairedTest(statistic=observed, p_value=exact)
    p, se = _monte_carlo(d, resamples, seed)
    return PairedTest(statistic=observed, p_value=p, se=se, method="monte carlo")


def _flipped_means(
    d: npt.NDArray[np.float64], resamples: int, seed: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per resample, ``mean(s * d)`` and ``mean(s)`` for the sign vectors ``s`` that
    :func:`permutation_test` draws (same seed, same blocks: the same signs)."""
    n = d.shape[0]
    rng = np.random.default_rng(seed)
    block = max(1, min(resamples, _MAX_BLOCK // n))
    means: list[npt.NDArray[np.float64]] = []
    signs_mean: list[npt.NDArray[np.float64]] = []
    done = 0
    while done < resamples:
        rows = min(block, resamples - done)
        signs = np.where(rng.random((rows, n)) < 0.5, -1.0, 1.0)
        means.append((signs @ d) / n)
        signs_mean.append(signs.sum(axis=1) / n)
        done += rows
    return np.concatenate(means), np.concatenate(signs_mean)


class _ExactShifts:
    """Exact sign-flip p of ``d - delta`` for any ``delta``, all ``n`` differences
    enumerated. ``s @ (d - delta) = s @ d - delta * k`` with ``k = sum(s)``: the signed
    sums of each half are kept sorted within each ``k`` (a shift by ``delta * k`` keeps
    that order), so each trial shift costs binary searches, not a new enumeration."""

    def __init__(self, d: npt.NDArray[np.float64]) -> None:
        n = d.shape[0]
        self.n = n
        half = (n + 1) // 2
        left_sums, left_k = _signed_sums(d[1:half]), _signed_sums(np.ones(half - 1))
        self.left = d[0] + left_sums
        self.left_k = 1.0 + left_k
        right_sums, right_k = _signed_sums(d[half:]), _signed_sums(np.ones(n - half))
        self.right: list[tuple[float, npt.NDArray[np.float64]]] = []
        for k in np.unique(right_k).tolist():
            self.right.append((float(k), np.sort(right_sums[right_k == k])))

    def p(self, d: npt.NDArray[np.float64], delta: float) -> float:
        _, threshold = _threshold(d - delta)
        t = threshold * self.n
        if t <= 0.0:
            return 1.0
        count = 0
        left = self.left - delta * self.left_k
        for k, right in self.right:
            shift = delta * k
            above = right.shape[0] - np.searchsorted(right, t - left + shift, side="left")
            below = np.searchsorted(right, -t - left + shift, side="right")
            count += int(above.sum() + below.sum())
        return 2 * count / float(1 << self.n)


def permutation_interval(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """The ``confidence`` interval of mean(b - a) that inverts :func:`permutation_test`.

    ``delta`` is inside when the sign-flip test of ``d - delta`` gives ``p(delta) >= 1 -
    confidence``: exact (every assignment of the ``n`` shifted differences) when ``n <=``
    :data:`INTERVAL_EXACT_LIMIT`, else with the test's own random sign vectors (same ``seed`` and
    ``resamples``); at ``delta = 0`` it is the test's own p. Each bound is found by
    bisection between a shift the test rejects and one it does not, starting from 0 on the
    side 0 lies on, so 0 is outside exactly when ``permutation_test``'s p-value is below
    ``1 - confidence``. A bound is infinite when no shift is rejected on that side (few
    queries: with n pairs the smallest attainable p is ``2 ** (1 - n)``)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    d = _pair(a, b)
    alpha = 1.0 - confidence
    observed = float(d.mean())
    scale = max(float(np.abs(d).max()), 1e-12)
    p_zero = permutation_test(np.zeros_like(d), d, resamples=resamples, seed=seed).p_value

    if d.shape[0] <= INTERVAL_EXACT_LIMIT:
        shifts = _ExactShifts(d)

        def p_shifted(delta: float) -> float:
            return shifts.p(d, delta)

    else:
        flipped, signs = _flipped_means(d, resamples, seed)

        def p_shifted(delta: float) -> float:
            _, threshold = _threshold(d - delta)
            means = flipped - delta * signs
            return (int(np.count_nonzero(np.abs(means) >= threshold)) + 1) / (resamples + 1)

    def p_of(delta: float) -> float:
        return p_zero if delta == 0.0 else p_shifted(delta)

    def bound(direction: float) -> float:
        inside = observed  # p = 1 at the observed mean
        if direction * (0.0 - observed) > 0 and p_of(0.0) < alpha:
            outside = 0.0  # 0 lies this way and is rejected: the bound is between
        else:
            start = 0.0 if direction * (0.0 - observed) > 0 else observed
            inside = start
            step = scale
            outside = start + direction * step
            for _ in range(60):
                if p_of(outside) < alpha:
                    break
                inside, step = outside, step * 2.0
                outside = start + direction * step
            else:
                return direction * math.inf
        for _ in range(100):
            mid = (inside + outside) / 2.0
            if mid in (inside, outside) or abs(outside - inside) <= 1e-12 * scale:
                break
            if p_of(mid) >= alpha:
                inside = mid
            else:
                outside = mid
        return inside

    return bound(-1.0), bound(1.0)


def paired_t_test(a: npt.ArrayLike, b: npt.ArrayLike) -> PairedTest:
    """Paired t-test (``scipy.stats.ttest_rel(b, a)``). All differences zero gives t=0, p=1;
    fewer than two pairs gives NaN."""
    d = _pair(a, b)
    if d.shape[0] < 2:
        return PairedTest(statistic=math.nan, p_value=math.nan)
    if not np.any(d):
        return PairedTest(statistic=0.0, p_value=1.0)
    from scipy import stats  # imported on use: scipy.stats costs ~0.5 s at start-up

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_rel(np.asarray(b, dtype=np.float64), np.asarray(a, dtype=np.float64))
    return PairedTest(statistic=float(result.statistic), p_value=float(result.pvalue))


def bootstrap_ci(
    differences: npt.ArrayLike,
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``differences`` (:func:`percentile_bootstrap_mean`).
    With fewer than two values, or all equal, the interval is that value."""
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 1 or d.shape[0] == 0:
        raise ValueError("bootstrap needs a non-empty 1-d array")
    low, high, _ = percentile_bootstrap_mean(d, confidence=confidence, resamples=resamples, seed=seed)
    return (low, high)


def percentile_bootstrap_mean(
    values: npt.NDArray[np.float64], *, confidence: float, resamples: int, seed: int
) -> tuple[float, float, float]:
    """``(low, high, standard error)`` of the mean of ``values`` by the percentile bootstrap
    (``scipy.stats.bootstrap``, resampling with ``numpy.random.default_rng(seed)``).

    The one bootstrap of a mean in ``judge`` (system comparisons, stability reports).
    Fewer than two values, or all equal: ``(v, v, 0.0)`` with ``v`` the (common) value, as
    nothing can vary. ValueError without values, or for ``confidence`` outside (0, 1) or
    ``resamples < 1``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if values.shape[0] == 0:
        raise ValueError("bootstrap needs at least one value")
    if values.shape[0] < 2 or np.all(values == values[0]):
        v = float(values[0])
        return (v, v, 0.0)
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = stats.bootstrap(
            (values,),
            np.mean,
            confidence_level=confidence,
            n_resamples=resamples,
            method="percentile",
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
    ci = result.confidence_interval
    return (float(ci.low), float(ci.high), float(result.standard_error))


def holm(p_values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Holm's step-down adjusted p-values, in the input order (NaN stays NaN)."""
    return holm_with_se(p_values, np.zeros(np.asarray(p_values).shape))[0]


def holm_with_se(
    p_values: npt.ArrayLike, standard_errors: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Holm's adjusted p-values and their Monte Carlo standard errors, in the input order.
    An adjusted p is ``min(1, (m - r) p)`` of some raw p (the running maximum's), so its
    error is ``(m - r)`` times that raw p's (0 for an exact one). NaN stays NaN."""
    p = np.asarray(p_values, dtype=np.float64)
    se = np.asarray(standard_errors, dtype=np.float64)
    adjusted = np.full(p.shape, np.nan)
    adjusted_se = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = valid.shape[0]
    running, running_se = 0.0, 0.0
    for rank, index in enumerate(valid[np.argsort(p[valid], kind="stable")]):
        value = min(1.0, (m - rank) * float(p[index]))
        if value > running:
            running, running_se = value, (m - rank) * float(se[index])
        adjusted[index] = running
        adjusted_se[index] = running_se
    return adjusted, adjusted_se


def significance(p: float | None, se: float | None, alpha: float) -> str:
    """The decision of a (Holm-adjusted) randomization p at level ``alpha``: ``significant``
    (p < alpha), ``not significant``, or ``undecided`` when the p is a Monte Carlo estimate
    within :data:`MC_MARGIN` standard errors of ``alpha`` (more resamples would decide it).
    An exact p (``se`` 0 or None) is always decided; no p is ``not significant``."""
    if p is None or math.isnan(p):
        return "not significant"
    if se is not None and se > 0.0 and abs(p - alpha) <= MC_MARGIN * se:
        return "undecided"
    return "significant" if p < alpha else "not significant"


def compare_scores(
    baseline: npt.ArrayLike,
    system: npt.ArrayLike,
    *,
    measure: str = "",
    baseline_name: str = "A",
    system_name: str = "B",
    resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Comparison:
    """All paired statistics of ``system`` against ``baseline`` (difference = system - baseline)."""
    d = _pair(baseline, system)
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(system, dtype=np.float64)
    permutation = permutation_test(a, b, resamples=resamples, seed=seed)
    t_test = paired_t_test(a, b)
    low, high = bootstrap_ci(d, confidence=confidence, resamples=resamples, seed=seed)
    mean_a, mean_b = _mean(a), _mean(b)
    return Comparison(
        measure=measure,
        baseline=baseline_name,
        system=system_name,
        n=int(d.shape[0]),
        mean_baseline=mean_a,
        mean_system=mean_b,
        difference=mean_b - mean_a,
        p_permutation=permutation.p_value,
        t_statistic=t_test.statistic,
        p_t_test=t_test.p_value,
        ci_low=low,
        ci_high=high,
        p_permutation_se=permutation.se,
        p_permutation_method=permutation.method,
    )


def holm_adjust(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """Holm-adjust the permutation and t-test p-values across all ``comparisons`` (the
    permutation p's Monte Carlo error with it)."""
    perm, perm_se = holm_with_se(
        [c.p_permutation for c in comparisons], [c.p_permutation_se for c in comparisons]
    )
    ttest = holm([c.p_t_test for c in comparisons])
    return [
        replace(c, p_permutation_holm=float(p), p_t_test_holm=float(t), p_permutation_holm_se=float(e))
        for c, p, e, t in zip(comparisons, perm, perm_se, ttest, strict=True)
    ]
