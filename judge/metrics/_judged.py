"""Registry measures over an LLM judge's verdicts: the label-free conventions as parameters.

Without ground truth the only "qrels" of a query are the judge's own verdicts on the
retrieved passages. :data:`LABEL_FREE` is that evaluation's default conventions, applied to
every measure parsed for it (a parameter written in the measure text overrides them):

* ``unjudged=drop``: a passage the judge could not judge is removed from the ranking (the
  passages after it move up), never counted as irrelevant;
* ``ap_denominator=retrieved``: AP divides by the relevant passages among the judged
  retrieved ones (the only denominator known without ground truth);
* the ideal ranking (NDCG's IDCG, recall's and R-precision's number of relevant passages)
  comes from the *pool*: the judged retrieved passages, plus, when qrels are given, the
  qrels passages that were not retrieved (so the ideal is always at least as good as the
  judged list);
* a binary measure (AP, P@k, RR, ...) without ``rel=`` calls a passage relevant when its
  verdict is ``yes`` (graded mode: ``grade >= grade_threshold``); with ``rel=N`` when its
  grade is ``>= N``. A gain-based measure (NDCG, DCG, RBP ...) uses the grade as gain,
  ``yes`` = 1 / ``no`` = 0 in binary mode; linear gain unless ``gain=exponential``.

A query none of whose passages was judged has no value (``None``): means over queries are
taken over the queries where a measure is defined.

Everything here is arrays in, numbers out; :mod:`judge.judging` turns verdicts into a
:class:`JudgedList`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from judge.metrics._measure import Conventions, Measure
from judge.metrics._measure_parser import parse_measure, parse_measures
from judge.metrics._query import RankedQuery
from judge.metrics._ranking import NOT_IN_POOL
from judge.metrics._registry import registry_version

__all__ = [
    "LABEL_FREE",
    "JudgedList",
    "NamedMeasure",
    "judge_measure",
    "parse_named_measures",
    "split_measure_list",
    "truth_measure",
    "truth_values",
]

LABEL_FREE: Conventions = {"unjudged": "drop", "ap_denominator": "retrieved"}
"""Default conventions of measures computed on judge verdicts (see the module docstring)."""

IntArray = npt.NDArray[np.int64]


def judge_measure(text: str) -> Measure:
    """``text`` parsed with the label-free conventions (:data:`LABEL_FREE`)."""
    return _parse_one(text, True, registry_version())


def truth_measure(text: str) -> Measure:
    """``text`` parsed with trec_eval's conventions (for ground-truth figures)."""
    return _parse_one(text, False, registry_version())


@lru_cache(maxsize=1024)
def _parse_one(text: str, label_free: bool, _version: int) -> Measure:
    """Parsed once per registry state (a registration changes what names mean)."""
    return _numeric(parse_measure(text, defaults=LABEL_FREE if label_free else None), text)


def _numeric(measure: Measure, text: str) -> Measure:
    if measure.is_string or not measure.per_query or measure.aggregate in ("runid", "count", "none"):
        raise ValueError(f"measure {text!r} has no per-query numeric value")
    return measure


@dataclass(frozen=True)
class NamedMeasure:
    """A measure under the name the user gave it (``P@3``), with the measure parsed for the
    judge's verdicts (:attr:`judge`) and for ground truth (:attr:`truth`)."""

    name: str
    judge: Measure
    truth: Measure

    @property
    def judge_conventions(self) -> dict[str, object]:
        """Every parameter of the judge variant (``key``: its full registry name)."""
        params: dict[str, object] = {"key": self.judge.trec_name, **self.judge.params}
        if self.judge.uses_level and self.judge.rel is None:
            params["rel"] = "verdict yes"
        if "idcg" in params or self.judge.uses_level:
            params["pool"] = "judged passages (+ unretrieved qrels passages when qrels are given)"
        return params

    @property
    def truth_conventions(self) -> dict[str, object]:
        """Every parameter of the ground-truth variant (relevance level 1 unless ``rel=``)."""
        params: dict[str, object] = {"key": self.truth.trec_name, **self.truth.params}
        if self.truth.uses_level and self.truth.rel is None:
            params["rel"] = 1
        return params


def split_measure_list(texts: Iterable[str]) -> list[str]:
    """Measure texts from ``-m`` arguments, each of which may be a comma list
    (``P@3,AP(rel=2,gain=exp)``: commas inside parentheses do not split)."""
    out: list[str] = []
    for text in texts:
        depth, start = 0, 0
        for i, ch in enumerate(text):
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth = max(0, depth - 1)
            elif ch == "," and depth == 0:
                out.append(text[start:i])
                start = i + 1
        out.append(text[start:])
    return [t.strip() for t in out if t.strip()]


