"""Judge-vs-people agreement as labels arrive, and refitting a P(yes) threshold (pure).

**Agreement** (:func:`label_agreement`): on the items a person labelled, binary (the judge's
verdict vs the person's label, both made relevant/not at the job's level first):

* Cohen's kappa (:func:`judge.metrics.cohen_kappa`) with a percentile bootstrap interval
  over items (seeded; resamples where kappa is undefined are skipped and counted);
* accuracy, the 2x2 confusion matrix (rows: people, columns: judge; order 0, 1);
* ROC AUC of P(yes) against the person's label (:func:`judge.metrics.roc_auc`);
* the same per template, and on the audit items alone (drawn uniformly by the queue).

Items the queue picked by priority are the judge's uncertain ones, so the overall figures
understate agreement on the whole job: the report says so and gives the audit subset's
figure next to it. Undefined figures are None with the reason under ``undefined``.

**Human-human** (:func:`reviewer_agreement`): unweighted kappa for each pair of reviewers on
the items both labelled.

**Calibration** (:func:`calibrate_threshold`): the P(yes) threshold that maximises Cohen's
kappa against the labels, with stratified k-fold cross-validation: for each held-out fold
the threshold is fitted on the other folds; the held-out predictions of all folds are
pooled into one kappa "after", and the same items at the current threshold give the kappa
"before". The reported threshold is the one fitted on all items. Candidate thresholds are
the midpoints between consecutive distinct P(yes) values (and the current threshold); ties
go to the candidate nearest the current threshold. Refused (:class:`CalibrationError`) with
fewer than :data:`MIN_CALIBRATION_LABELS` labels or only one class.

**Does the refit help?** The gain is held-out kappa after minus before (``kappa_gain``);
its noise band ``kappa_gain_band`` is the 98% percentile interval (``confidence``; so a
one-sided 1% test of "after > before") of a paired bootstrap
(``resamples`` draws of the items with replacement, seeded; each item keeps its held-out
prediction at the fold's threshold and at the current one). The refit **helps** only when
the band lies above zero; otherwise ``helps`` is False and ``verdict`` says plainly that it
is not better than the current threshold beyond noise, and callers do not offer it as a
job's setting. For reading, each held-out fold also gets its own kappa at the current
threshold and at the threshold fitted without it (``fold_kappa_before`` /
``fold_kappa_after``, always defined: stratified folds hold both classes), their means
(``cv_kappa_before`` / ``cv_kappa_after``) and the per-fold gains' standard error corrected
for the training folds' overlap (``fold_gain_se``, Nadeau and Bengio 2003). Measured on
200 random-label sets (60 items, P(yes) uniform, labels independent of it), this band
called a refit helpful in 3% of them (a 95% band: 8%; a per-fold rule with +-2 plain
standard errors: about 10%), and on 200 sets of 100 labels following a logistic curve
centred at 0.7 (current threshold 0.5) in 46% (95% band: 62%).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from judge.metrics._agreement import AgreementUndefinedError, cohen_kappa, confusion_matrix, roc_auc

# Its public names are listed once, by the package (``_REVIEW_NAMES`` in judge/metrics/__init__.py,
# which loads this module on first use).

MIN_CALIBRATION_LABELS = 30

BIASED_SAMPLE_NOTE = (
    "the review queue picks the verdicts the judge is least sure of, so agreement on the "
    "reviewed items understates agreement on the whole job; the audit subset (drawn uniformly) "
    "is the unbiased estimate"
)


@dataclass(frozen=True)
class AgreementItem:
    """One labelled item: the judge's relevance (0/1), the person's (0/1), the judge's
    P(yes) (None: generated verdict), its template and whether it was an audit item."""

    judge: int
    human: int
    p_yes: float | None = None
    template_id: str = ""
    audit: bool = False


@dataclass(frozen=True)
class AgreementFigures:
    """Figures on one set of items (None where undefined; ``undefined`` says why)."""

    n: int
    kappa: float | None
    kappa_ci: tuple[float, float] | None
    accuracy: float | None
    confusion: list[list[int]]
    auc: float | None
    undefined: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "kappa": self.kappa,
            "kappa_ci": list(self.kappa_ci) if self.kappa_ci is not None else None,
            "accuracy": self.accuracy,
            "confusion": {"rows": "human 0/1", "columns": "judge 0/1", "matrix": self.confusion},
            "auc": self.auc,
            "undefined": dict(self.undefined),
        }


@dataclass(frozen=True)
class ReviewerPair:
    """Kappa between two reviewers on the ``n`` items both labelled (None: undefined)."""

    a: str
    b: str
    n: int
    kappa: float | None
    agreement: float | None
    undefined: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "n": self.n,
            "kappa": self.kappa,
            "agreement": self.agreement,
            "undefined": self.undefined,
        }


@dataclass(frozen=True)
class AgreementReport:
    """Judge-vs-people agreement overall, per template and on the audit items."""

    overall: AgreementFigures
    per_template: Mapping[str, AgreementFigures]
    audit: AgreementFigures
    reviewers: Sequence[ReviewerPair] = ()
    note: str = BIASED_SAMPLE_NOTE
    confidence: float = 0.95
    resamples: int = 1000

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.as_dict(),
            "per_template": {k: v.as_dict() for k, v in self.per_template.items()},
            "audit": self.audit.as_dict(),
            "reviewers": [p.as_dict() for p in self.reviewers],
            "note": self.note,
            "bootstrap": {"confidence": self.confidence, "resamples": self.resamples},
        }


def _r(x: float) -> float:
    return round(float(x), 6)


def agreement_figures(
    items: Sequence[AgreementItem], *, resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> AgreementFigures:
    """Kappa (with a percentile bootstrap CI), accuracy, confusion and AUC of ``items``."""
    n = len(items)
    undefined: dict[str, str] = {}
    human = np.array([i.human for i in items], dtype=np.int64)
    judge = np.array([i.judge for i in items], dtype=np.int64)
    confusion = confusion_matrix(human, judge, labels=[0, 1]).tolist()
    accuracy = _r(np.mean(human == judge)) if n else None
    if not n:
        undefined["accuracy"] = "no items"
    kappa: float | None = None
    ci: tuple[float, float] | None = None
    try:
        kappa = _r(cohen_kappa(human, judge, labels=[0, 1]))
    except AgreementUndefinedError as exc:
        undefined["kappa"] = str(exc)
    if kappa is not None and resamples > 0:
        rng = np.random.default_rng(seed)
        values: list[float] = []
        for _ in range(resamples):
            idx = rng.integers(0, n, size=n)
            try:
                values.append(cohen_kappa(human[idx], judge[idx], labels=[0, 1]))
            except AgreementUndefinedError:
                continue
        if values:
            tail = (1.0 - confidence) / 2.0 * 100.0
            ci = (_r(np.percentile(values, tail)), _r(np.percentile(values, 100.0 - tail)))
        else:
            undefined["kappa_ci"] = "kappa undefined on every bootstrap resample"
    with_p = [i for i in items if i.p_yes is not None and math.isfinite(i.p_yes)]
    auc: float | None = None
    try:
        if not with_p:
            raise AgreementUndefinedError("ROC AUC is undefined: no item carries P(yes)")
        auc = _r(roc_auc([i.human for i in with_p], [float(i.p_yes or 0.0) for i in with_p]))
    except AgreementUndefinedError as exc:
        undefined["auc"] = str(exc)
    return AgreementFigures(n, kappa, ci, accuracy, confusion, auc, undefined)


def label_agreement(
    items: Sequence[AgreementItem],
    *,
    reviewer_labels: Mapping[Any, Mapping[str, int]] | None = None,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> AgreementReport:
    """The judge-vs-people report (see the module doc); ``reviewer_labels`` (item ->
    reviewer -> 0/1 label) adds the human-human pairs."""
    kw: dict[str, Any] = {"resamples": resamples, "confidence": confidence, "seed": seed}
    templates = sorted({i.template_id for i in items})
    return AgreementReport(
        overall=agreement_figures(items, **kw),
        per_template={
            t: agreement_figures([i for i in items if i.template_id == t], **kw) for t in templates
        },
        audit=agreement_figures([i for i in items if i.audit], **kw),
        reviewers=reviewer_agreement(reviewer_labels or {}),
        confidence=confidence,
        resamples=resamples,
    )


def reviewer_agreement(labels: Mapping[Any, Mapping[str, int]]) -> list[ReviewerPair]:
    """Unweighted kappa and raw agreement for each pair of reviewers (sorted names) on the
    items both labelled; pairs sharing no item are left out."""
    reviewers = sorted({r for per in labels.values() for r in per})
    out: list[ReviewerPair] = []
    for a, b in combinations(reviewers, 2):
        shared = [(per[a], per[b]) for per in labels.values() if a in per and b in per]
        if not shared:
            continue
        xa = [x for x, _ in shared]
        xb = [y for _, y in shared]
        agree = _r(sum(1 for x, y in shared if x == y) / len(shared))
        try:
            out.append(ReviewerPair(a, b, len(shared), _r(cohen_kappa(xa, xb)), agree))
        except AgreementUndefinedError as exc:
            out.append(ReviewerPair(a, b, len(shared), None, agree, str(exc)))
    return out


# ---------------------------------------------------------------------------- calibration
class CalibrationError(ValueError):
    """Calibration refused (too few labels, one class); ``field`` names the input."""

    def __init__(self, message: str, *, field: str = "labels") -> None:
        self.field = field
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class CalibrationResult:
    """A refitted threshold: ``threshold`` fitted on every item; ``kappa_before`` /
    ``kappa_after``: held-out kappa at ``previous_threshold`` and at the per-fold fitted
    thresholds (pooled over folds); ``fold_thresholds``: each fold's fit."""

    threshold: float
    previous_threshold: float
    n: int
    positives: int
    folds: int
    kappa_before: float | None
    kappa_after: float | None
    fold_thresholds: Sequence[float]
    seed: int = 0
    fold_kappa_before: Sequence[float] = ()
    fold_kappa_after: Sequence[float] = ()
    kappa_gain_band: tuple[float, float] | None = None  # paired bootstrap
    confidence: float = 0.98
    resamples: int = 0

    @property
    def kappa_gain(self) -> float | None:
        """Held-out kappa after minus before (pooled over folds)."""
        if self.kappa_before is None or self.kappa_after is None:
            return None
        return _r(self.kappa_after - self.kappa_before)

    @property
    def fold_gain_se(self) -> float | None:
        """Standard error of the per-fold gains, corrected for the training folds' overlap
        (Nadeau and Bengio, 2003): sd * sqrt(1/k + 1/(k-1))."""
        gains = [a - b for a, b in zip(self.fold_kappa_after, self.fold_kappa_before, strict=True)]
        k = len(gains)
        if k < 2:
            return None
        return _r(float(np.std(gains, ddof=1)) * math.sqrt(1.0 / k + 1.0 / (k - 1)))

    @property
    def helps(self) -> bool:
        """The refit beats the current threshold beyond noise: the gain's band is above 0."""
        return self.kappa_gain_band is not None and self.kappa_gain_band[0] > 0

    @property
    def verdict(self) -> str:
        gain, band = self.kappa_gain, self.kappa_gain_band
        if gain is None or band is None:
            return "held-out kappa is undefined: the refit's effect is unknown"
        figures = (
            f"held-out kappa {self.kappa_before:.3f} -> {self.kappa_after:.3f}, gain {gain:+.3f} "
            f"({self.confidence:.0%} paired bootstrap band {band[0]:+.3f} .. {band[1]:+.3f}; "
            f"{self.folds} folds)"
        )
        if self.helps:
            return f"the refit threshold helps: {figures}"
        return (
            f"the refit threshold does not help: {figures}; it is not better than the current "
            f"threshold {self.previous_threshold:g} beyond noise, so keep the current one"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "previous_threshold": self.previous_threshold,
            "n": self.n,
            "positives": self.positives,
            "folds": self.folds,
            "kappa_before": self.kappa_before,
            "kappa_after": self.kappa_after,
            "fold_thresholds": list(self.fold_thresholds),
            "seed": self.seed,
            "method": "max Cohen's kappa; stratified k-fold, held-out predictions pooled",
            "fold_kappa_before": list(self.fold_kappa_before),
            "fold_kappa_after": list(self.fold_kappa_after),
            "cv_kappa_before": _mean(self.fold_kappa_before),
            "cv_kappa_after": _mean(self.fold_kappa_after),
            "fold_gain_se": self.fold_gain_se,
            "kappa_gain": self.kappa_gain,
            "kappa_gain_band": None if self.kappa_gain_band is None else list(self.kappa_gain_band),
            "resamples": self.resamples,
            "confidence": self.confidence,
            "helps": self.helps,
            "rule": (
                "helps iff the lower end of the paired bootstrap band of held-out kappa after - before "
                "(items resampled, each fold's held-out predictions fixed) is above 0"
            ),
            "verdict": self.verdict,
        }


