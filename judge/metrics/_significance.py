"""Paired significance tests over per-query scores of two systems.

* :func:`permutation_test` — two-sided paired randomization test (random sign flips of the
  per-query differences), seeded, ``p = (b + 1) / (R + 1)`` where ``b`` counts resampled
  mean differences at least as extreme as the observed one.
* :func:`permutation_interval` — the interval of that same test: the shifts ``delta`` of the
  mean difference it does not reject (the sign flips of ``d - delta``, same seed and
  resamples, ``p(delta) >= 1 - confidence``). It excludes 0 exactly when the test's p-value
  is below ``1 - confidence``, so an interval and a p-value shown together cannot disagree.
* :func:`paired_t_test` — ``scipy.stats.ttest_rel``.
* :func:`bootstrap_ci` — percentile bootstrap CI of the mean difference (``scipy.stats.bootstrap``).
* :func:`holm` — Holm's step-down adjustment of a family of p-values.

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
    "Comparison",
    "PairedTest",
    "bootstrap_ci",
    "compare_scores",
    "holm",
    "holm_adjust",
    "paired_t_test",
    "permutation_interval",
    "permutation_test",
]

_MAX_BLOCK = 1 << 20  # random numbers drawn per block (8 MiB of float64)


@dataclass(frozen=True)
class PairedTest:
    """Test statistic (positive when the second system scores higher) and two-sided p-value."""

    statistic: float
    p_value: float


@dataclass(frozen=True)
class Comparison:
    """One system against the baseline on one measure, over ``n`` paired queries."""

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


def permutation_test(
    a: npt.ArrayLike, b: npt.ArrayLike, *, resamples: int = 10_000, seed: int = 0
) -> PairedTest:
    """Two-sided paired randomization test of mean(b - a) against 0 by sign flipping."""
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    d = _pair(a, b)
    n = d.shape[0]
    observed = float(d.mean())
    tolerance = 1e-12 * max(float(np.abs(d).mean()), 1e-300)
    threshold = abs(observed) - tolerance
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
    return PairedTest(statistic=observed, p_value=(extreme + 1) / (resamples + 1))


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


def permutation_interval(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """The ``confidence`` interval of mean(b - a) that inverts :func:`permutation_test`.

    ``delta`` is inside when the sign-flip test of ``d - delta`` (the same sign vectors:
    same ``seed`` and ``resamples``) gives ``p(delta) >= 1 - confidence``. Each bound is found
    by bisection between a shift the test rejects and one it does not, starting from 0 on
    the side 0 lies on, so 0 is outside exactly when ``permutation_test``'s p-value is below
    ``1 - confidence``. A bound is infinite when no shift is rejected on that side (few
    queries: with n pairs the smallest attainable p is about ``2 ** (1 - n)``)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    d = _pair(a, b)
    alpha = 1.0 - confidence
    observed = float(d.mean())
    flipped, signs = _flipped_means(d, resamples, seed)
    scale = max(float(np.abs(d).max()), 1e-12)

    def p_of(delta: float) -> float:
        shifted = d - delta
        tolerance = 1e-12 * max(float(np.abs(shifted).mean()), 1e-300)
        threshold = abs(observed - delta) - tolerance
        means = flipped - delta * signs if delta != 0.0 else flipped
        return (int(np.count_nonzero(np.abs(means) >= threshold)) + 1) / (resamples + 1)

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
    p = np.asarray(p_values, dtype=np.float64)
    adjusted = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = valid.shape[0]
    running = 0.0
    for rank, index in enumerate(valid[np.argsort(p[valid], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * float(p[index])))
        adjusted[index] = running
    return adjusted


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
    )


def holm_adjust(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """Holm-adjust the permutation and t-test p-values across all ``comparisons``."""
    perm = holm([c.p_permutation for c in comparisons])
    ttest = holm([c.p_t_test for c in comparisons])
    return [
        replace(c, p_permutation_holm=float(p), p_t_test_holm=float(t))
        for c, p, t in zip(comparisons, perm, ttest, strict=True)
    ]
