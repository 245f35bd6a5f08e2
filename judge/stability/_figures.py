"""Which figures a stability report has and checks: registry measures on each run's verdicts.

A figure is the mean over queries of a registry measure (:mod:`judge.metrics`) computed on
one run's verdicts with the label-free conventions; ``map``, ``score`` and ``ndcg@K`` are
the historical names of ``AP``, ``set_P`` and ``ndcg_cut_K``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from judge.io import InputError
from judge.judging import JudgeResult, expected_metrics, judged_list
from judge.metrics import Measure, NamedMeasure, judge_measure

__all__ = [
    "EXPECTED_MAP_FIGURE",
    "MAP_FIGURE",
    "SCORE_FIGURE",
    "StabilityMetric",
    "figure_metrics",
    "parse_metric",
]


@dataclass(frozen=True, slots=True)
class StabilityMetric:
    """A run-level figure: the mean over queries of a registry measure computed on each
    run's verdicts with the label-free conventions (:data:`judge.metrics.LABEL_FREE`).

    ``name`` is the figure's key in the report: ``map`` (mean AP), ``score`` (mean share
    of relevant passages), ``ndcg@K``, or any registry measure as the user wrote it
    (``P@3``, ``AP(rel=2)``, ``rbp(p=0.8)``). ``per_query`` computes the measure on one
    :class:`JudgeResult`'s verdicts (None when none was judged).

    ``measure`` is None for ``expected_map``: the probability-weighted mean AP
    (E[AP] under independent Bernoulli(P(yes)) relevance, :mod:`judge.judging._expected_verdicts`),
    which reads each verdict's P(yes) rather than its label, so it does not move with the
    decision threshold; it is no registry measure.
    """

    name: str
    measure: Measure | None

    def per_query(self, result: JudgeResult) -> float | None:
        if self.measure is None:
            block = expected_metrics(result.verdicts, result.mode, ())
            return None if block is None else float(block["map"])
        return judged_list(result.verdicts, result.mode).value(self.measure)

    @property
    def per_query_name(self) -> str:
        """The per-query quantity averaged into this figure (``ap``, ``score``, ``ndcg@K``, ...)."""
        return {"map": "ap", "expected_map": "expected_ap"}.get(self.name, self.name)

    @property
    def conventions(self) -> dict[str, object]:
        """Every parameter the figure's measure is computed with."""
        if self.measure is None:
            return {
                "definition": "E[AP] with each judged passage relevant with probability P(yes), "
                "independently (exact); graded: P(grade >= grade_threshold)",
                "unjudged": "drop",
                "threshold_free": True,
            }
        return NamedMeasure(self.name, self.measure, self.measure).judge_conventions


# The figures every report has, by their historical names.
_LEGACY = {"map": "AP", "score": "set_P"}
_NDCG = re.compile(r"^ndcg@(\d+)$")


def parse_metric(text: str, k: Sequence[int]) -> StabilityMetric:
    """``map`` | ``score`` | ``ndcg@K`` (K must be one of the cutoffs ``k``) | any registry
    measure (``P@3``, ``ndcg_cut_5``, ``AP(rel=2)`` ...), reported under the name given."""
    name = text.strip()
    lowered = name.lower()
    if lowered == "expected_map":
        return EXPECTED_MAP_FIGURE
    if lowered in _LEGACY:
        return StabilityMetric(lowered, judge_measure(_LEGACY[lowered]))
    m = _NDCG.match(lowered)
    if m:
        cutoff = int(m.group(1))
        if cutoff not in k:
            raise InputError(
                f"ndcg@{cutoff} needs {cutoff} among the cutoffs -k {' '.join(map(str, k))}",
                field="--metric",
            )
        return StabilityMetric(f"ndcg@{cutoff}", judge_measure(f"ndcg_cut_{cutoff}"))
    try:
        return StabilityMetric(name, judge_measure(name))
    except ValueError as exc:
        kind = "unknown" if "unknown measure" in str(exc) or not name else "bad"
        raise InputError(
            f"{kind} metric {text!r}: {exc} (use map, expected_map, score, ndcg@K or a registry "
            "measure such as P@3)",
            field="--metric",
        ) from None


EXPECTED_MAP_FIGURE = StabilityMetric("expected_map", None)
MAP_FIGURE = parse_metric("map", ())
SCORE_FIGURE = parse_metric("score", ())


def figure_metrics(
    k: Sequence[int], checked: StabilityMetric | None = None, *, probability: bool = False
) -> list[StabilityMetric]:
    """The figures of a report: map, score, ndcg@k for each cutoff, expected_map when the
    verdicts carry P(yes) (``probability``), and the checked one."""
    figures = [MAP_FIGURE, SCORE_FIGURE] + [parse_metric(f"ndcg@{c}", k) for c in k]
    if probability:
        figures.append(EXPECTED_MAP_FIGURE)
    if checked is not None and checked.name not in {f.name for f in figures}:
        figures.append(checked)
    return figures
