"""Prediction-powered figures of a run's records (``--sample-labels``): the summary's ``ppi``.

The records' verdicts are the judge's predictions on every pair; the sample's labels, on
the pairs they name, correct the judge's mean figures (:func:`judge.metrics.ppi_figure`).
A person's grade becomes a verdict by the stated mapping: ``grade >= level`` is ``yes``
(the gain is the same 1/0 in binary mode, the grade in graded mode). A label on a pair the
judge left unjudged is not used (the population is the judged pairs, as for the judge's
own figures) and is counted in ``labels_unjudged``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.io import DatasetRecord, InputError, SampleLabels, iter_dataset
from judge.metrics import (
    COVERAGE_GOAL,
    MEASURED_COVERAGE,
    JudgedList,
    PpiFigure,
    inclusion_probabilities,
    judge_measure,
    poisson_draw,
    ppi_figure,
)

__all__ = [
    "SAMPLE_DESIGNS",
    "SampleItem",
    "SampleLabelOptions",
    "dataset_pairs",
    "ppi_block",
    "record_pairs",
    "sample_queue",
]

#: The review queue's sample designs: ``uniform`` (every judged pair alike) or ``uncertainty``
#: (proportional to sqrt(P(yes) (1 - P(yes))), floored at 0.1 so no pair is nearly never drawn;
#: a verdict without P(yes) counts as the most uncertain), as in active statistical inference.
SAMPLE_DESIGNS = ("uniform", "uncertainty")
UNCERTAINTY_FLOOR = 0.1

METHOD = {
    "linear": (
        "prediction-powered rectifier (the judge's mean plus the labels' mean correction scaled "
        "to the population; exact for P@k and mean_score, which are linear in the labels)"
    ),
    "nonlinear": (
        "map and ndcg (binary): the rectifier around a calibrated point (the exact expected AP/nDCG "
        "when each verdict is relevant with the sample's P(relevant | that verdict)); graded ndcg: "
        "the plain linearisation. An interval only where measured coverage reaches "
        f"{COVERAGE_GOAL:.0%} (lowest measured: "
        + ", ".join(f"{k} {v:.0%}" for k, v in sorted(MEASURED_COVERAGE.items()))
        + "): else low/high are null and coverage_ok false"
    ),
    "uniform": (
        "uniform sample without replacement; Student's t interval with the finite-population "
        "correction; none below 40 labels"
    ),
    "weighted": (
        "pairs drawn with recorded inclusion probabilities; Horvitz-Thompson weights and variance; "
        "none below 40 labels"
    ),
}


@dataclass(frozen=True)
class SampleLabelOptions:
    """Sample labels and how they are read: ``grade >= level`` is relevant (``yes``);
    intervals at ``confidence``."""

    labels: SampleLabels
    level: int = 1
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not 0.0 < self.confidence < 1.0:
            raise InputError(f"must be in (0, 1), got {self.confidence}", field="--confidence")
        if self.level < 0:
            raise InputError(f"must be >= 0, got {self.level}", field="--sample-level")


def dataset_pairs(
    path: str | Path, *, field_map: Mapping[str, str], max_passage_chars: int
) -> set[tuple[str, str]]:
    """The (qid, docno) pairs of a dataset's valid lines (what a run over it judges)."""
    return {
        (rec.id, p.docno)
        for rec in iter_dataset(path, field_map=field_map, max_passage_chars=max_passage_chars)
        if isinstance(rec, DatasetRecord)
        for p in rec.passages
    }


