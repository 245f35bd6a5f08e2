"""Prediction-powered figures of a run's records (``--sample-labels``): the summary's ``ppi``.

The records' verdicts are the judge's predictions on every pair; the sample's labels, on
the pairs they name, correct the judge's mean figures (:func:`judge.metrics.ppi_figure`).
A person's grade becomes a verdict by the stated mapping: ``grade >= level`` is ``yes``
(the gain is the same 1/0 in binary mode, the grade in graded mode). A label on a pair the
judge left unjudged is not used (the population is the judged pairs, as for the judge's
own figures) and is counted in ``labels_unjudged``. Drawn pairs the file names as left
unlabelled are missing labels, never labels (:func:`judge.metrics.ppi_figure`'s ``missing``):
every count and the 40-label minimum are the labelled pairs'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judge.store import LabelStore

from judge.io import MIN_INCLUSION, DatasetRecord, InputError, SampleLabels, iter_dataset
from judge.metrics import (
    JudgedList,
    PpiFigure,
    inclusion_probabilities,
    judge_measure,
    label_effects,
    poisson_draw,
    ppi_figure,
)

__all__ = [
    "SAMPLE_DESIGNS",
    "WITHHELD",
    "SampleDraw",
    "SampleItem",
    "SampleLabelOptions",
    "dataset_pairs",
    "draw_sample",
    "ppi_block",
    "record_pairs",
    "sample_frame",
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
    "uniform": (
        "uniform sample without replacement; Student's t interval with the finite-population "
        "correction; none below 40 labels"
    ),
    "weighted": (
        "pairs drawn with recorded inclusion probabilities; Horvitz-Thompson weights and variance; "
        "none below 40 labels"
    ),
}

#: How drawn pairs left unlabelled enter the figures (the summary's ``method.unlabelled``).
UNLABELLED_METHOD = (
    "treated as missing, never as labels: the counts and the 40-label minimum are the labelled pairs'; "
    "the estimate fills each unlabelled pair with the labels of the labelled pairs the judge gave the "
    "same verdict (missing at random); the interval is a conservative bound that holds whatever labels "
    "they have (its ends the least and largest estimate over every labelling of them, widened by the "
    "largest standard error any could give), so more unlabelled pairs never make it narrower"
)


#: Measures whose corrected figure is not shown (``estimate`` null, ``withheld`` says why).
WITHHELD_MEASURES = ("ndcg", "map")
WITHHELD = (
    "not shown: corrected AP and nDCG are worse than the judge's own figure at the sample sizes "
    "measured (TREC DL 2019, a simulated lenient judge: their error was about twice the judge's at "
    "10-15% labelled and still above it at 30%; on the embedded judge's real verdicts their intervals "
    "held only 86.5-90.5%; docs/concepts/prediction-powered.md). Trust the judge's figure (judge)"
)


@dataclass(frozen=True)
class SampleLabelOptions:
    """Sample labels and how they are read: ``grade >= level`` is relevant (``yes``);
    intervals at ``confidence``; ``allow_unlabelled``: with drawn pairs the file names as left
    unlabelled, the intervals are given as the conservative bound over every label they
    could have (:data:`UNLABELLED_METHOD`; else none)."""

    labels: SampleLabels
    level: int = 1
    confidence: float = 0.95
    allow_unlabelled: bool = False

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
    records: Sequence[Mapping[str, Any]],
    options: SampleLabelOptions,
    k: Sequence[int],
    *,
    withhold: bool = True,
) -> dict[str, Any]:
    """The ``ppi`` block of a summary: ``precision``/``ndcg`` by cutoff, ``map``,
    ``mean_score`` (each ``{"estimate", "low", "high", "judge", "labels", "coverage_ok"}``),
    the labels used, the mapping and the method. A label naming a pair not in ``records``
    is an InputError naming its line (callers check before judging).

    Corrected nDCG and AP are withheld (:data:`WITHHELD`: ``estimate`` null, the judge's
    figure kept); ``withhold=False`` computes them anyway, for a measurement of them
    (``scripts/agreement_on_choice.py``), never for a report. Drawn pairs the file names as
    left unlabelled (grade -1) are listed in ``unlabelled_pairs``; they are missing labels
    (:data:`UNLABELLED_METHOD`), and every interval is withheld (``interval_note`` says why)
    unless ``options.allow_unlabelled``."""
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
    labelled = len(pairs)
    named: list[list[str]] = []
    missing: list[tuple[int, int]] = []
    missing_inclusion: list[float] = []
    for label in sample.unlabelled:  # drawn, nobody labelled: a missing label, never a label
        qi, pos = where[(label.qid, label.docno)]
        if lists[qi].relevant[pos] < 0:
            unjudged += 1
            continue
        named.append([label.qid, label.docno])
        missing.append((qi, pos))
        if label.inclusion is not None:
            missing_inclusion.append(label.inclusion)
    population = sum(jl.judged for jl in lists)
    # every label a missing pair could have: each grade up to the highest seen (3 at least)
    top = max([3, options.level, *(lab.grade for lab in sample.labels)])
    yes_of = [int(g >= options.level) for g in range(top + 1)]
    candidates = list(dict.fromkeys((y, g if graded else y) for g, y in enumerate(yes_of)))
    note = None
    if named:
        note = (
            f"{len(named)} drawn pair(s) left unlabelled (unlabelled_pairs) are missing labels: the "
            f"counts are the {labelled} labelled pairs'; "
            + (
                "--allow-unlabelled accepts them, so the intervals are given as a conservative bound that "
                "holds whatever labels they have (method.unlabelled)"
                if options.allow_unlabelled
                else "the estimate assumes they are missing at random, so no interval is given: label them "
                "(then export the sample again), or pass --allow-unlabelled (allow_unlabelled) for the "
                "conservative bound that holds whatever labels they have"
            )
        )

    def figure(text: str) -> dict[str, object]:
        measure = judge_measure(text)
        if withhold and measure.name in ("map", "ndcg_cut"):  # the judge's figure only (WITHHELD)
            judge_value, _ = label_effects(lists, measure, [], [], [])
            return {
                "estimate": None,
                "low": None,
                "high": None,
                "judge": None if judge_value is None else round(judge_value, 6),
                "labels": labelled,
                "coverage_ok": False,
                "withheld": WITHHELD,
            }
        f: PpiFigure = ppi_figure(
            lists,
            judge_measure(text),
            pairs,
            relevant,
            gains,
            population=None if sample.weighted else population,
            inclusion=inclusion if sample.weighted else None,
            confidence=options.confidence,
            missing=missing,
            missing_inclusion=missing_inclusion if sample.weighted else None,
            candidates=candidates,
        )
        out = f.as_dict()
        if named and not options.allow_unlabelled:
            out["low"] = out["high"] = None
        return out

    return {
        "labels": labelled,
        "labels_in_file": len(sample),
        "unlabelled": len(named),
        "unlabelled_pairs": named,
        "allow_unlabelled": options.allow_unlabelled,
        "interval_note": note,
        "labels_unjudged": unjudged,
        "population": population,
        "source": sample.path,
        "confidence": options.confidence,
        "mapping": f"a person's grade >= {options.level} is relevant (yes)"
        + ("; the gain is the grade" if graded else "; gain 1/0"),
        "withheld": {"measures": list(WITHHELD_MEASURES), "why": WITHHELD} if withhold else None,
        "method": {
            "linear": METHOD["linear"],
            "sampling": METHOD["weighted" if sample.weighted else "uniform"],
            "unlabelled": UNLABELLED_METHOD if named else None,
        },
        "precision": {str(c): figure(f"P_{c}") for c in k},
        "ndcg": {str(c): figure(f"ndcg_cut_{c}") for c in k},
        "map": figure("map"),
        "mean_score": figure("set_P"),
    }


@dataclass(frozen=True)
class SampleItem:
    """A judged pair of a draw, with the probability this draw gave it and whether it took
    it (``drawn``)."""

    qid: str
    docno: str
    inclusion: float
    query: str
    verdict: str
    p_yes: float | None
    drawn: bool = True


def sample_queue(
    records: Sequence[Mapping[str, Any]],
    *,
    expected: float,
    design: str = "uniform",
    seed: int = 0,
    number: int = 0,
) -> list[SampleItem]:
    """The pairs :func:`sample_frame` draws (``drawn``)."""
    frame = sample_frame(records, expected=expected, design=design, seed=seed, number=number)
    return [item for item in frame if item.drawn]


@dataclass(frozen=True)
class SampleDraw:
    """One recorded draw of the sample mode: ``frame`` (every pair, ``drawn`` or not), its
    place among the job's draws (``number``, 0 first), and what the store took and added."""

    frame: list[SampleItem]
    number: int
    taken: int
    added: int


