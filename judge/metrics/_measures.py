"""Measures as values: parsed once from a string, looked up in a registry, computed per query.

Naming follows trec_eval (``map``, ``P_5``, ``ndcg_cut_10``, ``recip_rank`` ...) and also
accepts short forms in the style of ir_measures / ranx: ``AP``, ``AP(rel=2)``, ``nDCG@10``,
``P@5``, ``R@100``, ``MRR``, ``map@100``, ``Success@1``, ``IPrec@0.1`` ... A parsed
:class:`Measure` always prints under its trec_eval key (:attr:`Measure.trec_name`); a
measure computed under a convention trec_eval does not have gets that convention appended,
e.g. ``ndcg_cut_10(gain=exponential)`` or ``map(denominator=retrieved)``.

Per-query semantics are trec_eval's (9.0.x, checked against its test outputs): grades of a
ranked list carry -1 for documents not in the qrels and -2 for documents in the qrels with a
negative judgement; binary measures call a document relevant when ``grade >= level``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from judge.metrics._diversity import DEFAULT_ALPHA, DiversityMeasureName, SubtopicMatrix, diversity_value
from judge.metrics._ranking import (
    NOT_IN_POOL,
    UNJUDGED_IN_POOL,
    Gain,
    UnjudgedPolicy,
    average_precision,
    dcg,
    discounts,
    f1_at_k,
    hit_rate,
    mean_reciprocal_rank_all_hits,
    ndcg,
    precision_at_k,
    r_precision,
    recall_at_k,
    reciprocal_rank,
    sequential_sum,
    success_at_k,
)

__all__ = [
    "MIN_GEO_MEAN",
    "NICKNAMES",
    "Aggregate",
    "ApDenominator",
    "Conventions",
    "IdcgSource",
    "Measure",
    "RankedQuery",
    "available_measures",
    "measure_family",
    "parse_measure",
    "parse_measure_args",
    "parse_measures",
    "register_measure",
    "registry_version",
    "unregister_measure",
]

ApDenominator = Literal["qrels", "retrieved"]
IdcgSource = Literal["qrels", "list"]
Aggregate = Literal["mean", "geometric", "sum", "count", "runid", "none"]
ParamStyle = Literal["none", "cutoff", "point", "values", "pairs"]
Conventions = Mapping[str, str]
"""Default conventions of an evaluation, by :class:`Measure` field: ``unjudged``,
``ap_denominator``, ``gain``, ``idcg`` (see :func:`parse_measure`)."""
_CONVENTION_KEYS = ("unjudged", "ap_denominator", "gain", "idcg")

MIN_GEO_MEAN = 0.00001  # trec_eval's floor for geometric means
_INFAP_EPSILON = 0.00001
_RBP_RESID_P = 0.9


class RankedQuery:
    """One query's ranked list with its judgements, at one relevance level.

    ``grades`` are in rank order (after any ``-M`` cut), negative for unjudged documents;
    ``qrels`` are every judgement of the query (``None`` when there is no ground truth).
    Derived arrays are computed once and shared by all measures of the query.
    """

    def __init__(
        self,
        grades: npt.ArrayLike,
        *,
        qrels: npt.ArrayLike | None = None,
        relevance_level: int = 1,
        unjudged: UnjudgedPolicy = "nonrelevant",
        subtopics: SubtopicMatrix | None = None,
    ) -> None:
        if relevance_level < 0:
            raise ValueError(f"relevance level must be >= 0, got {relevance_level}")
        g = np.asarray(grades, dtype=np.int64)
        if g.ndim != 1:
            raise ValueError(f"grades must be a 1-d array in rank order, got shape {g.shape}")
        if unjudged == "drop":
            g = g[g >= 0]
        elif unjudged != "nonrelevant":
            raise ValueError(f"unknown unjudged policy {unjudged!r}")
        self.grades = g
        self.level = relevance_level
        self.unjudged: UnjudgedPolicy = unjudged
        self._qrels = None if qrels is None else np.asarray(qrels, dtype=np.int64)
        self.subtopics = subtopics  # per-subtopic judgements, for the diversity measures

    @property
    def has_qrels(self) -> bool:
        return self._qrels is not None

    @cached_property
    def rel(self) -> npt.NDArray[np.bool_]:
        return np.asarray(self.grades >= self.level, dtype=np.bool_)

    @cached_property
    def cum_rel(self) -> npt.NDArray[np.int64]:
        return np.cumsum(self.rel, dtype=np.int64)

    @property
    def num_ret(self) -> int:
        return int(self.grades.shape[0])

    @cached_property
    def num_rel_ret(self) -> int:
        return int(self.cum_rel[-1]) if self.num_ret else 0

    def _require_qrels(self, what: str) -> npt.NDArray[np.int64]:
        if self._qrels is None:
            raise ValueError(f"{what} needs ground-truth judgements (qrels); none were given")
        return self._qrels

    @cached_property
    def judged(self) -> npt.NDArray[np.int64]:
        """Non-negative qrels grades of the query (the pool the ideal ranking is built from)."""
        q = self._require_qrels("this measure")
        return q[q >= 0]

    @cached_property
    def rel_levels(self) -> npt.NDArray[np.int64]:
        """Number of judged documents at each grade 0..max (trec_eval's ``rel_levels``)."""
        return np.bincount(self.judged).astype(np.int64) if self.judged.shape[0] else np.zeros(0, np.int64)

    @cached_property
    def num_rel(self) -> int:
        return int(self.rel_levels[self.level :].sum())

    @cached_property
    def num_nonrel_judged(self) -> int:
        return int(self.rel_levels[: self.level].sum())

    def hits_at(self, k: int) -> int:
        if self.num_ret == 0:
            return 0
        return int(self.cum_rel[min(k, self.num_ret) - 1])


@dataclass(frozen=True)
class _Family:
    name: str
    aggregate: Aggregate
    params: ParamStyle
    compute: Callable[[Measure, RankedQuery], float] | None
    per_query: bool = True
    integer: bool = False
    cutoff_required: bool = False
    default_cutoffs: tuple[int, ...] = ()
    default_points: tuple[float, ...] = ()
    default_values: tuple[float, ...] = ()
    binary: bool = True  # uses the relevance level
    graded: bool = False  # accepts gain= / idcg=
    ap: bool = False  # accepts denominator=
    trec: bool = True
    string: bool = False
    diversity: bool = False  # needs subtopic qrels


@dataclass(frozen=True)
class Measure:
    """A measure value: family name plus every parameter and convention, explicitly.

    ``name`` is the trec_eval root name (``P``, ``ndcg_cut``, ``map`` ...). ``rel=None``
    means "use the evaluation's relevance level" (trec_eval ``-l``, default 1).
    """

    name: str
    cutoff: int | None = None
    point: float | None = None
    values: tuple[float, ...] = ()
    gains: tuple[tuple[int, float], ...] = ()
    param_text: str | None = None
    rel: int | None = None
    gain: Gain = "linear"
    ap_denominator: ApDenominator = "qrels"
    idcg: IdcgSource = "qrels"
    unjudged: UnjudgedPolicy = "nonrelevant"
    alpha: float | None = None  # diversity measures' redundancy intolerance; None = 0.5
    _family: _Family = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        family = _REGISTRY.get(self.name)
        if family is None:
            raise ValueError(f"unknown measure {self.name!r}")
        object.__setattr__(self, "_family", family)
        if family.params == "cutoff":
            if self.cutoff is None and family.cutoff_required:
                raise ValueError(f"measure {self.name!r} needs a cutoff")
            if self.cutoff is not None and self.cutoff < 1:
                raise ValueError(f"cutoff must be a positive integer, got {self.cutoff}")
        elif self.cutoff is not None:
            raise ValueError(f"measure {self.name!r} takes no cutoff")
        if family.params == "point" and self.point is None:
            raise ValueError(f"measure {self.name!r} needs a point, e.g. {self.name}_0.10")
        if self.rel is not None and (not family.binary or self.rel < 0):
            raise ValueError(f"measure {self.name!r} does not take rel={self.rel}")
        if (self.gain != "linear" or self.idcg != "qrels") and not family.graded:
            raise ValueError(f"measure {self.name!r} takes no gain/idcg convention")
        if self.gain not in ("linear", "exponential"):
            raise ValueError(f"unknown gain {self.gain!r}")
        if self.idcg not in ("qrels", "list"):
            raise ValueError(f"unknown idcg source {self.idcg!r}")
        if self.ap_denominator != "qrels" and not family.ap:
            raise ValueError(f"measure {self.name!r} takes no AP denominator")
        if self.ap_denominator not in ("qrels", "retrieved"):
            raise ValueError(f"unknown AP denominator {self.ap_denominator!r}")
        if self.unjudged not in ("nonrelevant", "drop"):
            raise ValueError(f"unknown unjudged policy {self.unjudged!r}")
        if self.gains and self.gain != "linear":
            raise ValueError("explicit per-grade gains cannot be combined with gain=exponential")
        if self.alpha is not None:
            if self.name not in _ALPHA_FAMILIES:
                raise ValueError(f"measure {self.name!r} takes no alpha")
            if not 0.0 <= self.alpha <= 1.0:
                raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
            if self.alpha == DEFAULT_ALPHA:  # one key for the default, however it was written
                object.__setattr__(self, "alpha", None)

    # ------------------------------------------------------------------ description
    @property
    def aggregate(self) -> Aggregate:
        """How per-query values become the ``all`` value (mean, geometric, sum, ...)."""
        return self._family.aggregate

    @property
    def per_query(self) -> bool:
        """Whether trec_eval prints this measure for individual queries."""
        return self._family.per_query

    @property
    def integer(self) -> bool:
        """Whether the value is a count printed as an integer."""
        return self._family.integer

    @property
    def uses_level(self) -> bool:
        """Whether the measure is binary: it calls a document relevant when its grade is at
        least the relevance level (``rel=``, else the evaluation's level)."""
        return self._family.binary

    @property
    def is_string(self) -> bool:
        """``relstring``: a per-query string, not a number."""
        return self._family.string

    @property
    def is_trec(self) -> bool:
        """Whether trec_eval computes this exact measure (same name, same conventions)."""
        return self._family.trec and self._conventions_text() == ""

    @property
    def is_diversity(self) -> bool:
        """Whether this is an intent-aware measure computed on diversity (subtopic) qrels."""
        return self._family.diversity

    @property
    def table_index(self) -> int:
        """Position in trec_eval's measure table (its output order)."""
        return _ORDER[self.name]

    def sort_key(self) -> tuple[int, float, str]:
        number = self.cutoff if self.cutoff is not None else (self.point if self.point is not None else 0.0)
        return (self.table_index, float(number), self.trec_name)

    @property
    def params(self) -> dict[str, object]:
        """Every parameter and convention, for echoing in outputs."""
        out: dict[str, object] = {"measure": self.name}
        if self.cutoff is not None:
            out["cutoff"] = self.cutoff
        if self.point is not None:
            out["point"] = self.point
        if self.values:
            out["values"] = list(self.values)
        if self.gains:
            out["gains"] = {str(level): g for level, g in self.gains}
        if self._family.binary:
            out["rel"] = "evaluation level" if self.rel is None else self.rel
        if self._family.graded:
            out["gain"] = self.gain
            out["idcg"] = self.idcg
        if self._family.ap:
            out["ap_denominator"] = self.ap_denominator
        if self.name in _ALPHA_FAMILIES:
            out["alpha"] = DEFAULT_ALPHA if self.alpha is None else self.alpha
        out["unjudged"] = self.unjudged
        return out

    def _conventions_text(self) -> str:
        parts: list[str] = []
        if self.rel is not None:
            parts.append(f"rel={self.rel}")
        if self.gain != "linear":
            parts.append(f"gain={self.gain}")
        if self.ap_denominator != "qrels":
            parts.append(f"denominator={self.ap_denominator}")
        if self.idcg != "qrels":
            parts.append(f"idcg={self.idcg}")
        if self.unjudged != "nonrelevant":
            parts.append(f"unjudged={self.unjudged}")
        if self.alpha is not None:
            parts.append(f"alpha={self.alpha:g}")
        return f"({','.join(parts)})" if parts else ""

    @property
    def trec_name(self) -> str:
        """The trec_eval-style key this measure is reported under."""
        family = self._family
        if family.params == "cutoff" and self.cutoff is not None:
            base = f"{self.name}_{self.cutoff}"
        elif family.params == "point" and self.point is not None:
            base = f"{self.name}_{self.point:3.2f}"
        elif self.param_text:
            base = f"{self.name}_{self.param_text}"
        else:
            base = self.name
        return base + self._conventions_text()

    def __str__(self) -> str:
        return self.trec_name

    # ------------------------------------------------------------------ computation
    def query(
        self,
        grades: npt.ArrayLike,
        *,
        qrels: npt.ArrayLike | None = None,
        relevance_level: int = 1,
        subtopics: SubtopicMatrix | None = None,
    ) -> RankedQuery:
        """The per-query context this measure is computed on."""
        level = relevance_level if self.rel is None else self.rel
        return RankedQuery(
            grades, qrels=qrels, relevance_level=level, unjudged=self.unjudged, subtopics=subtopics
        )

    def compute_on(self, query: RankedQuery) -> float:
        """Value for one query from a prepared :class:`RankedQuery` (level/unjudged must match)."""
        family = self._family
        if family.compute is None:
            raise ValueError(f"{self.trec_name} has no per-query numeric value")
        return family.compute(self, query)

    def compute(
        self,
        grades: npt.ArrayLike,
        *,
        qrels: npt.ArrayLike | None = None,
        relevance_level: int = 1,
        subtopics: SubtopicMatrix | None = None,
    ) -> float:
        """Value for one query.

        ``grades``: grades of the ranked list in rank order (negative = unjudged);
        ``qrels``: all judged grades of the query, or ``None`` without ground truth;
        ``relevance_level``: the binary threshold when the measure has no ``rel=``;
        ``subtopics``: per-subtopic judgements (diversity measures only).
        """
        return self.compute_on(
            self.query(grades, qrels=qrels, relevance_level=relevance_level, subtopics=subtopics)
        )

    def combine(self, values: Sequence[float]) -> float:
        """The value over queries from per-query values, as trec_eval aggregates this
        measure: left-to-right mean, sum, or geometric mean with a floor of
        :data:`MIN_GEO_MEAN`. ValueError without values, or for a measure that has no
        per-query numeric value (``runid``, ``num_q``, ``relstring``)."""
        if not values:
            raise ValueError(f"{self.trec_name}: no per-query values to aggregate")
        arr = np.asarray(values, dtype=np.float64)
        if self.aggregate == "mean":
            return sequential_sum(arr) / int(arr.shape[0])
        if self.aggregate == "sum":
            return sequential_sum(arr)
        if self.aggregate == "geometric":
            logs = np.asarray([math.log(max(float(v), MIN_GEO_MEAN)) for v in arr], dtype=np.float64)
            return math.exp(sequential_sum(logs) / int(arr.shape[0]))
        raise ValueError(f"{self.trec_name} has no per-query numeric value to aggregate")

    def compute_string(
        self, grades: npt.ArrayLike, *, qrels: npt.ArrayLike | None = None, relevance_level: int = 1
    ) -> str:
        """Value of a string measure (``relstring``) for one query."""
        return self.compute_string_on(self.query(grades, qrels=qrels, relevance_level=relevance_level))

    def compute_string_on(self, query: RankedQuery) -> str:
        """String value (``relstring``) from a prepared :class:`RankedQuery`."""
        if not self.is_string:
            raise ValueError(f"{self.trec_name} is numeric; use compute()")
        return _relstring(self, query)


# ---------------------------------------------------------------------- family functions
def _ap_denominator(m: Measure, q: RankedQuery) -> int | None:
    return None if m.ap_denominator == "retrieved" else q.num_rel


def _map(m: Measure, q: RankedQuery) -> float:
    return average_precision(q.rel, n_relevant=_ap_denominator(m, q))


def _map_cut(m: Measure, q: RankedQuery) -> float:
    return average_precision(q.rel, n_relevant=_ap_denominator(m, q), k=m.cutoff)


def _bpref_terms(q: RankedQuery) -> tuple[npt.NDArray[np.float64], int]:
    g = q.grades
    nonrel = (g >= 0) & (g < q.level)
    nonrel_before = np.cumsum(nonrel, dtype=np.int64)[q.rel]
    r = q.num_rel
    terms = np.ones(nonrel_before.shape[0], dtype=np.float64)
    seen = nonrel_before > 0
    if np.any(seen):
        denom = float(min(q.num_nonrel_judged, r))
        terms[seen] = 1.0 - np.minimum(nonrel_before[seen], r).astype(np.float64) / denom
    return terms, r


def _bpref(m: Measure, q: RankedQuery) -> float:
    terms, r = _bpref_terms(q)
    total = sequential_sum(terms)
    return total / float(r) if r else total


def _iprec_values(q: RankedQuery, points: tuple[float, ...]) -> list[float]:
    """Interpolated precision at recall points, exactly as trec_eval (lround of p*R)."""
    num_rel, n_rel_ret, n_ret = q.num_rel, q.num_rel_ret, q.num_ret
    if n_ret == 0 or n_rel_ret == 0:
        return [0.0 for _ in points]
    ranks = np.arange(1, n_ret + 1, dtype=np.float64)
    precision = q.cum_rel.astype(np.float64) / ranks
    best_after = np.maximum.accumulate(precision[::-1])[::-1]
    rel_positions = np.flatnonzero(q.rel)
    out: list[float] = []
    for p in points:
        cut = math.floor(p * num_rel + 0.5)  # lround for non-negative values
        if cut > n_rel_ret:
            out.append(0.0)
        else:
            out.append(float(best_after[rel_positions[max(cut, 1) - 1]]))
    return out


def _iprec(m: Measure, q: RankedQuery) -> float:
    point = m.point if m.point is not None else 0.0
    return _iprec_values(q, (point,))[0]


def _11pt(m: Measure, q: RankedQuery) -> float:
    points = m.values or _ELEVEN_POINTS
    values = _iprec_values(q, points)
    total = 0.0
    for v in reversed(values):  # trec_eval adds from the highest recall point down
        total += v
    return total / float(len(points))


def _precision(m: Measure, q: RankedQuery) -> float:
    return precision_at_k(q.rel, m.cutoff or 1)


def _recall(m: Measure, q: RankedQuery) -> float:
    return recall_at_k(q.rel, q.num_rel, m.cutoff)


def _rprec(m: Measure, q: RankedQuery) -> float:
    return r_precision(q.rel, q.num_rel)


def _recip_rank(m: Measure, q: RankedQuery) -> float:
    return reciprocal_rank(q.rel, k=m.cutoff)


def _infap(m: Measure, q: RankedQuery) -> float:
    g = q.grades
    unjudged = g == UNJUDGED_IN_POOL  # documents not in the pool at all are simply skipped
    nonrel = (g >= 0) & (g < q.level)
    rel_idx = np.flatnonzero(q.rel)
    if rel_idx.shape[0] == 0:
        return 0.0
    rel_so_far = np.arange(1, rel_idx.shape[0] + 1, dtype=np.int64)
    nonrel_so_far = np.cumsum(nonrel, dtype=np.int64)[rel_idx]
    unj_so_far = np.cumsum(unjudged, dtype=np.int64)[rel_idx]
    fj = rel_idx.astype(np.float64)
    seen = (rel_so_far - 1 + nonrel_so_far + unj_so_far).astype(np.float64)
    prior = rel_so_far - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = 1.0 / (fj + 1.0) + (fj / (fj + 1.0)) * (seen / fj) * (
            (prior.astype(np.float64) + _INFAP_EPSILON)
            / ((prior + nonrel_so_far).astype(np.float64) + 2 * _INFAP_EPSILON)
        )
    terms = np.where(rel_idx == 0, 1.0, terms)
    total = sequential_sum(terms)
    return total / float(q.num_rel) if q.num_rel else total


def _rprec_mult(m: Measure, q: RankedQuery) -> float:
    point = m.point if m.point is not None else 1.0
    cut = int(point * q.num_rel + 0.9)
    if cut <= 0:
        return 0.0
    if cut > q.num_ret:
        return float(q.num_rel_ret) / float(cut)
    return float(q.hits_at(cut)) / float(cut)


def _utility(m: Measure, q: RankedQuery) -> float:
    a, b, c, d = m.values or (1.0, -1.0, 0.0, 0.0)
    rr, ret, rel = q.num_rel_ret, q.num_ret, q.num_rel
    return a * rr + b * (ret - rr) + c * (rel - rr) + d * (0 + rr - ret - rel)


def _bin_g(m: Measure, q: RankedQuery) -> float:
    rel_idx = np.flatnonzero(q.rel)
    if rel_idx.shape[0] == 0:
        return 0.0
    rel_so_far = np.arange(1, rel_idx.shape[0] + 1)
    # 1 / log2(3 + i - rel_so_far); discounts()[x] == log2(x + 2)
    terms = 1.0 / discounts(q.num_ret + 2)[1 + rel_idx - rel_so_far]
    return sequential_sum(terms) / float(q.num_rel)


def _gain_levels(m: Measure, q: RankedQuery) -> list[tuple[int, float, int]]:
    """trec_eval's ``setup_gains``: (level, gain, count) sorted by gain ascending."""
    counts = q.rel_levels
    explicit = dict(m.gains)
    levels: dict[int, tuple[float, int]] = {level: (g, 0) for level, g in m.gains}
    for level in range(counts.shape[0]):
        if level in explicit:
            levels[level] = (explicit[level], int(counts[level]))
        else:
            default = float(level) if m.gain == "linear" else float(2**level - 1)
            levels[level] = (default, int(counts[level]))
    ordered = sorted(((lv, g, c) for lv, (g, c) in levels.items()), key=lambda t: t[1])
    return ordered


def _result_gains(levels: list[tuple[int, float, int]], grades: npt.NDArray[np.int64]) -> list[float]:
    lookup = {level: g for level, g, _ in levels}
    return [lookup.get(int(x), 0.0) for x in grades]


def _ideal_positive(levels: list[tuple[int, float, int]]) -> npt.NDArray[np.float64]:
    gains: list[float] = []
    for _, g, c in reversed(levels):
        if g <= 0.0:
            break
        gains.extend([g] * c)
    return np.asarray(gains, dtype=np.float64)


def _graded_ndcg(m: Measure, q: RankedQuery) -> tuple[float, float]:
    """(DCG, IDCG) of trec_eval's ``ndcg`` (full list, per-grade gains)."""
    if m.idcg == "list":
        g = q.grades
        own = RankedQuery(g[g >= 0], qrels=g[g >= 0], relevance_level=q.level)
        levels = _gain_levels(m, own)
    else:
        levels = _gain_levels(m, q)
    results = np.asarray(_result_gains(levels, q.grades), dtype=np.float64)
    ideal = _ideal_positive(levels)
    return (
        sequential_sum(results / discounts(results.shape[0])),
        sequential_sum(ideal / discounts(ideal.shape[0])),
    )


def _ndcg(m: Measure, q: RankedQuery) -> float:
    results_dcg, ideal_dcg = _graded_ndcg(m, q)
    return results_dcg / ideal_dcg if ideal_dcg > 0.0 else 0.0


def _dcg(m: Measure, q: RankedQuery) -> float:
    return _graded_ndcg(m, q)[0]


def _ideal_dcg(m: Measure, q: RankedQuery) -> float:
    return _graded_ndcg(m, q)[1]


def _ndcg_cut(m: Measure, q: RankedQuery) -> float:
    ideal = q.grades[q.grades >= 0] if m.idcg == "list" else q.judged
    return ndcg(q.grades, ideal=ideal, k=m.cutoff, gain=m.gain)


def _dcg_cut(m: Measure, q: RankedQuery) -> float:
    return dcg(q.grades, k=m.cutoff, gain=m.gain)


def _ndcg_rel(m: Measure, q: RankedQuery) -> float:
    levels = _gain_levels(m, q)
    results = np.asarray(_result_gains(levels, q.grades), dtype=np.float64)
    ideal = _ideal_positive(levels)
    length = max(results.shape[0], ideal.shape[0])
    disc = discounts(length)
    cum_results = np.cumsum(results / disc[: results.shape[0]]) if results.shape[0] else np.zeros(0)
    ideal_padded = np.zeros(length)
    ideal_padded[: ideal.shape[0]] = ideal
    cum_ideal = np.cumsum(ideal_padded / disc)
    num_rel = ideal.shape[0]
    positive = np.flatnonzero(results > 0)
    total = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in positive:
            total += float(cum_results[i] / cum_ideal[i])
        final_results = float(cum_results[-1]) if cum_results.shape[0] else 0.0
        final_ideal = float(cum_ideal[-1]) if cum_ideal.shape[0] else 0.0
        total += float(np.float64(num_rel - positive.shape[0]) * final_results / np.float64(final_ideal))
    if total > 0.0:
        return float(total / num_rel)
    return 0.0


def _rndcg(m: Measure, q: RankedQuery) -> float:
    """trec_eval's experimental ``Rndcg`` (nDCG averaged at the R-level boundaries)."""
    if q.num_rel == 0:
        return 0.0
    levels = _gain_levels(m, q)
    lookup = {level: g for level, g, _ in levels}
    grades = q.grades
    n_ret = grades.shape[0]
    results_dcg = ideal_dcg = total = 0.0
    cur = len(levels) - 1
    ideal_gain = levels[cur][1] if cur >= 0 else 0.0
    old_ideal = ideal_gain
    changes = 0
    at_level = 0
    i = 0

    def step_ideal() -> None:
        nonlocal at_level, cur, ideal_gain
        at_level += 1
        while cur >= 0 and at_level > levels[cur][2]:
            at_level = 1
            cur -= 1
            ideal_gain = levels[cur][1] if cur >= 0 else 0.0

    while i < n_ret and ideal_gain > 0.0:
        results_gain = lookup.get(int(grades[i]), 0.0)
        step_ideal()
        if old_ideal != ideal_gain:
            if ideal_dcg > 0.0:
                total += results_dcg / ideal_dcg
                changes += 1
            old_ideal = ideal_gain
        if results_gain != 0:
            results_dcg += results_gain / math.log2(i + 2)
        if ideal_gain > 0.0:
            ideal_dcg += ideal_gain / math.log2(i + 2)
        i += 1
    if i < n_ret:
        while i < n_ret:
            results_gain = lookup.get(int(grades[i]), 0.0)
            if results_gain != 0:
                results_dcg += results_gain / math.log2(i + 2)
            i += 1
        if ideal_dcg > 0.0:
            total += results_dcg / ideal_dcg
            changes += 1
    while ideal_gain > 0.0:
        step_ideal()
        if old_ideal != ideal_gain:
            if ideal_dcg > 0.0:
                total += results_dcg / ideal_dcg
                changes += 1
            old_ideal = ideal_gain
        if ideal_gain > 0.0:
            ideal_dcg += ideal_gain / math.log2(i + 2)
        i += 1
    return total / changes if changes else 0.0


def _g_measure(m: Measure, q: RankedQuery) -> float:
    """trec_eval's experimental ``G`` (gain discounted by the ideal-minus-actual gain so far)."""
    levels = _gain_levels(m, q)
    results = _result_gains(levels, q.grades)
    ideal = _ideal_positive(levels)
    sum_results = sum_cost = results_g = 0.0
    for i, results_gain in enumerate(results):
        sum_results += results_gain
        ideal_gain = float(ideal[i]) if i < ideal.shape[0] else 0.0
        sum_cost += ideal_gain if ideal_gain >= 1.0 else 1.0
        if results_gain != 0:
            results_g += results_gain / math.log2(2 + sum_cost - sum_results)
    sum_ideal = sequential_sum(ideal)
    return results_g / sum_ideal if sum_ideal > 0.0 else 0.0


def _relative_p(m: Measure, q: RankedQuery) -> float:
    k = m.cutoff or 1
    denom = min(k, q.num_rel)
    return float(q.hits_at(k)) / float(denom) if denom > 0 else 0.0


def _success(m: Measure, q: RankedQuery) -> float:
    return success_at_k(q.rel, m.cutoff or 1)


def _set_p(m: Measure, q: RankedQuery) -> float:
    return float(q.num_rel_ret) / float(q.num_ret) if q.num_ret else 0.0


def _set_relative_p(m: Measure, q: RankedQuery) -> float:
    denom = min(q.num_ret, q.num_rel)
    return float(q.num_rel_ret) / float(denom) if denom > 0 else 0.0


def _set_recall(m: Measure, q: RankedQuery) -> float:
    return float(q.num_rel_ret) / float(q.num_rel) if q.num_rel else 0.0


def _set_map(m: Measure, q: RankedQuery) -> float:
    if q.num_ret == 0 or q.num_rel == 0:
        return 0.0
    return (float(q.num_rel_ret) / float(q.num_ret)) * (float(q.num_rel_ret) / float(q.num_rel))


def _set_f(m: Measure, q: RankedQuery) -> float:
    if q.num_ret == 0 or q.num_rel == 0 or q.num_rel_ret == 0:
        return 0.0
    beta = m.values[0] if m.values else 1.0
    p = float(q.num_rel_ret) / float(q.num_ret)
    r = float(q.num_rel_ret) / float(q.num_rel)
    return (beta + 1.0) * p * r / (beta * p + r)


def _num_nonrel_judged_ret(m: Measure, q: RankedQuery) -> float:
    g = q.grades
    return float(np.count_nonzero((g >= 0) & (g < q.level)))


def _rbp(m: Measure, q: RankedQuery) -> float:
    p = m.values[0] if m.values else 0.9
    levels = _gain_levels(m, q)
    gains = [g for _, g, _ in levels]
    if gains:
        low, high = min(gains), max(gains)
        if low < 0 or high > 1:
            levels = [(lv, (g - low) / (high - low), c) for lv, g, c in levels]
    results = np.asarray(_result_gains(levels, q.grades), dtype=np.float64)
    weights = np.cumprod(np.concatenate(([1.0], np.full(max(results.shape[0] - 1, 0), p))))
    return (1.0 - p) * sequential_sum(results * weights[: results.shape[0]])


def _rbp_resid(m: Measure, q: RankedQuery) -> float:
    p = _RBP_RESID_P
    n = q.num_ret
    weights = np.cumprod(np.concatenate(([1.0], np.full(n, p))))
    unjudged = q.grades < 0
    if not np.any(unjudged):
        return 0.0
    return float(weights[n]) + (1 - p) * sequential_sum(np.asarray(weights[:n][unjudged], dtype=np.float64))


def _unj(m: Measure, q: RankedQuery) -> float:
    k = m.cutoff or 1
    return float(np.count_nonzero(q.grades[:k] < 0)) / float(k)


def _relstring(m: Measure, q: RankedQuery) -> str:
    length = int(m.values[0]) if m.values else 10
    chars: list[str] = []
    for x in q.grades[: max(length, 0)]:
        rel = int(x)
        if rel > 9:
            chars.append(">")
        elif rel >= 0:
            chars.append(str(rel))
        elif rel == NOT_IN_POOL:
            chars.append("-")
        elif rel == UNJUDGED_IN_POOL:
            chars.append(".")
        else:
            chars.append("<")
    return "".join(chars)


def _count(attr: str) -> Callable[[Measure, RankedQuery], float]:
    def compute(m: Measure, q: RankedQuery) -> float:
        return float(getattr(q, attr))

    return compute


def _f1(m: Measure, q: RankedQuery) -> float:
    return f1_at_k(q.rel, q.num_rel, m.cutoff or 1)


def _hit_rate(m: Measure, q: RankedQuery) -> float:
    return hit_rate(q.rel, q.num_rel, m.cutoff)


def _mrr_all_hits(m: Measure, q: RankedQuery) -> float:
    return mean_reciprocal_rank_all_hits(q.rel, m.cutoff)


def _diversity(name: DiversityMeasureName) -> Callable[[Measure, RankedQuery], float]:
    def compute(m: Measure, q: RankedQuery) -> float:
        if q.subtopics is None:
            raise ValueError(f"{m.trec_name} needs diversity qrels (qid subtopic docno grade)")
        alpha = DEFAULT_ALPHA if m.alpha is None else m.alpha
        return diversity_value(
            name,
            q.subtopics,
            cutoff=m.cutoff or 1,
            level=q.level,
            alpha=alpha,
            drop_unjudged=q.unjudged == "drop",
            cache_key=q,
        )

    return compute


_STD_CUTOFFS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
_NDEVAL_CUTOFFS = (5, 10, 20)
_ALPHA_FAMILIES = frozenset({"alpha_nDCG", "alpha_DCG", "ERR_IA", "nERR_IA"})  # use ndeval's alpha
_ELEVEN_POINTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

_FAMILIES: tuple[_Family, ...] = (
    _Family("runid", "runid", "none", None, per_query=False, binary=False),
    _Family("num_q", "count", "none", None, per_query=False, integer=True, binary=False),
    _Family("num_ret", "sum", "none", _count("num_ret"), integer=True, binary=False),
    _Family("num_rel", "sum", "none", _count("num_rel"), integer=True),
    _Family("num_rel_ret", "sum", "none", _count("num_rel_ret"), integer=True),
    _Family("map", "mean", "none", _map, ap=True),
    _Family("gm_map", "geometric", "none", _map, per_query=False, ap=True),
    _Family("Rprec", "mean", "none", _rprec),
    _Family("bpref", "mean", "none", _bpref),
    _Family("recip_rank", "mean", "none", _recip_rank),
    _Family("iprec_at_recall", "mean", "point", _iprec, default_points=_ELEVEN_POINTS),
    _Family("P", "mean", "cutoff", _precision, cutoff_required=True, default_cutoffs=_STD_CUTOFFS),
    _Family("relstring", "none", "values", None, binary=False, string=True, default_values=(10.0,)),
    _Family("recall", "mean", "cutoff", _recall, cutoff_required=True, default_cutoffs=_STD_CUTOFFS),
    _Family("infAP", "mean", "none", _infap),
    _Family("gm_bpref", "geometric", "none", _bpref, per_query=False),
    _Family(
        "Rprec_mult",
        "mean",
        "point",
        _rprec_mult,
        default_points=(0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0),
    ),
    _Family("utility", "mean", "values", _utility, default_values=(1.0, -1.0, 0.0, 0.0)),
    _Family("11pt_avg", "mean", "values", _11pt, default_values=_ELEVEN_POINTS),
    _Family("binG", "mean", "none", _bin_g),
    _Family("G", "mean", "pairs", _g_measure, binary=False),
    _Family("dcg", "mean", "pairs", _dcg, binary=False, graded=True),
    _Family("ideal_dcg", "mean", "pairs", _ideal_dcg, binary=False, graded=True),
    _Family("ndcg", "mean", "pairs", _ndcg, binary=False, graded=True),
    _Family("ndcg_rel", "mean", "pairs", _ndcg_rel, binary=False),
    _Family("Rndcg", "mean", "pairs", _rndcg, binary=False),
    _Family(
        "ndcg_cut",
        "mean",
        "cutoff",
        _ndcg_cut,
        cutoff_required=True,
        default_cutoffs=_STD_CUTOFFS,
        binary=False,
        graded=True,
    ),
    _Family(
        "map_cut", "mean", "cutoff", _map_cut, cutoff_required=True, default_cutoffs=_STD_CUTOFFS, ap=True
    ),
    _Family("relative_P", "mean", "cutoff", _relative_p, cutoff_required=True, default_cutoffs=_STD_CUTOFFS),
    _Family("success", "mean", "cutoff", _success, cutoff_required=True, default_cutoffs=(1, 5, 10)),
    _Family("set_P", "mean", "none", _set_p),
    _Family("set_relative_P", "mean", "none", _set_relative_p),
    _Family("set_recall", "mean", "none", _set_recall),
    _Family("set_map", "mean", "none", _set_map),
    _Family("set_F", "mean", "values", _set_f, default_values=(1.0,)),
    _Family("num_nonrel_judged_ret", "sum", "none", _num_nonrel_judged_ret, integer=True),
    _Family("rbp", "mean", "pairs", _rbp, binary=False),
    _Family("rbp_resid", "mean", "none", _rbp_resid, binary=False),
    _Family("unj", "mean", "cutoff", _unj, cutoff_required=True, default_cutoffs=(5, 10, 20), binary=False),
    # Extensions (not in trec_eval): cut-off variants and the granular LLM-judging measures.
    _Family(
        "dcg_cut", "mean", "cutoff", _dcg_cut, cutoff_required=True, binary=False, graded=True, trec=False
    ),
    _Family("recip_rank_cut", "mean", "cutoff", _recip_rank, cutoff_required=True, trec=False),
    _Family("F1", "mean", "cutoff", _f1, cutoff_required=True, trec=False),
    _Family("hit_rate", "mean", "cutoff", _hit_rate, trec=False),
    _Family("mrr_all_hits", "mean", "cutoff", _mrr_all_hits, trec=False),
    # Intent-aware diversity measures (ndeval's), on subtopic qrels: judge/metrics/_diversity.py.
    *(
        _Family(
            name,
            "mean",
            "cutoff",
            _diversity(name),
            cutoff_required=True,
            default_cutoffs=_NDEVAL_CUTOFFS,
            trec=False,
            diversity=True,
        )
        for name in ("alpha_nDCG", "alpha_DCG", "ERR_IA", "nERR_IA", "P_IA", "StRecall")
    ),
)

_REGISTRY: dict[str, _Family] = {f.name: f for f in _FAMILIES}
_ORDER: dict[str, int] = {f.name: i for i, f in enumerate(_FAMILIES)}
_REGISTERED: set[str] = set()  # families added by register_measure
_VERSION = [0]  # bumped by register_measure / unregister_measure

_OFFICIAL = (
    "runid",
    "num_q",
    "num_ret",
    "num_rel",
    "num_rel_ret",
    "map",
    "gm_map",
    "Rprec",
    "bpref",
    "recip_rank",
    "iprec_at_recall",
    "P",
)
# The all_trec set of the trec_eval version whose test outputs we reproduce (no dcg/ideal_dcg).
_ALL_TREC = tuple(f.name for f in _FAMILIES if f.trec and f.name not in ("dcg", "ideal_dcg"))
_SET = ("runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "utility", "set_P", "set_recall",
        "set_relative_P", "set_map", "set_F")  # fmt: skip

NICKNAMES: dict[str, tuple[str, ...]] = {"official": _OFFICIAL, "all_trec": _ALL_TREC, "set": _SET}

# Short forms (case-insensitive) -> family name. Cut-off forms map onto the _cut families.
_ALIASES: dict[str, str] = {
    "ap": "map",
    "map": "map",
    "mean_average_precision": "map",
    "average_precision": "map",
    "gmap": "gm_map",
    "gm_ap": "gm_map",
    "gm_map": "gm_map",
    "ndcg": "ndcg",
    "dcg": "dcg",
    "idcg": "ideal_dcg",
    "ideal_dcg": "ideal_dcg",
    "p": "P",
    "prec": "P",
    "precision": "P",
    "r": "recall",
    "recall": "recall",
    "rr": "recip_rank",
    "mrr": "recip_rank",
    "recip_rank": "recip_rank",
    "reciprocal_rank": "recip_rank",
    "rprec": "Rprec",
    "r-prec": "Rprec",
    "r_prec": "Rprec",
    "r-precision": "Rprec",
    "r_precision": "Rprec",
    "success": "success",
    "bpref": "bpref",
    "infap": "infAP",
    "iprec": "iprec_at_recall",
    "iprec_at_recall": "iprec_at_recall",
    "numq": "num_q",
    "num_q": "num_q",
    "numret": "num_ret",
    "num_ret": "num_ret",
    "numrel": "num_rel",
    "num_rel": "num_rel",
    "numrelret": "num_rel_ret",
    "num_rel_ret": "num_rel_ret",
    "setp": "set_P",
    "set_p": "set_P",
    "setr": "set_recall",
    "setrecall": "set_recall",
    "set_recall": "set_recall",
    "setf": "set_F",
    "set_f": "set_F",
    "setrelp": "set_relative_P",
    "set_relative_p": "set_relative_P",
    "set_map": "set_map",
    "relative_p": "relative_P",
    "rbp": "rbp",
    "rbp_resid": "rbp_resid",
    "unj": "unj",
    "utility": "utility",
    "11pt_avg": "11pt_avg",
    "relstring": "relstring",
    "bing": "binG",
    "ndcg_rel": "ndcg_rel",
    "rndcg": "Rndcg",
    "rprec_mult": "Rprec_mult",
    "num_nonrel_judged_ret": "num_nonrel_judged_ret",
    "ndcg_cut": "ndcg_cut",
    "map_cut": "map_cut",
    "f1": "F1",
    "hit_rate": "hit_rate",
    "hitrate": "hit_rate",
    "mrr_all_hits": "mrr_all_hits",
    "mrr_all": "mrr_all_hits",
    "runid": "runid",
    "alpha_ndcg": "alpha_nDCG",
    "alpha-ndcg": "alpha_nDCG",
    "a-ndcg": "alpha_nDCG",
    "alpha_dcg": "alpha_DCG",
    "alpha-dcg": "alpha_DCG",
    "err_ia": "ERR_IA",
    "err-ia": "ERR_IA",
    "nerr_ia": "nERR_IA",
    "nerr-ia": "nERR_IA",
    "p_ia": "P_IA",
    "p-ia": "P_IA",
    "strecall": "StRecall",
    "st_recall": "StRecall",
    "strec": "StRecall",
    "s-recall": "StRecall",
}
# '@k' on a family without cut-off parameter selects its cut-off family.
_CUT_FAMILY = {"map": "map_cut", "ndcg": "ndcg_cut", "recip_rank": "recip_rank_cut", "dcg": "dcg_cut"}

_SHORT_RE = re.compile(r"^(?P<base>[A-Za-z0-9_.\-]+?)(?:\((?P<params>[^()]*)\))?(?:@(?P<at>[0-9.]+))?$")
_TREC_SUFFIX_RE = re.compile(r"^(?P<base>.+?)_(?P<num>\d+(?:\.\d+)?)$")
_ATOF_RE = re.compile(r"^\s*[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)")
_ATOL_RE = re.compile(r"^\s*[+-]?\d+")


def available_measures() -> tuple[str, ...]:
    """Every measure family in the registry, in trec_eval output order (registered ones last)."""
    return tuple(_REGISTRY)


_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def register_measure(
    name: str,
    compute: Callable[[Measure, RankedQuery], float],
    *,
    cutoff: Literal["none", "optional", "required"] = "none",
    aggregate: Literal["mean", "sum", "geometric"] = "mean",
    binary: bool = True,
    graded: bool = False,
    aliases: Sequence[str] = (),
) -> None:
    """Add a measure family to the registry: from then on it parses everywhere a measure
    does (``judge trec -m``, ``judge score -m``, ``judge.evaluate(measures=...)``,
    ``judge stability --metric``) and is computed by ``compute(measure, query)``.

    ``compute`` gets the parsed :class:`Measure` (its ``cutoff`` and conventions) and the
    query's :class:`RankedQuery` (``rel``, ``grades``, ``num_rel`` ...) and returns a float.
    ``cutoff``: whether the family takes ``@k`` / ``_k``. ``binary``: it uses the relevance
    level (accepts ``rel=``); ``graded``: it accepts ``gain=``/``idcg=``. ``aliases``: extra
    case-insensitive names. ValueError when the name or an alias is taken or malformed.
    """
    if not _NAME_RE.fullmatch(name) or _TREC_SUFFIX_RE.match(name):
        raise ValueError(f"measure name {name!r} must be letters, digits and '_', not ending in _<number>")
    taken = [n for n in (name, *aliases) if n in _REGISTRY or n.lower() in _ALIASES or n in NICKNAMES]
    if taken:
        raise ValueError(f"measure name {taken[0]!r} is already registered")
    if aggregate not in ("mean", "sum", "geometric"):
        raise ValueError(f"unknown aggregate {aggregate!r}")
    if cutoff not in ("none", "optional", "required"):
        raise ValueError(f"cutoff must be none, optional or required, not {cutoff!r}")
    family = _Family(
        name,
        aggregate,
        "none" if cutoff == "none" else "cutoff",
        compute,
        cutoff_required=cutoff == "required",
        binary=binary,
        graded=graded,
        trec=False,
    )
    _REGISTRY[name] = family
    _ORDER[name] = len(_ORDER)
    for alias in aliases:
        _ALIASES[alias.lower()] = name
    _REGISTERED.add(name)
    _VERSION[0] += 1


def unregister_measure(name: str) -> None:
    """Remove a family added by :func:`register_measure` (and its aliases)."""
    if name not in _REGISTERED:
        raise ValueError(f"{name!r} is not a registered extension measure")
    _REGISTERED.discard(name)
    del _REGISTRY[name]
    del _ORDER[name]
    for alias in [a for a, target in _ALIASES.items() if target == name]:
        del _ALIASES[alias]
    _VERSION[0] += 1


def registry_version() -> int:
    """A number that changes whenever a family is registered or removed (for caches of
    parsed measures)."""
    return _VERSION[0]


def measure_family(name: str) -> str:
    """Resolve a family name or short alias to the registry name; ValueError if unknown."""
    if name in _REGISTRY:
        return name
    resolved = _ALIASES.get(name.lower())
    if resolved is None:
        raise ValueError(f"unknown measure {name!r}")
    return resolved


def _atof(text: str) -> float:
    match = _ATOF_RE.match(text)
    return float(match.group(0)) if match else 0.0


def _atol(text: str) -> int:
    match = _ATOL_RE.match(text)
    return int(match.group(0)) if match else 0


def _apply_params(fields: dict[str, object], family: _Family, params: str, text: str) -> None:
    for raw in params.split(","):
        item = raw.strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"measure {text!r}: parameter {item!r} is not of the form key=value")
        key, value = (s.strip() for s in item.split("=", 1))
        key_l, value_l = key.lower(), value.lower()
        if key_l == "rel":
            if not re.fullmatch(r"\d+", value):
                raise ValueError(f"measure {text!r}: rel must be a non-negative integer, got {value!r}")
            fields["rel"] = int(value)
        elif key_l == "gain":
            gains = {"linear": "linear", "lin": "linear", "exponential": "exponential", "exp": "exponential"}
            if value_l not in gains:
                raise ValueError(f"measure {text!r}: gain must be linear or exponential, got {value!r}")
            fields["gain"] = gains[value_l]
        elif key_l in ("denominator", "denom", "ap_denominator"):
            if value_l not in ("qrels", "retrieved"):
                raise ValueError(f"measure {text!r}: denominator must be qrels or retrieved, got {value!r}")
            fields["ap_denominator"] = value_l
        elif key_l == "idcg":
            if value_l not in ("qrels", "list"):
                raise ValueError(f"measure {text!r}: idcg must be qrels or list, got {value!r}")
            fields["idcg"] = value_l
        elif key_l == "unjudged":
            if value_l not in ("nonrelevant", "drop"):
                raise ValueError(f"measure {text!r}: unjudged must be nonrelevant or drop, got {value!r}")
            fields["unjudged"] = value_l
        elif key_l == "judged_only":
            fields["unjudged"] = "drop" if value_l in ("true", "1", "yes") else "nonrelevant"
        elif key_l in ("cutoff", "k"):
            if not re.fullmatch(r"\d+", value):
                raise ValueError(f"measure {text!r}: cutoff must be a positive integer, got {value!r}")
            fields["cutoff"] = int(value)
        elif key_l == "p" and family.name == "rbp":
            fields["values"] = (float(value),)
            fields["param_text"] = f"p={value}"
        elif key_l == "alpha" and family.name in _ALPHA_FAMILIES:
            try:
                fields["alpha"] = float(value)
            except ValueError:
                raise ValueError(f"measure {text!r}: alpha must be a number, got {value!r}") from None
        elif key_l == "beta" and family.name == "set_F":
            fields["values"] = (float(value),)
            fields["param_text"] = value
        else:
            raise ValueError(f"measure {text!r}: unknown parameter {key!r}")


