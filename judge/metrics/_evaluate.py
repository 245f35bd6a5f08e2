"""Evaluate a run query by query and aggregate as trec_eval does; format its output.

Input is any sequence of per-query judged rankings (see :class:`JudgedQuery`; the TREC
readers in :mod:`judge.io` produce them). The per-query work is :meth:`Measure.compute_on`;
this module only loops, aggregates and formats.

trec_eval semantics reproduced here:

* queries are taken in the order given (the TREC join yields qrels order, i.e. qids sorted
  bytewise) and averages are plain left-to-right sums divided by the number of queries;
* a query absent from the run (only passed in with ``-c``) is scored on trec_eval's
  placeholder ranking of one unjudged document, then ``num_ret``, ``utility``, ``unj_*``,
  ``rbp_resid`` and ``relstring`` are reset, exactly as trec_eval does — every other
  measure comes out 0 while ``num_rel`` still counts the query's relevant documents;
* ``gm_map``/``gm_bpref`` are geometric means with a floor of 1e-5;
* counts (``num_ret`` ...) are summed, ``num_q`` counts the queries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from judge.metrics._diversity import SubtopicMatrix
from judge.metrics._measure import Measure
from judge.metrics._query import RankedQuery
from judge.metrics._ranking import NOT_IN_POOL, UnjudgedPolicy

__all__ = [
    "Evaluation",
    "JudgedQuery",
    "Value",
    "evaluate",
    "format_trec_eval",
    "ordered_measures",
]

Value = float | int | str

# Measures trec_eval resets for a query that is missing from the run (-c).
_MISSING_RESET = {"num_ret", "utility", "unj", "rbp_resid"}
_PLACEHOLDER = np.array([NOT_IN_POOL], dtype=np.int64)


class JudgedQuery(Protocol):
    """One query of a run joined with its judgements.

    ``grades``: grades of the retrieved documents in rank order (-1 not judged, -2 judged
    negative), or ``None`` when the query is missing from the run; ``qrels``: every judged
    grade of the query.
    """

    @property
    def qid(self) -> str: ...

    @property
    def grades(self) -> npt.NDArray[np.int64] | None: ...

    @property
    def qrels(self) -> npt.NDArray[np.int64]: ...


@dataclass(frozen=True)
class Evaluation:
    """Per-query and aggregated values, keyed by trec_eval measure names."""

    measures: tuple[Measure, ...]
    qids: tuple[str, ...]
    per_query: dict[str, dict[str, Value]]
    all: dict[str, Value]
    run_id: str
    conventions: dict[str, object]
    scores: dict[str, npt.NDArray[np.float64]] = field(repr=False)

    def query_scores(self, measure: Measure) -> npt.NDArray[np.float64]:
        """Per-query numeric values of ``measure`` in :attr:`qids` order."""
        try:
            return self.scores[measure.trec_name]
        except KeyError:
            raise ValueError(f"{measure.trec_name} has no per-query numeric values here") from None

    def to_json(self, *, per_query: bool) -> dict[str, object]:
        out: dict[str, object] = {"all": dict(self.all)}
        if per_query:
            out["per_query"] = {qid: dict(values) for qid, values in self.per_query.items()}
        out["conventions"] = dict(self.conventions)
        out["measures"] = {m.trec_name: m.params for m in self.measures}
        return out


def ordered_measures(measures: Iterable[Measure]) -> tuple[Measure, ...]:
    """Deduplicate and sort measures into trec_eval's output order."""
    unique: dict[str, Measure] = {}
    for m in measures:
        unique.setdefault(m.trec_name, m)
    return tuple(sorted(unique.values(), key=Measure.sort_key))


