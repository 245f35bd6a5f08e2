"""Which figure a comparison tests: the judge's probability-weighted (expected) pooled
figures, or the thresholded ones ``judge trec`` computes over ``pool.qrels``.

Every pooled pair becomes a distribution over grades (:func:`grade_rows`): a human label a
certainty at its grade, a judge verdict with P(yes) ``[1 - P(yes), P(yes)]`` at the grades
``pool.qrels`` gives no and yes (binary), a graded verdict with all four grade probabilities
those probabilities, any other verdict a certainty at its thresholded grade. The expected
evaluation (:func:`expected_evaluation`) is the thresholded one with each measure that has
an expected form (:func:`judge.metrics.has_expected_form`) recomputed per query by
:func:`judge.metrics.expected_pooled_values` on the same queries; the others keep their
thresholded values. With probabilities 0 and 1 only (human labels, the qrels judge) the two
are equal.

:func:`tested_figure` decides which one the comparisons rank and test: the asked figure
(``--test-figure``, default :data:`DEFAULT_TEST_FIGURE`), except that a pool where no
judge verdict carries a probability is tested on the thresholded figures, and the report
says so (``conventions.tested_figure``, ``tested_figure_reason``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from judge.io import InputError
from judge.judging import PassageVerdict
from judge.metrics import EXPECTED_FORMS, Evaluation, Measure, expected_pooled_values, has_expected_form
from judge.systems._inputs import Inputs, SystemInput
from judge.systems._pool import Pool, PoolVerdicts

__all__ = [
    "DEFAULT_TEST_FIGURE",
    "TEST_FIGURES",
    "GradeRows",
    "TestFigure",
    "TestedFigure",
    "check_test_figure",
    "expected_evaluation",
    "grade_rows",
    "merge_rows",
    "tested_figure",
    "verdict_row",
]

TestFigure = Literal["expected", "thresholded"]
TEST_FIGURES: tuple[TestFigure, ...] = ("expected", "thresholded")
#: The figure comparisons test unless told otherwise: the one place to flip it.
DEFAULT_TEST_FIGURE: TestFigure = "expected"
_WIDTH = 4  # grades 0..3; wider when a human label has a higher grade


def check_test_figure(value: object, field: str = "--test-figure", path: str | None = None) -> TestFigure:
    """``value`` as a :data:`TestFigure`, or :class:`InputError` naming ``field`` (and ``path``)."""
    if value == "expected":
        return "expected"
    if value == "thresholded":
        return "thresholded"
    raise InputError(f"must be one of {', '.join(TEST_FIGURES)}, got {value!r}", path=path, field=field)


@dataclass(frozen=True)
class GradeRows:
    """Each pooled pair's distribution over grades: ``rows[token][docno]``; ``weighted``:
    judge verdicts whose distribution came from a probability (not a certainty)."""

    rows: dict[str, dict[str, npt.NDArray[np.float64]]]
    width: int
    weighted: int
    judged: int


def _one_hot(grade: int, width: int) -> npt.NDArray[np.float64]:
    row = np.zeros(width, dtype=np.float64)
    row[max(grade, 0)] = 1.0
    return row


def verdict_row(v: PassageVerdict, mode: str, width: int) -> npt.NDArray[np.float64] | None:
    """The verdict's distribution over grades (None: no probability, a certainty): binary,
    ``[1 - p, p]`` with ``p`` the probability that decided it (``p_adapted`` when ``--adapt``
    decided it, else P(yes)); graded, its four grade probabilities."""
    if mode == "graded":
        probs = v.probs or {}
        if not all(str(g) in probs for g in range(4)):
            return None
        grades = np.array([max(float(probs[str(g)]), 0.0) for g in range(4)], dtype=np.float64)
        total = float(grades.sum())
        if total <= 0.0 or not np.isfinite(total):
            return None
        row = np.zeros(width, dtype=np.float64)
        row[:4] = grades / total
        return row
    # --adapt applied: the rule that decided the verdict gives its probability (p_adapted)
    p = v.p_adapted if v.p_adapted is not None else v.p_yes
    if p is None or not np.isfinite(p):
        return None
    p_yes = min(max(float(p), 0.0), 1.0)
    row = np.zeros(width, dtype=np.float64)
    row[1] += p_yes  # pool.qrels: yes = 1, no = 0
    row[0] += 1.0 - p_yes
    return row


def grade_rows(
    pool: Pool, verdicts: PoolVerdicts, qrels: Mapping[str, Mapping[str, int]], mode: str
) -> GradeRows:
    """Every pair of ``qrels`` (:func:`~judge.systems._scoring.pool_qrels`) as a distribution
    over grades: human labels at their grade, judge verdicts from their probabilities."""
    grades = [g for docs in qrels.values() for g in docs.values()]
    width = max([_WIDTH - 1, *grades]) + 1
    out: dict[str, dict[str, npt.NDArray[np.float64]]] = {}
    weighted = judged = 0
    for q in pool.queries:
        docs = qrels.get(q.token)
        if not docs:
            continue
        by_doc = verdicts.verdicts.get(q.qid, {})
        rows: dict[str, npt.NDArray[np.float64]] = {}
        for d, grade in docs.items():
            v = None if d in q.human else by_doc.get(d)
            row = None
            if v is not None and v.judged:
                judged += 1
                row = verdict_row(v, mode, width)
                weighted += row is not None
            rows[d] = row if row is not None else _one_hot(grade, width)
        out[q.token] = rows
    return GradeRows(out, width, weighted, judged)


def merge_rows(known: GradeRows | None, new: GradeRows) -> GradeRows:
    """``known`` with ``new``'s pairs added (a later verdict of a pair wins): what TPE trials
    gathered so far."""
    if known is None:
        return new
    width = max(known.width, new.width)

    def pad(row: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.pad(row, (0, width - row.shape[0]))

    rows = {t: {d: pad(r) for d, r in docs.items()} for t, docs in known.rows.items()}
    for t, docs in new.rows.items():
        rows.setdefault(t, {}).update({d: pad(r) for d, r in docs.items()})
    return GradeRows(rows, width, known.weighted + new.weighted, known.judged + new.judged)


def expected_evaluation(
    ev: Evaluation | None,
    system: SystemInput,
    inputs: Inputs,
    rows: GradeRows,
    level: int,
) -> Evaluation | None:
    """``ev`` (the thresholded evaluation of ``system`` over ``pool.qrels``) with every
    measure that has an expected form recomputed per query from ``rows``; same queries,
    same order, same aggregation."""
    if ev is None:
        return None
    numeric = [m for m in ev.measures if m.trec_name in ev.scores]
    weighted = [m for m in numeric if has_expected_form(m)]
    if not weighted:
        return ev
    by_token = {inputs.tokens[qid]: sq for qid, sq in system.queries.items()}
    empty = np.zeros((0, rows.width), dtype=np.float64)
    columns = {m.trec_name: ev.scores[m.trec_name].copy() for m in numeric}
    per_query = {qid: dict(values) for qid, values in ev.per_query.items()}
    for i, token in enumerate(ev.qids):
        pooled = rows.rows.get(token, {})
        sq = by_token.get(token)
        docnos = sq.docnos if sq is not None else []
        ranked = np.array([pooled.get(d, np.zeros(rows.width)) for d in docnos]).reshape(-1, rows.width)
        pool_rows = np.array(list(pooled.values())).reshape(-1, rows.width) if pooled else empty
        values = expected_pooled_values(weighted, ranked, pool_rows, level=level)
        for m, value in zip(weighted, values.tolist(), strict=True):
            columns[m.trec_name][i] = value
            per_query[token][m.trec_name] = value
    all_values = dict(ev.all)
    for m in weighted:
        all_values[m.trec_name] = m.combine(columns[m.trec_name].tolist())
    return Evaluation(
        measures=ev.measures,
        qids=ev.qids,
        per_query=per_query,
        all=all_values,
        run_id=ev.run_id,
        conventions={**ev.conventions, "figure": "expected"},
        scores=columns,
    )


@dataclass(frozen=True)
class TestedFigure:
    """Which figure the comparisons ranked and tested, asked and used, and why."""

    asked: TestFigure
    used: TestFigure
    reason: str
    measures: tuple[str, ...]
    """The measures whose tested figure is probability-weighted (empty: thresholded)."""

    def conventions(self) -> dict[str, object]:
        expected = self.used == "expected"
        return {
            "tested_figure": self.used,
            "test_figure_asked": self.asked,
            "tested_figure_reason": self.reason,
            "expected_measures": list(self.measures),
            "expected_figure": {
                "pairs": "human labels at their grade (probability 1); judge verdicts from P(yes) "
                "(binary: gain and P(relevant) = P(yes)) or the grade probabilities (graded: gain = "
                "expected grade, P(relevant) = P(grade >= level)); a verdict without probabilities "
                "at its thresholded grade; pairs outside the pool not relevant",
                "forms": {k: v for k, v in EXPECTED_FORMS.items()},
                "threshold": "not used: expected figures do not depend on the decision threshold",
            },
            "thresholded_figure": "trec_eval over pool.qrels (each verdict cut at its threshold); "
            + (
                "reported beside the tested figure (systems[*].thresholded)"
                if expected
                else "the tested figure"
            ),
        }


def tested_figure(asked: TestFigure, rows: GradeRows, measures: Sequence[Measure]) -> TestedFigure:
    """The figure to test: ``asked``, but thresholded when no judge verdict carries a
    probability (then the two are equal anyway) or no measure has an expected form."""
    forms = tuple(m.trec_name for m in measures if has_expected_form(m))
    if asked == "thresholded":
        return TestedFigure(asked, "thresholded", "asked (--test-figure thresholded)", ())
    if rows.weighted == 0:
        why = (
            "the judge gave no probabilities (P(yes)): the thresholded figures are tested"
            if rows.judged
            else "no judge verdict in the pool (human labels only): the figures are the thresholded ones"
        )
        return TestedFigure(asked, "thresholded", why, ())
    if not forms:
        return TestedFigure(asked, "thresholded", "no measure asked for has an expected form", ())
    left = [m.trec_name for m in measures if not has_expected_form(m)]
    reason = (
        f"{rows.weighted} of {rows.judged} judged pair(s) carry probabilities; each comparison ranks and "
        "tests the probability-weighted figure"
        + (f" ({', '.join(left)}: no expected form, thresholded)" if left else "")
    )
    return TestedFigure(asked, "expected", reason, forms)