def parse_measure(text: str, *, defaults: Conventions | None = None) -> Measure:
    """Parse one measure: a trec_eval name (``map``, ``P_5``, ``ndcg_cut_10``,
    ``iprec_at_recall_0.10``) or a short form (``AP``, ``AP(rel=2)``, ``nDCG@10``, ``P@5``,
    ``R@100``, ``MRR``, ``map@100``, ``nDCG(gain=exponential)@10``). ValueError names the text.

    ``defaults``: the conventions of the evaluation the measure is parsed for (e.g. the
    label-free ones of :data:`judge.metrics.LABEL_FREE`), applied where the family takes
    them; parameters written in the text (``AP(denominator=qrels)``) override them. Without
    ``defaults`` a measure has trec_eval's conventions.
    """
    original = text
    text = text.strip()
    if not text:
        raise ValueError("empty measure name")
    try:
        return _parse_measure(text, defaults)
    except ValueError as exc:
        message = str(exc)
        if repr(original) in message or repr(text) in message:
            raise
        raise ValueError(f"bad measure {original!r}: {message}") from None


def _convention_fields(family: _Family, defaults: Conventions | None) -> dict[str, Any]:
    """The ``defaults`` that apply to ``family`` (a convention it does not take is skipped)."""
    if not defaults:
        return {}
    fields: dict[str, Any] = {}
    for key, value in defaults.items():
        if key not in _CONVENTION_KEYS:
            raise ValueError(f"unknown measure convention {key!r} (one of {', '.join(_CONVENTION_KEYS)})")
        takes = {"unjudged": True, "ap_denominator": family.ap, "gain": family.graded, "idcg": family.graded}
        if takes[key]:
            fields[key] = value
    return fields


