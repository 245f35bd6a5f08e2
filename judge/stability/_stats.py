"""Pure statistics for stability runs: spread, agreement across runs, bootstrap intervals.

Every function takes plain numbers or numpy arrays and returns a number (or a small frozen
record); nothing here knows about backends, files or verdict objects.

Conventions (each one is also echoed in the stability report):

* **relative spread** of K figures is ``(max - min) / |mean|``. When the mean is 0 the ratio
  is 0 if all figures are equal (nothing moved) and ``inf`` otherwise (any movement away
  from zero is an unbounded relative change, i.e. a breach of any threshold).
* **coefficient of variation** is ``std(ddof=1) / |mean|`` (sample standard deviation
  across runs); 0.0 for fewer than 2 figures; the same zero-mean rule as the spread.
* **Fleiss' kappa** (runs are the raters, passages the subjects) is undefined when every
  rating falls in one category (chance agreement is 1): it is returned as ``nan``.
* **Krippendorff's alpha** is :func:`judge.metrics.krippendorff_alpha` (missing ratings
  are ``nan``), reported as ``nan`` where it is undefined (fewer than two distinct values).
* The **bootstrap** resamples queries with replacement (percentile interval, seeded).
* **Queries needed**: with ``n`` queries and a measured CI half-width ``h``, the half-width
  shrinks as ``1/sqrt(n)``, so reaching a target half-width ``t`` takes
  ``n_needed = ceil(n * (h / t) ** 2)`` queries (the same as ``(z * s / t) ** 2`` for a
  normal interval with per-query standard deviation ``s``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from judge.metrics import percentile_bootstrap_mean

if TYPE_CHECKING:
    from judge.metrics import AlphaLevel

__all__ = [
    "Interval",
    "bootstrap_mean_ci",
    "coefficient_of_variation",
    "deviation_rate",
    "fleiss_kappa",
    "fleiss_kappa_from_labels",
    "flip_rate",
    "krippendorff_alpha",
    "queries_needed",
    "relative_spread",
    "value_range",
]

FloatArray = npt.NDArray[np.float64]


def _as_1d(values: Sequence[float] | FloatArray) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"expected a 1-d sequence of numbers, got shape {arr.shape}")
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError("values must be finite numbers")
    return arr


def value_range(values: Sequence[float] | FloatArray) -> float:
    """``max - min`` (0.0 for an empty sequence)."""
    arr = _as_1d(values)
    return float(arr.max() - arr.min()) if arr.size else 0.0


def relative_spread(values: Sequence[float] | FloatArray) -> float:
    """``(max - min) / |mean|``; with mean 0: 0.0 when all equal, else ``inf``."""
    arr = _as_1d(values)
    if arr.size == 0:
        return 0.0
    rng = float(arr.max() - arr.min())
    mean = abs(float(arr.mean()))
    if mean == 0.0:
        return 0.0 if rng == 0.0 else math.inf
    return rng / mean


def coefficient_of_variation(values: Sequence[float] | FloatArray) -> float:
    """``std(ddof=1) / |mean|``; 0.0 for < 2 values; with mean 0: 0.0 if all equal else ``inf``."""
    arr = _as_1d(values)
    if arr.size < 2 or float(arr.max() - arr.min()) == 0.0:
        return 0.0  # exactly 0 (numpy's std of equal values can be 1e-16)
    sd = float(arr.std(ddof=1))
    mean = abs(float(arr.mean()))
    if mean == 0.0:
        return 0.0 if sd == 0.0 else math.inf
    return sd / mean


def _label_columns(labels: Sequence[Sequence[Hashable]]) -> list[tuple[Hashable, ...]]:
    """Transpose raters x subjects into one tuple of ratings per subject."""
    if not labels:
        return []
    width = len(labels[0])
    if any(len(row) != width for row in labels):
        raise ValueError("every rater must rate the same number of subjects")
    return [tuple(row[j] for row in labels) for j in range(width)]


def flip_rate(labels: Sequence[Sequence[Hashable]]) -> float:
    """Share of subjects (columns) whose label is not identical across all raters (rows).

    ``labels[r][j]`` is rater ``r``'s label for subject ``j``; 0.0 when there are no subjects.
    """
    cols = _label_columns(labels)
    if not cols:
        return 0.0
    return sum(1 for col in cols if len(set(col)) > 1) / len(cols)


def deviation_rate(labels: Sequence[Sequence[Hashable]]) -> float:
    """Share of ratings that differ from their subject's most common rating.

    With independent flips of probability ``p`` per rating this estimates ``p`` (slightly
    below it: a subject flipped in most runs has the flipped label as its mode). Ties for
    the mode are broken by first occurrence; the result does not depend on which tied label
    is chosen. 0.0 when there are no ratings.
    """
    cols = _label_columns(labels)
    total = sum(len(col) for col in cols)
    if total == 0:
        return 0.0
    off = sum(len(col) - Counter(col).most_common(1)[0][1] for col in cols)
    return off / total


def fleiss_kappa(counts: npt.ArrayLike) -> float:
    """Fleiss' kappa from a subjects x categories table of rating counts.

    ``counts[i, j]`` is how many raters put subject ``i`` in category ``j``; every subject
    must have the same number ``n >= 2`` of ratings. Returns ``nan`` when undefined (no
    subjects, or every rating in a single category, so chance agreement is 1).
    """
    table = np.asarray(counts, dtype=np.float64)
    if table.ndim != 2:
        raise ValueError(f"counts must be a 2-d subjects x categories table, got shape {table.shape}")
    if table.shape[0] == 0:
        return math.nan
    if np.any(table < 0):
        raise ValueError("counts must be non-negative")
    per_subject = table.sum(axis=1)
    n = float(per_subject[0])
    if not np.all(per_subject == n):
        raise ValueError("every subject must have the same number of ratings")
    if n < 2:
        raise ValueError("Fleiss' kappa needs at least 2 ratings per subject")
    n_subjects = table.shape[0]
    p_j = table.sum(axis=0) / (n_subjects * n)
    p_i = (np.square(table).sum(axis=1) - n) / (n * (n - 1))
    p_bar = float(p_i.mean())
    p_e = float(np.square(p_j).sum())
    if math.isclose(p_e, 1.0):
        return math.nan
    return (p_bar - p_e) / (1.0 - p_e)


def fleiss_kappa_from_labels(
    labels: Sequence[Sequence[Hashable]], categories: Sequence[Hashable] | None = None
) -> float:
    """Fleiss' kappa from raters x subjects labels (every rater rates every subject).

    ``categories`` fixes the category set (default: the labels seen).
    """
    cols = _label_columns(labels)
    if not cols:
        return math.nan
    cats = list(categories) if categories is not None else sorted({x for c in cols for x in c}, key=str)
    index = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(cols), len(cats)), dtype=np.float64)
    for i, col in enumerate(cols):
        for label in col:
            if label not in index:
                raise ValueError(f"label {label!r} is not one of the categories {cats!r}")
            table[i, index[label]] += 1
    return fleiss_kappa(table)


def krippendorff_alpha(
    data: npt.ArrayLike,
    *,
    level: AlphaLevel = "nominal",
    value_domain: Sequence[float] | None = None,
) -> float:
    """Krippendorff's alpha of a raters x units table (``nan`` = missing rating), as the
    stability report gives it: :func:`judge.metrics.krippendorff_alpha` (the one
    implementation), with ``nan`` where that raises :class:`~judge.metrics.AgreementUndefinedError`
    (fewer than two distinct values, or no unit with two ratings).
    """
    from judge.metrics import AgreementUndefinedError
    from judge.metrics import krippendorff_alpha as alpha

    try:
        return alpha(data, level=level, value_domain=value_domain)
    except AgreementUndefinedError:
        return math.nan


@dataclass(frozen=True, slots=True)
class Interval:
    """A bootstrap interval of a mean: ``low``/``high`` bounds, ``estimate`` (the sample
    mean), ``se`` (standard deviation of the bootstrap distribution), ``n`` (sample size)."""

    estimate: float
    low: float
    high: float
    se: float
    n: int
    confidence: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0


def bootstrap_mean_ci(
    values: Sequence[float] | FloatArray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval of the mean, resampling the values with replacement.

    Seeded (``numpy.random.default_rng(seed)``), so the same values give the same interval.
    0 values: all fields ``nan``; 1 value, or all equal: the degenerate interval ``[v, v]``
    with se 0 (:func:`judge.metrics.percentile_bootstrap_mean`).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    arr = _as_1d(values)
    if arr.size == 0:
        return Interval(math.nan, math.nan, math.nan, math.nan, 0, confidence)
    low, high, se = percentile_bootstrap_mean(arr, confidence=confidence, resamples=n_resamples, seed=seed)
    return Interval(float(arr.mean()), low, high, se, int(arr.size), confidence)


def queries_needed(n: int, half_width: float, target: float) -> int | None:
    """Queries needed for a CI half-width of at most ``target``: ``ceil(n * (half_width / target)^2)``.

    Assumes the half-width shrinks as ``1/sqrt(n)``. ``None`` when it cannot be estimated
    (``n < 2``, a non-finite half-width, or ``target <= 0``); at least 2 otherwise, since a
    bootstrap interval needs two queries.
    """
    if n < 2 or not math.isfinite(half_width) or not math.isfinite(target) or target <= 0.0:
        return None
    needed = math.ceil(n * (half_width / target) ** 2 - 1e-9)
    return max(2, needed)