@lru_cache(maxsize=256)
def _parse_named(texts: tuple[str, ...], _version: int) -> tuple[NamedMeasure, ...]:
    out: dict[str, NamedMeasure] = {}
    for text in split_measure_list(texts):
        judged = parse_measures(text, defaults=LABEL_FREE)
        truth = parse_measures(text)
        if len(judged) == 1:
            pairs = [(text, judged[0], truth[0])]
        else:  # a family with default cutoffs (``P``) or a nickname: one entry per measure
            pairs = [(t.trec_name, j, t) for j, t in zip(judged, truth, strict=True)]
        for name, j, t in pairs:
            out.setdefault(name, NamedMeasure(name, _numeric(j, name), _numeric(t, name)))
    return tuple(out.values())


def parse_named_measures(texts: Sequence[str] | str) -> tuple[NamedMeasure, ...]:
    """Parse user-chosen measures (``["P@3", "ndcg@5,AP(rel=2)"]``) once, keeping the names
    as given; duplicates keep the first. ValueError names a bad measure."""
    if isinstance(texts, str):
        texts = (texts,)
    return _parse_named(tuple(texts), registry_version())


@dataclass(frozen=True)
class JudgedList:
    """One query's verdicts as arrays in rank order, and the pool beyond them.

    ``relevant``: 1 for a ``yes`` verdict, 0 for ``no``, -1 for unjudged; ``gains``: the grade
    (binary mode: the same 1/0), -1 for unjudged. ``pool_relevant`` / ``pool_gains``: the
    same for the qrels passages that were not retrieved (empty without qrels).
    """

    relevant: IntArray
    gains: IntArray
    pool_relevant: IntArray
    pool_gains: IntArray
    _queries: dict[tuple[bool, int, str], RankedQuery] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def of(
        cls,
        relevant: Sequence[int],
        gains: Sequence[int],
        *,
        pool_relevant: Sequence[int] = (),
        pool_gains: Sequence[int] = (),
    ) -> JudgedList:
        rel = np.asarray(relevant, dtype=np.int64).reshape(-1)
        gain = np.asarray(gains, dtype=np.int64).reshape(-1)
        if rel.shape != gain.shape:
            raise ValueError(f"relevant and gains differ in length ({rel.shape[0]} vs {gain.shape[0]})")
        if np.any((rel < 0) != (gain < 0)):
            raise ValueError("a passage is unjudged in relevant but not in gains")
        return cls(
            np.where(rel < 0, NOT_IN_POOL, rel),
            np.where(gain < 0, NOT_IN_POOL, gain),
            np.asarray(pool_relevant, dtype=np.int64).reshape(-1),
            np.asarray(pool_gains, dtype=np.int64).reshape(-1),
        )

    @property
    def judged(self) -> int:
        """Number of judged passages."""
        return int(np.count_nonzero(self.relevant >= 0))

    def value(self, measure: Measure) -> float | None:
        """``measure`` on this query; None when no passage was judged."""
        if self.judged == 0:
            return None
        by_verdict = measure.uses_level and measure.rel is None
        level = 1 if measure.rel is None else measure.rel
        key = (by_verdict, level, measure.unjudged)
        query = self._queries.get(key)
        if query is None:  # shared by every measure with the same arrays and conventions
            grades, pool = (
                (self.relevant, self.pool_relevant) if by_verdict else (self.gains, self.pool_gains)
            )
            judged = grades[grades >= 0]
            qrels = np.concatenate((judged, pool)) if pool.shape[0] else judged
            query = self._queries[key] = measure.query(grades, qrels=qrels, relevance_level=level)
        return measure.compute_on(query)

    def values(self, measures: Iterable[NamedMeasure]) -> dict[str, float | None]:
        """``{name: value}`` of each measure's judge variant."""
        return {m.name: self.value(m.judge) for m in measures}


def truth_values(
    grades: Sequence[int], qrels: Mapping[str, int], measures: Mapping[str, Measure]
) -> dict[str, float]:
    """``{name: value}`` of ``measures`` against ground truth: ``grades`` of the ranked list
    (a passage absent from the ground truth has grade 0), ``qrels`` every judgement of the
    query; relevance level 1 unless a measure has ``rel=``."""
    g = np.asarray(grades, dtype=np.int64)
    q = np.asarray(list(qrels.values()), dtype=np.int64)
    queries: dict[tuple[int, str], RankedQuery] = {}
    out: dict[str, float] = {}
    for name, m in measures.items():
        key = (1 if m.rel is None else m.rel, m.unjudged)
        if key not in queries:
            queries[key] = m.query(g, qrels=q, relevance_level=1)
        out[name] = m.compute_on(queries[key])
    return out