def _mean(values: Sequence[float]) -> float | None:
    return _r(float(np.mean(values))) if len(values) else None


def _kappa_at(p: np.ndarray, y: np.ndarray, t: float) -> float | None:
    try:
        return cohen_kappa(y, (p >= t).astype(np.int64), labels=[0, 1])
    except AgreementUndefinedError:
        return None


def _fit(p: np.ndarray, y: np.ndarray, current: float) -> float:
    values = np.unique(p)
    cands = list((values[:-1] + values[1:]) / 2.0) if values.size > 1 else []
    cands.append(current)
    best_t = current
    best_k = -math.inf
    for t in sorted(cands, key=lambda c: (abs(c - current), c)):
        k = _kappa_at(p, y, float(t))
        if k is not None and k > best_k + 1e-12:
            best_k, best_t = k, float(t)
    return round(best_t, 6)


def _folds(y: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    assignment = np.empty(y.size, dtype=np.int64)
    for cls in (0, 1):
        idx = np.flatnonzero(y == cls)
        rng.shuffle(idx)
        assignment[idx] = np.arange(idx.size) % k
    return [np.flatnonzero(assignment == f) for f in range(k)]


def calibrate_threshold(
    p_yes: Iterable[float],
    labels: Iterable[int],
    *,
    current_threshold: float = 0.5,
    folds: int = 5,
    seed: int = 0,
    min_labels: int = MIN_CALIBRATION_LABELS,
    resamples: int = 2000,
    confidence: float = 0.98,
) -> CalibrationResult:
    """Refit the P(yes) threshold on labelled items (labels 0/1); see the module doc."""
    p = np.asarray(list(p_yes), dtype=np.float64)
    y = np.asarray(list(labels), dtype=np.int64)
    if p.shape != y.shape:
        raise CalibrationError(f"{p.size} P(yes) values but {y.size} labels")
    if p.size < min_labels:
        raise CalibrationError(
            f"calibration needs at least {min_labels} labelled items with P(yes), got {p.size}"
        )
    if not np.all(np.isfinite(p)):
        raise CalibrationError("P(yes) values must be finite", field="p_yes")
    if not np.all(np.isin(y, (0, 1))):
        raise CalibrationError("labels must be 0/1 (map graded labels at a stated level first)")
    positives = int(y.sum())
    if positives == 0 or positives == y.size:
        raise CalibrationError(f"calibration needs both classes; all {y.size} labels are {int(y[0])}")
    k = max(2, min(folds, positives, int(y.size) - positives))
    predicted = np.zeros(y.size, dtype=np.int64)
    fold_thresholds: list[float] = []
    fold_before: list[float] = []
    fold_after: list[float] = []
    for test in _folds(y, k, seed):
        train = np.setdiff1d(np.arange(y.size), test)
        t = _fit(p[train], y[train], current_threshold)
        fold_thresholds.append(t)
        predicted[test] = (p[test] >= t).astype(np.int64)
        # each fold holds both classes (k <= either class's count): kappa is defined
        fold_before.append(
            _r(cohen_kappa(y[test], (p[test] >= current_threshold).astype(np.int64), labels=[0, 1]))
        )
        fold_after.append(_r(cohen_kappa(y[test], predicted[test], labels=[0, 1])))
    before = _kappa_at(p, y, current_threshold)
    try:
        after: float | None = cohen_kappa(y, predicted, labels=[0, 1])
    except AgreementUndefinedError:
        after = None
    band = _gain_band(y, (p >= current_threshold).astype(np.int64), predicted, seed, resamples, confidence)
    return CalibrationResult(
        threshold=_fit(p, y, current_threshold),
        previous_threshold=float(current_threshold),
        n=int(y.size),
        positives=positives,
        folds=k,
        kappa_before=None if before is None else _r(before),
        kappa_after=None if after is None else _r(after),
        fold_thresholds=fold_thresholds,
        seed=seed,
        fold_kappa_before=fold_before,
        fold_kappa_after=fold_after,
        kappa_gain_band=band,
        resamples=resamples,
        confidence=confidence,
    )


def _kappas(y: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Cohen's kappa of each row pair (binary), NaN where undefined."""
    n = y.shape[-1]
    p_o = (y == pred).mean(axis=-1)
    a = y.sum(axis=-1)
    b = pred.sum(axis=-1)
    p_e = (a * b + (n - a) * (n - b)) / float(n * n)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: np.ndarray = (p_o - p_e) / (1.0 - p_e)
    return out


def _gain_band(
    y: np.ndarray, before: np.ndarray, after: np.ndarray, seed: int, resamples: int, confidence: float
) -> tuple[float, float] | None:
    """``confidence`` percentile interval of kappa(after) - kappa(before) over paired resamples of the
    items (seeded); resamples where either kappa is undefined are skipped."""
    if resamples < 1:
        return None
    idx = np.random.default_rng(seed).integers(0, y.size, size=(resamples, y.size))
    diff = _kappas(y[idx], after[idx]) - _kappas(y[idx], before[idx])
    diff = diff[np.isfinite(diff)]
    if diff.size == 0:
        return None
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(diff, [tail, 1.0 - tail])
    return _r(float(lo)), _r(float(hi))