def record_pairs(records: Sequence[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """The (qid, docno) pairs of output records (or dataset lines as records)."""
    return {(str(r["id"]), str(d)) for r in records for d in r["docnos"]}


def _lists(
    records: Sequence[Mapping[str, Any]],
) -> tuple[list[JudgedList], dict[tuple[str, str], tuple[int, int]]]:
    lists: list[JudgedList] = []
    where: dict[tuple[str, str], tuple[int, int]] = {}
    for ri, rec in enumerate(records):
        graded = rec.get("mode") == "graded"
        rel: list[int] = []
        gains: list[int] = []
        for v in rec["verdicts"]:
            if v.get("verdict") not in ("yes", "no"):
                rel.append(-1)
                gains.append(-1)
                continue
            yes = 1 if v["verdict"] == "yes" else 0
            rel.append(yes)
            gains.append(int(v["grade"]) if graded and v.get("grade") is not None else yes)
        lists.append(JudgedList.of(rel, gains))
        for pos, docno in enumerate(rec["docnos"]):
            where[(str(rec["id"]), str(docno))] = (ri, pos)
    return lists, where


def ppi_block(
    records: Sequence[Mapping[str, Any]], options: SampleLabelOptions, k: Sequence[int]
) -> dict[str, Any]:
    """The ``ppi`` block of a summary: ``precision``/``ndcg`` by cutoff, ``map``,
    ``mean_score`` (each ``{"estimate", "low", "high", "judge", "labels", "coverage_ok"}``),
    the labels used, the mapping and the method. A label naming a pair not in ``records``
    is an InputError naming its line (callers check before judging)."""
    sample = options.labels
    sample.check_pairs(record_pairs(records))
    lists, where = _lists(records)
    graded = any(r.get("mode") == "graded" for r in records)
    pairs: list[tuple[int, int]] = []
    relevant: list[int] = []
    gains: list[int] = []
    inclusion: list[float] = []
    unjudged = 0
    for label in sample.labels:
        qi, pos = where[(label.qid, label.docno)]
        if lists[qi].relevant[pos] < 0:
            unjudged += 1
            continue
        yes = 1 if label.grade >= options.level else 0
        pairs.append((qi, pos))
        relevant.append(yes)
        gains.append(label.grade if graded else yes)
        if label.inclusion is not None:
            inclusion.append(label.inclusion)
    population = sum(jl.judged for jl in lists)

    def figure(text: str) -> dict[str, object]:
        f: PpiFigure = ppi_figure(
            lists,
            judge_measure(text),
            pairs,
            relevant,
            gains,
            population=None if sample.weighted else population,
            inclusion=inclusion if sample.weighted else None,
            confidence=options.confidence,
        )
        return f.as_dict()

    return {
        "labels": len(pairs),
        "labels_in_file": len(sample),
        "labels_unjudged": unjudged,
        "population": population,
        "source": sample.path,
        "confidence": options.confidence,
        "mapping": f"a person's grade >= {options.level} is relevant (yes)"
        + ("; the gain is the grade" if graded else "; gain 1/0"),
        "method": {
            "linear": METHOD["linear"],
            "nonlinear": METHOD["nonlinear"],
            "sampling": METHOD["weighted" if sample.weighted else "uniform"],
        },
        "precision": {str(c): figure(f"P_{c}") for c in k},
        "ndcg": {str(c): figure(f"ndcg_cut_{c}") for c in k},
        "map": figure("map"),
        "mean_score": figure("set_P"),
    }


@dataclass(frozen=True)
class SampleItem:
    """A pair the sample mode drew, with the probability it was drawn with."""

    qid: str
    docno: str
    inclusion: float
    query: str
    verdict: str
    p_yes: float | None


def sample_queue(
    records: Sequence[Mapping[str, Any]], *, expected: float, design: str = "uniform", seed: int = 0
) -> list[SampleItem]:
    """Draw about ``expected`` of the records' judged pairs for review, each independently
    with a known inclusion probability (``design``, :data:`SAMPLE_DESIGNS`); labels of the
    drawn pairs enter prediction-powered estimates weighted by 1 / that probability."""
    if design not in SAMPLE_DESIGNS:
        raise InputError(f"must be one of {', '.join(SAMPLE_DESIGNS)}, got {design!r}", field="--design")
    if not expected > 0:
        raise InputError(f"must be > 0, got {expected}", field="--n")
    pairs: list[tuple[Mapping[str, Any], str, Mapping[str, Any]]] = [
        (rec, str(docno), v)
        for rec in records
        for docno, v in zip(rec["docnos"], rec["verdicts"], strict=True)
        if v.get("verdict") in ("yes", "no")
    ]
    if not pairs:
        return []
    if design == "uniform":
        weights = [1.0] * len(pairs)
    else:
        weights = []
        for _, _, v in pairs:
            p = v.get("p_yes")
            spread = 0.5 if p is None else (float(p) * (1.0 - float(p))) ** 0.5
            weights.append(max(spread, UNCERTAINTY_FLOOR))
    pi = inclusion_probabilities(weights, expected)
    drawn = poisson_draw(pi, seed)
    return [
        SampleItem(
            str(rec["id"]), docno, float(p), str(rec.get("query", "")), str(v["verdict"]), v.get("p_yes")
        )
        for (rec, docno, v), p, hit in zip(pairs, pi, drawn, strict=True)
        if hit
    ]