def _parse_measure(text: str, defaults: Conventions | None = None) -> Measure:
    match = _SHORT_RE.match(text)
    if match is None:
        raise ValueError(f"cannot parse measure {text!r}")
    base, params, at = match.group("base"), match.group("params"), match.group("at")
    fields: dict[str, object] = {}
    family_name: str | None = None
    if base in _REGISTRY:
        family_name = base
    elif base.lower() in _ALIASES:
        family_name = _ALIASES[base.lower()]
    else:
        suffix = _TREC_SUFFIX_RE.match(base)
        if suffix is not None:
            root = suffix.group("base")
            root_name = root if root in _REGISTRY else _ALIASES.get(root.lower())
            if root_name is not None:
                family_name = root_name
                at_value = suffix.group("num")
                if at is not None:
                    raise ValueError(f"measure {text!r} has two cutoffs")
                at = at_value
    if family_name is None:
        raise ValueError(f"unknown measure {text!r}")
    family = _REGISTRY[family_name]
    if at is not None and family.params not in ("cutoff", "point"):
        cut_family = _CUT_FAMILY.get(family_name)
        if cut_family is None:
            raise ValueError(f"measure {text!r}: {family_name} takes no cutoff")
        family_name, family = cut_family, _REGISTRY[cut_family]
    fields.update(_convention_fields(family, defaults))
    if at is not None:
        if family.params == "cutoff":
            if not re.fullmatch(r"\d+", at) or int(at) < 1:
                raise ValueError(f"measure {text!r}: cutoff must be a positive integer, got {at!r}")
            fields["cutoff"] = int(at)
        else:
            fields["point"] = float(at)
    if params:
        _apply_params(fields, family, params, text)
    if family.params == "cutoff" and family.cutoff_required and "cutoff" not in fields:
        raise ValueError(f"measure {text!r} needs a cutoff, e.g. {family_name}@10 or {family_name}_10")
    if family.params == "point" and "point" not in fields:
        raise ValueError(f"measure {text!r} needs a point, e.g. {family_name}_0.10")
    if family.params == "values" and "values" not in fields and family.default_values:
        fields["values"] = family.default_values
    return Measure(family_name, **fields)  # type: ignore[arg-type]


