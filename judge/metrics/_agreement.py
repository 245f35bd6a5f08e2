"""Agreement between two sets of relevance labels (human vs judge), as pure functions.

Every function takes the two raters' labels for the *same* items, aligned by position
(``a[i]`` and ``b[i]`` label item ``i``), as 1-D arrays of integer grades. Choosing the items
both raters labelled, and reporting the rest, is the caller's job.

Conventions (each is a parameter or stated here, and callers echo them):

* **Cohen's kappa** is computed from the confusion matrix over ``labels`` (default: the
  sorted union of the labels either rater used). ``weights="none"`` is the unweighted
  kappa; ``"linear"``/``"quadratic"`` use the disagreement weights ``|i - j|`` /
  ``(i - j)**2`` of the label *values* (for a contiguous label set such as 0..3 this is
  the same as scikit-learn's index-based weights).
* **Binary kappa at level l**: both raters' labels are first mapped to relevant
  (``grade >= l``) / not relevant, then unweighted kappa.
* **Krippendorff's alpha** wraps the ``krippendorff`` package (checked against hand-derived
  examples in the tests); data are raters x units with NaN for a missing label; units with
  fewer than two labels are not pairable and drop out.
* **Kendall's tau** is tau-b by default (ties corrected, scipy's default), **Spearman's rho**
  the Pearson correlation of average ranks (scipy.stats.spearmanr).
* **ROC AUC** is the Mann-Whitney probability that a random relevant item scores higher
  than a random non-relevant one, ties counting one half.

**Undefined values.** Kappa is undefined (0/0) when the expected disagreement is zero,
i.e. both raters gave every item the same single label; alpha when all pairable values
are one value; correlations when either input is constant; AUC when one class is absent;
every measure on empty input. These functions then raise :class:`AgreementUndefinedError`
with the reason. They never return NaN, and they do not return 1.0 either, because that
would report perfect agreement where nothing was measured. A report catches the error and
prints ``undefined`` with the reason (see ``judge agree``).
"""

from __future__ import annotations

from typing import Literal

import krippendorff
import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

KappaWeights = Literal["none", "linear", "quadratic"]
AlphaLevel = Literal["nominal", "ordinal", "interval", "ratio"]
TauVariant = Literal["b", "c"]

# Its public names are listed once, by the package (``_AGREEMENT_NAMES`` in judge/metrics/__init__.py,
# which loads this module on first use).


class AgreementUndefinedError(ValueError):
    """An agreement measure has no value for this input (0/0); the message says why."""