def evaluate(
    measures: Sequence[Measure],
    queries: Iterable[JudgedQuery],
    *,
    run_id: str = "",
    relevance_level: int = 1,
    conventions: dict[str, object] | None = None,
) -> Evaluation:
    """Score every query and aggregate. ValueError if there is no query to score."""
    if relevance_level < 0:
        raise ValueError(f"relevance level must be >= 0, got {relevance_level}")
    ordered = ordered_measures(measures)
    if not ordered:
        raise ValueError("no measures requested")
    numeric = [m for m in ordered if m.aggregate not in ("runid", "count") and not m.is_string]
    levels = {m.trec_name: (relevance_level if m.rel is None else m.rel) for m in ordered}

    qids: list[str] = []
    per_query: dict[str, dict[str, Value]] = {}
    columns: dict[str, list[float]] = {m.trec_name: [] for m in numeric}
    for query in queries:
        missing = query.grades is None
        grades = _PLACEHOLDER if query.grades is None else query.grades
        contexts = _Contexts(grades, query.qrels, levels, getattr(query, "subtopics", None))

        values: dict[str, Value] = {}
        for m in ordered:
            if m.aggregate in ("runid", "count"):
                continue
            if m.is_string:
                values[m.trec_name] = "" if missing else m.compute_string_on(contexts.get(m))
                continue
            value = 0.0 if missing and m.name in _MISSING_RESET else m.compute_on(contexts.get(m))
            columns[m.trec_name].append(value)
            values[m.trec_name] = int(value) if m.integer else value
        qids.append(query.qid)
        per_query[query.qid] = values

    n = len(qids)
    if n == 0:
        raise ValueError("no query has both results and relevance judgements")
    all_values: dict[str, Value] = {}
    for m in ordered:
        if m.aggregate == "runid":
            all_values[m.trec_name] = run_id
        elif m.aggregate == "count":
            all_values[m.trec_name] = n
        elif m.aggregate == "sum":
            all_values[m.trec_name] = int(m.combine(columns[m.trec_name]))
        elif m.aggregate in ("mean", "geometric"):
            all_values[m.trec_name] = m.combine(columns[m.trec_name])
    scores = {name: np.asarray(col, dtype=np.float64) for name, col in columns.items()}
    conv: dict[str, object] = {"relevance_level": relevance_level}
    if conventions:
        conv.update(conventions)
    return Evaluation(
        measures=ordered,
        qids=tuple(qids),
        per_query=per_query,
        all=all_values,
        run_id=run_id,
        conventions=conv,
        scores=scores,
    )


class _Contexts:
    """Per-query :class:`RankedQuery` objects, one per (relevance level, unjudged policy)."""

    def __init__(
        self,
        grades: npt.NDArray[np.int64],
        qrels: npt.NDArray[np.int64],
        levels: dict[str, int],
        subtopics: SubtopicMatrix | None = None,
    ) -> None:
        self._subtopics = subtopics  # diversity qrels' per-subtopic judgements, if any
        self._grades = grades
        self._qrels = qrels
        self._levels = levels
        self._cache: dict[tuple[int, UnjudgedPolicy], RankedQuery] = {}

    def get(self, m: Measure) -> RankedQuery:
        key = (self._levels[m.trec_name], m.unjudged)
        ctx = self._cache.get(key)
        if ctx is None:
            ctx = RankedQuery(
                self._grades,
                qrels=self._qrels,
                relevance_level=key[0],
                unjudged=key[1],
                subtopics=self._subtopics,
            )
            self._cache[key] = ctx
        return ctx


def _format_value(value: Value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return f"{value:6.4f}"


def format_trec_eval(evaluation: Evaluation, *, per_query: bool = False) -> str:
    """trec_eval's text output: ``%-22s\\t%s\\t%6.4f`` lines, per query (with ``-q``) then ``all``."""
    lines: list[str] = []
    if per_query:
        for qid in evaluation.qids:
            values = evaluation.per_query[qid]
            for m in evaluation.measures:
                if not m.per_query or m.trec_name not in values:
                    continue
                value = values[m.trec_name]
                text = f"'{value}'" if m.is_string else _format_value(value)
                lines.append(f"{m.trec_name:<22}\t{qid}\t{text}")
    for m in evaluation.measures:
        if m.trec_name in evaluation.all:
            lines.append(f"{m.trec_name:<22}\tall\t{_format_value(evaluation.all[m.trec_name])}")
    return "".join(line + "\n" for line in lines)