def _trec_dot(text: str, defaults: Conventions | None = None) -> tuple[Measure, ...] | None:
    """trec_eval's ``name.params`` syntax (``P.5,10``, ``ndcg.1=3,2=9``), or None."""
    if "." not in text:
        return None
    root, params = text.split(".", 1)
    if root not in _REGISTRY or not _REGISTRY[root].trec:
        return None
    family = _REGISTRY[root]
    conv = _convention_fields(family, defaults)
    if not params:
        raise ValueError(f"measure {text!r}: empty parameter list")
    pieces = params.split(",")
    if family.params == "cutoff":
        cutoffs = sorted(_atol(p) for p in pieces)
        if cutoffs[0] <= 0:
            raise ValueError(f"measure {text!r}: cutoffs must be positive")
        if len(set(cutoffs)) != len(cutoffs):
            raise ValueError(f"measure {text!r}: duplicate cutoffs")
        return tuple(Measure(root, cutoff=c, **conv) for c in cutoffs)
    if family.params == "point":
        points = sorted(_atof(p) for p in pieces)
        if len(set(points)) != len(points):
            raise ValueError(f"measure {text!r}: duplicate cutoffs")
        return tuple(Measure(root, point=p, **conv) for p in points)
    if family.params == "values":
        values = tuple(_atof(p) for p in pieces)
        if root == "utility" and len(values) != 4:
            raise ValueError(f"measure {text!r}: utility needs 4 coefficients")
        return (Measure(root, values=values, param_text=params, **conv),)
    if family.params == "pairs":
        gains: list[tuple[int, float]] = []
        values_: tuple[float, ...] = ()
        for piece in pieces:
            if "=" not in piece:
                raise ValueError(f"measure {text!r}: malformed pair parameter {piece!r}")
            key, value = piece.split("=", 1)
            if re.fullmatch(r"[+-]?\d+", key):
                gains.append((int(key), _atof(value)))
            elif key == "p" and root == "rbp":
                values_ = (_atof(value),)
        return (Measure(root, gains=tuple(gains), values=values_, param_text=params, **conv),)
    raise ValueError(f"measure {text!r}: {root} takes no parameters")


