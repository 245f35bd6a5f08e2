"""Expected (probability-weighted) metrics and borderline verdicts of one query's verdicts.

The numbers come from :mod:`judge.metrics._expected_ranking` (definitions there); this module picks
the inputs from :class:`PassageVerdict` objects or their JSON dicts (output records):

* unjudged passages are dropped, as for the hard metrics;
* relevance probability: ``p_yes`` (binary probability mode: P(yes); graded: P(grade >=
  grade_threshold); sampled generation: the share of yes samples); a judged verdict without
  one counts as 1.0 (yes) or 0.0 (no);
* expected NDCG (E[NDCG@k], :func:`judge.metrics.expected_ndcg`): each passage's grade is
  drawn from ``probs`` (graded, all of "0".."3" present), else binary ``p_yes`` (graded
  without per-grade probabilities: the verdict's grade, fixed); exact, or seeded Monte Carlo
  with its standard error in ``ndcg_stderr`` (``ndcg_method`` says which);
* a query has expected metrics only when at least one judged verdict carries ``p_yes`` or
  ``expected_grade`` (otherwise ``None``: they would only repeat the hard metrics).

Borderline verdicts (:func:`is_borderline`): binary, ``|p_yes - threshold| <= margin``;
graded with grade probabilities, the most probable grade on the relevant side and the most
probable on the other side differ by at most ``margin`` (the argmax, hence the verdict,
flips when they swap). These are the verdicts that another machine's float rounding may
flip (docs/embedded_determinism.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from judge.judging._models import PassageVerdict
from judge.metrics import expected_average_precision, expected_ndcg

__all__ = [
    "DEFAULT_BORDERLINE_MARGIN",
    "borderline_verdicts",
    "expected_metrics",
    "is_borderline",
    "mean_expected",
]

NDCG_DEFINITION = (
    "E[NDCG@k] under independent relevance drawn from each verdict's P(yes) (graded: its grade "
    "probabilities); label-free ideal of each drawn labeling; exact, or seeded Monte Carlo with ndcg_stderr"
)

#: ``--borderline-margin``: P(yes) this close to the threshold counts as borderline.
DEFAULT_BORDERLINE_MARGIN = 0.02

VerdictLike = PassageVerdict | Mapping[str, Any]


def _get(v: VerdictLike, name: str) -> Any:
    return v.get(name) if isinstance(v, Mapping) else getattr(v, name)


def _judged(verdicts: Iterable[VerdictLike]) -> list[VerdictLike]:
    return [v for v in verdicts if _get(v, "verdict") != "unjudged"]


def _p(v: VerdictLike) -> float:
    p = _get(v, "p_yes")
    if p is not None:
        return min(1.0, max(0.0, float(p)))
    return 1.0 if _get(v, "verdict") == "yes" else 0.0


def _grade_row(v: VerdictLike, mode: str) -> list[float]:
    """P(grade = 0..3) of one judged verdict (see the module docstring)."""
    if mode == "graded":
        probs = _get(v, "probs")
        if isinstance(probs, Mapping) and all(str(g) in probs for g in range(4)):
            row = [max(0.0, float(probs[str(g)])) for g in range(4)]
            if sum(row) > 0.0:
                return row
        grade = _get(v, "grade")
        g = min(3, max(0, int(grade))) if grade is not None else (3 if _get(v, "verdict") == "yes" else 0)
        return [1.0 if i == g else 0.0 for i in range(4)]
    p = _p(v)
    return [1.0 - p, p]


def expected_metrics(verdicts: Sequence[VerdictLike], mode: str, k: Sequence[int]) -> dict[str, Any] | None:
    """``{"map": E[AP], "ndcg": {"5": E[NDCG@5], ...}, "ndcg_stderr": {...}, "ndcg_method":
    ...}`` of one query (``map`` is the query's expected AP, so that the mean over records is
    the expected mAP); None when no judged verdict carries a probability."""
    judged = _judged(verdicts)
    if not any(_get(v, "p_yes") is not None or _get(v, "expected_grade") is not None for v in judged):
        return None
    probs = [_p(v) for v in judged]
    dist = np.array([_grade_row(v, mode) for v in judged], dtype=np.float64).reshape(len(judged), -1)
    ndcg: dict[str, float] = {}
    stderr: dict[str, float] = {}
    methods: set[str] = set()
    for c in k:
        e = expected_ndcg(dist, c)
        ndcg[str(c)] = round(e.value, 6)
        stderr[str(c)] = round(e.stderr, 6)
        methods.add("exact" if e.method == "exact" else f"monte_carlo(samples={e.samples}, seed={e.seed})")
    return {
        "map": round(expected_average_precision(probs), 6),
        "ndcg": ndcg,
        "ndcg_stderr": stderr,
        "ndcg_method": ", ".join(sorted(methods)) if methods else "exact",
    }


def mean_expected(blocks: Iterable[Mapping[str, Any] | None], k: Sequence[int]) -> dict[str, Any] | None:
    """The mean of per-query ``expected`` blocks over the queries that have one."""
    present = [b for b in blocks if b]
    if not present:
        return None

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 6) if values else None

    def values(c: int) -> list[float]:
        return [float(b["ndcg"][str(c)]) for b in present if b.get("ndcg", {}).get(str(c)) is not None]

    def stderr(c: int) -> float | None:
        # the standard error of a mean of independent per-query estimates
        errors = [
            float((b.get("ndcg_stderr") or {}).get(str(c)) or 0.0)
            for b in present
            if str(c) in b.get("ndcg", {})
        ]
        return round(math.sqrt(sum(e * e for e in errors)) / len(errors), 6) if errors else None

    return {
        "map": mean([float(b["map"]) for b in present if b.get("map") is not None]),
        "ndcg": {str(c): mean(values(c)) for c in k},
        "ndcg_stderr": {str(c): stderr(c) for c in k},
        "ndcg_definition": NDCG_DEFINITION,
        "queries": len(present),
    }


def is_borderline(v: VerdictLike, threshold: float, margin: float, grade_threshold: int = 2) -> bool:
    """Whether a judged verdict lies within ``margin`` of flipping (see the module docstring)."""
    if _get(v, "verdict") == "unjudged":
        return False
    probs = _get(v, "probs")
    if isinstance(probs, Mapping) and all(str(g) in probs for g in range(4)):
        yes = max(float(probs[str(g)]) for g in range(grade_threshold, 4)) if grade_threshold <= 3 else 0.0
        no = max((float(probs[str(g)]) for g in range(grade_threshold)), default=0.0)
        return abs(yes - no) <= margin + 1e-12
    p = _get(v, "p_yes")
    if p is None:
        return False
    return abs(float(p) - threshold) <= margin + 1e-12


def borderline_verdicts(
    records: Iterable[Mapping[str, Any]], threshold: float, margin: float, grade_threshold: int = 2
) -> list[dict[str, Any]]:
    """The borderline verdicts of output records (``{"id", "verdicts": [...]}`` dicts, or
    anything with ``id``/``query`` and ``verdicts``): query id, passage index and id,
    verdict and P(yes), in record order."""
    out: list[dict[str, Any]] = []
    for record in records:
        for v in record.get("verdicts") or ():
            if is_borderline(v, threshold, margin, grade_threshold):
                out.append(
                    {
                        "query_id": record.get("id"),
                        "index": _get(v, "index"),
                        "passage_id": _get(v, "passage_id"),
                        "verdict": _get(v, "verdict"),
                        "p_yes": _get(v, "p_yes"),
                    }
                )
    return out