def _labels_pair(a: ArrayLike, b: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    x = np.asarray(a)
    y = np.asarray(b)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(f"labels must be 1-D arrays (got shapes {x.shape} and {y.shape})")
    if x.shape != y.shape:
        raise ValueError(f"the two label arrays differ in length ({x.size} vs {y.size})")
    out: list[NDArray[np.int64]] = []
    for arr in (x, y):
        if arr.dtype == np.bool_:
            out.append(arr.astype(np.int64))
            continue
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            as_float = arr.astype(np.float64)
            if not np.all(np.isfinite(as_float)) or not np.all(as_float == np.round(as_float)):
                raise ValueError("labels must be integers (got non-integral or missing values)")
        out.append(arr.astype(np.int64))
    return out[0], out[1]


def _label_set(x: NDArray[np.int64], y: NDArray[np.int64], labels: ArrayLike | None) -> NDArray[np.int64]:
    if labels is None:
        return np.union1d(x, y).astype(np.int64)
    given = np.asarray(labels, dtype=np.int64)
    if given.ndim != 1 or np.unique(given).size != given.size:
        raise ValueError("labels must be a 1-D sequence of distinct integers")
    missing = np.setdiff1d(np.union1d(x, y), given)
    if missing.size:
        raise ValueError(f"labels {missing.tolist()} occur in the data but not in 'labels'")
    return np.sort(given)


def confusion_matrix(a: ArrayLike, b: ArrayLike, labels: ArrayLike | None = None) -> NDArray[np.int64]:
    """Counts ``m[i, j]`` of items rater ``a`` labelled ``labels[i]`` and rater ``b`` ``labels[j]``.

    ``labels`` defaults to the sorted union of both raters' labels; rows are ``a``.
    """
    x, y = _labels_pair(a, b)
    lab = _label_set(x, y, labels)
    k = lab.size
    matrix = np.zeros((k, k), dtype=np.int64)
    if x.size:
        np.add.at(matrix, (np.searchsorted(lab, x), np.searchsorted(lab, y)), 1)
    return matrix


def exact_agreement(a: ArrayLike, b: ArrayLike) -> float:
    """Share of items both raters gave the same label."""
    x, y = _labels_pair(a, b)
    if x.size == 0:
        raise AgreementUndefinedError("exact agreement is undefined: no items")
    return float(np.mean(x == y))


def cohen_kappa(
    a: ArrayLike,
    b: ArrayLike,
    *,
    weights: KappaWeights = "none",
    labels: ArrayLike | None = None,
) -> float:
    """Cohen's kappa ``1 - sum(w * O) / sum(w * E)`` from the confusion matrix.

    ``O`` is the observed confusion matrix, ``E`` the one expected from the raters'
    marginals, ``w`` the disagreement weights (0 on the diagonal; 1 off it when
    ``weights="none"``, else ``|i-j|`` or ``(i-j)**2`` of the label values).
    Raises :class:`AgreementUndefinedError` when there are no items or the expected
    disagreement is zero (both raters used one and the same single label).
    """
    x, y = _labels_pair(a, b)
    if x.size == 0:
        raise AgreementUndefinedError("kappa is undefined: no items")
    lab = _label_set(x, y, labels)
    observed = confusion_matrix(x, y, lab)
    n = int(observed.sum())
    rows = observed.sum(axis=1)
    cols = observed.sum(axis=0)
    diff = lab[:, None] - lab[None, :]
    if weights == "none":
        w = (diff != 0).astype(np.int64)
    elif weights == "linear":
        w = np.abs(diff)
    elif weights == "quadratic":
        w = diff * diff
    else:
        raise ValueError(f"unknown kappa weights {weights!r} (none, linear, quadratic)")
    # Integer arithmetic up to the final division: n * sum(w*O) and sum(w * outer(rows, cols)).
    disagreement_obs = int(np.sum(w * observed)) * n
    disagreement_exp = int(np.sum(w * np.outer(rows, cols)))
    if disagreement_exp == 0:
        raise AgreementUndefinedError(
            f"kappa is undefined: both raters gave all {n} items the label {int(x[0])} "
            "(expected disagreement is zero)"
        )
    return 1.0 - disagreement_obs / disagreement_exp


def binary_kappa(a: ArrayLike, b: ArrayLike, level: int) -> float:
    """Unweighted kappa after mapping both raters' grades to relevant (``>= level``) or not."""
    x, y = _labels_pair(a, b)
    return cohen_kappa(x >= level, y >= level)


def krippendorff_alpha(
    data: ArrayLike,
    *,
    level: AlphaLevel,
    value_domain: ArrayLike | None = None,
) -> float:
    """Krippendorff's alpha for ``data`` (raters x units; NaN = not labelled).

    ``level`` is the level of measurement (``ordinal`` for relevance grades; ``nominal``,
    ``interval`` and ``ratio`` as the ``krippendorff`` package defines them).
    ``value_domain`` (default: the sorted distinct values present) orders the values for
    the ordinal metric. Raises :class:`AgreementUndefinedError` when no unit has two labels
    or all pairable labels are one value (a caller that reports "undefined" as NaN, such as
    the stability report, catches it: :func:`judge.stability.krippendorff_alpha`).
    """
    matrix = np.asarray(data, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"alpha needs a 2-D raters x units array (got shape {matrix.shape})")
    if level not in ("nominal", "ordinal", "interval", "ratio"):
        raise ValueError(f"unknown level of measurement {level!r} (nominal, ordinal, interval, ratio)")
    present = ~np.isnan(matrix)
    pairable = present.sum(axis=0) >= 2
    if not np.any(pairable):
        raise AgreementUndefinedError("alpha is undefined: no item has labels from two raters")
    values = np.unique(matrix[:, pairable][present[:, pairable]])
    if values.size < 2:
        raise AgreementUndefinedError(
            f"alpha is undefined: every pairable label is {values[0]:g} (expected disagreement is zero)"
        )
    domain = values if value_domain is None else np.asarray(value_domain, dtype=np.float64)
    outside = np.setdiff1d(np.unique(matrix[present]), domain)
    if outside.size:
        raise ValueError(f"values {outside.tolist()} are not in value_domain")
    return float(krippendorff.alpha(reliability_data=matrix, value_domain=domain, level_of_measurement=level))


def _two_scores(x: ArrayLike, y: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    u = np.asarray(x, dtype=np.float64)
    v = np.asarray(y, dtype=np.float64)
    if u.ndim != 1 or u.shape != v.shape:
        raise ValueError(f"need two 1-D arrays of the same length (got {u.shape} and {v.shape})")
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(v))):
        raise ValueError("scores must be finite numbers")
    return u, v


def _check_correlation(name: str, u: NDArray[np.float64], v: NDArray[np.float64]) -> None:
    if u.size < 2:
        raise AgreementUndefinedError(f"{name} is undefined: fewer than two items")
    for which, arr in (("first", u), ("second", v)):
        if np.all(arr == arr[0]):
            raise AgreementUndefinedError(f"{name} is undefined: the {which} ranking is constant")


def kendall_tau(x: ArrayLike, y: ArrayLike, *, variant: TauVariant = "b") -> float:
    """Kendall's tau between two score lists (tau-b by default; scipy.stats.kendalltau)."""
    u, v = _two_scores(x, y)
    _check_correlation("Kendall's tau", u, v)
    return float(stats.kendalltau(u, v, variant=variant).statistic)


def spearman_rho(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rho between two score lists (average ranks for ties; scipy.stats.spearmanr)."""
    u, v = _two_scores(x, y)
    _check_correlation("Spearman's rho", u, v)
    return float(stats.spearmanr(u, v).statistic)


def roc_auc(relevant: ArrayLike, scores: ArrayLike) -> float:
    """ROC AUC of ``scores`` for the binary truth ``relevant`` (rank formula, ties count 1/2).

    ``AUC = (R_pos - n_pos (n_pos + 1) / 2) / (n_pos n_neg)`` with ``R_pos`` the sum of the
    relevant items' average ranks. Raises :class:`AgreementUndefinedError` when either
    class is empty.
    """
    truth = np.asarray(relevant)
    s = np.asarray(scores, dtype=np.float64)
    if truth.ndim != 1 or truth.shape != s.shape:
        raise ValueError(f"need two 1-D arrays of the same length (got {truth.shape} and {s.shape})")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite numbers")
    if truth.dtype != np.bool_:
        if not np.all(np.isin(truth, (0, 1))):
            raise ValueError("relevant must hold booleans or 0/1")
        truth = truth.astype(bool)
    n_pos = int(truth.sum())
    n_neg = int(truth.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        raise AgreementUndefinedError(
            f"ROC AUC is undefined: {n_pos} relevant and {n_neg} non-relevant items (need both)"
        )
    ranks = stats.rankdata(s)
    return float((ranks[truth].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))