def parse_measures(text: str, *, defaults: Conventions | None = None) -> tuple[Measure, ...]:
    """Parse a ``-m`` argument, which may stand for several measures: a nickname
    (``official``, ``all_trec``, ``set``), a trec_eval family with default cutoffs (``P``),
    trec_eval's ``name.params`` syntax (``P.5,10``, ``ndcg_cut.10,20``), or one measure.
    ``defaults``: as for :func:`parse_measure`."""
    text = text.strip()
    if text in NICKNAMES:
        out: list[Measure] = []
        for name in NICKNAMES[text]:
            out.extend(_family_defaults(name, defaults))
        return tuple(out)
    dotted = _trec_dot(text, defaults)
    if dotted is not None:
        return dotted
    if text in _REGISTRY and _REGISTRY[text].params in ("cutoff", "point"):
        expanded = _family_defaults(text, defaults)
        if expanded:
            return expanded
    return (parse_measure(text, defaults=defaults),)


def _family_defaults(name: str, defaults: Conventions | None = None) -> tuple[Measure, ...]:
    family = _REGISTRY[name]
    conv = _convention_fields(family, defaults)
    if family.params == "cutoff":
        return tuple(Measure(name, cutoff=c, **conv) for c in family.default_cutoffs)
    if family.params == "point":
        return tuple(Measure(name, point=p, **conv) for p in family.default_points)
    if family.params == "values":
        return (Measure(name, values=family.default_values, **conv),)
    return (Measure(name, **conv),)


def parse_measure_args(texts: Sequence[str]) -> tuple[Measure, ...]:
    """Measures of several ``-m`` arguments, as trec_eval combines them, in output order.

    As in trec_eval, explicit parameters for a family (``-m relstring.20``) replace that
    family's defaults from a nickname or bare family name (``-m all_trec``, ``-m P``).
    """
    defaults: list[Measure] = []
    explicit: dict[str, tuple[Measure, ...]] = {}
    singles: list[Measure] = []
    for raw in texts:
        text = raw.strip()
        dotted = _trec_dot(text)
        if dotted is not None:
            explicit.setdefault(dotted[0].name, dotted)
        elif text in NICKNAMES or text in _REGISTRY:
            defaults.extend(parse_measures(text))
        else:
            singles.extend(parse_measures(text))
    chosen = [m for m in defaults if m.name not in explicit] + singles
    for group in explicit.values():
        chosen.extend(group)
    unique: dict[str, Measure] = {}
    for m in chosen:
        unique.setdefault(m.trec_name, m)
    return tuple(sorted(unique.values(), key=Measure.sort_key))