def draw_sample(
    store: LabelStore,
    job: str,
    records: Sequence[Mapping[str, Any]],
    *,
    expected: float,
    design: str,
    seed: int,
    collection: str,
) -> SampleDraw:
    """Draw the next sample over ``job``'s records (:func:`sample_frame` at the job's next
    round) and record it in the label store, where each pair's probability becomes its union
    over the job's draws: the one way ``judge labels sample`` and the service draw."""
    number = store.sample_round(job, collection=collection)
    frame = sample_frame(records, expected=expected, design=design, seed=seed, number=number)
    taken, added = store.record_sample_draws(
        job,
        [(i.qid, i.docno, i.inclusion, i.drawn) for i in frame],
        design=design,
        collection=collection,
        number=number,
        expected=expected,
        seed=seed,
    )
    return SampleDraw(frame, number, taken, added)


def sample_frame(
    records: Sequence[Mapping[str, Any]],
    *,
    expected: float,
    design: str = "uniform",
    seed: int = 0,
    number: int = 0,
) -> list[SampleItem]:
    """Every judged pair of the records, each with the probability this draw gives it and
    whether the draw takes it: about ``expected`` pairs, each independently with a known
    inclusion probability (``design``, :data:`SAMPLE_DESIGNS`); labels of the drawn pairs
    enter prediction-powered estimates weighted by 1 / that probability. ``number`` is the
    draw's place among the draws over the same run (0 first): draw ``n > 0`` uses the random
    stream of ``[seed, n, 1]``, independent of the earlier ones even with the same ``seed``,
    so that the union of the draws has the probabilities the store records (1 - prod(1 -
    p_i)). A probability below :data:`judge.io.MIN_INCLUSION` is refused (``--n``)."""
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
    if float(pi.min()) < MIN_INCLUSION:
        raise InputError(
            f"{expected:g} expected of {len(pairs)} pairs gives a pair the probability "
            f"{float(pi.min()):.3g}, "
            f"below {MIN_INCLUSION:g} (1 / p would weigh one label more than a million): draw more",
            field="--n",
        )
    drawn = poisson_draw(pi, seed if number == 0 else [seed, number, 1])
    return [
        SampleItem(
            str(rec["id"]),
            docno,
            float(p),
            str(rec.get("query", "")),
            str(v["verdict"]),
            v.get("p_yes"),
            bool(hit),
        )
        for (rec, docno, v), p, hit in zip(pairs, pi, drawn, strict=True)
    ]
