"""The measure value type: a family name plus every parameter and convention, explicitly.

A :class:`Measure` is looked up in the table of measure families when it is built: the
:class:`Family` record says which parameters and conventions the family takes, how it is
computed per query and how per-query values are aggregated. The built-in families are
added to the table by :mod:`judge.metrics._registry` (imported with the package), extension
families by :func:`judge.metrics.register_measure`.

A measure prints under its trec_eval key (:attr:`Measure.trec_name`); a measure computed
under a convention trec_eval does not have gets that convention appended, e.g.
``ndcg_cut_10(gain=exponential)`` or ``map(denominator=retrieved)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from judge.metrics._diversity import DEFAULT_ALPHA, SubtopicMatrix
from judge.metrics._query import RankedQuery
from judge.metrics._ranking import Gain, UnjudgedPolicy, sequential_sum

__all__ = [
    "CONVENTION_KEYS",
    "MIN_GEO_MEAN",
    "Aggregate",
    "ApDenominator",
    "Conventions",
    "Family",
    "IdcgSource",
    "Measure",
    "ParamStyle",
    "add_family",
    "family_names",
    "find_family",
    "remove_family",
]

ApDenominator = Literal["qrels", "retrieved"]
IdcgSource = Literal["qrels", "list"]
Aggregate = Literal["mean", "geometric", "sum", "count", "runid", "none"]
ParamStyle = Literal["none", "cutoff", "point", "values", "pairs"]
Conventions = Mapping[str, str]
"""Default conventions of an evaluation, by :class:`Measure` field: ``unjudged``,
``ap_denominator``, ``gain``, ``idcg`` (see :func:`judge.metrics.parse_measure`)."""
CONVENTION_KEYS = ("unjudged", "ap_denominator", "gain", "idcg")

MIN_GEO_MEAN = 0.00001  # trec_eval's floor for geometric means


@dataclass(frozen=True)
class Family:
    """What a measure family takes and how it is computed and aggregated.

    ``compute(measure, query)`` is the per-query value (None: the family has none, like
    ``runid``); ``compute_string`` is set instead for a family whose value is a string.
    """

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
    diversity: bool = False  # needs subtopic qrels
    alpha: bool = False  # accepts alpha= (ndeval's redundancy intolerance)
    compute_string: Callable[[Measure, RankedQuery], str] | None = None  # a string per query


_TABLE: dict[str, Family] = {}
_TABLE_INDEX: dict[str, int] = {}  # position in trec_eval's measure table (its output order)


def add_family(family: Family) -> None:
    """Put ``family`` in the table, after every family already there."""
    _TABLE[family.name] = family
    _TABLE_INDEX[family.name] = len(_TABLE_INDEX)


def remove_family(name: str) -> None:
    del _TABLE[name]
    del _TABLE_INDEX[name]


def find_family(name: str) -> Family | None:
    """The family registered under exactly ``name`` (no alias), or None."""
    return _TABLE.get(name)


def family_names() -> tuple[str, ...]:
    """Every family in the table, in the order they were added."""
    return tuple(_TABLE)


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
    _family: Family = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        family = find_family(self.name)
        if family is None:
            raise ValueError(f"unknown measure {self.name!r}")
        object.__setattr__(self, "_family", family)
        self._check_parameters(family)
        self._check_conventions(family)
        if self.alpha is not None:
            if not family.alpha:
                raise ValueError(f"measure {self.name!r} takes no alpha")
            if not 0.0 <= self.alpha <= 1.0:
                raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
            if self.alpha == DEFAULT_ALPHA:  # one key for the default, however it was written
                object.__setattr__(self, "alpha", None)

    def _check_parameters(self, family: Family) -> None:
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

    def _check_conventions(self, family: Family) -> None:
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
        return self._family.compute_string is not None

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
        return _TABLE_INDEX[self.name]

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
        if self._family.alpha:
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
        compute = self._family.compute_string
        if compute is None:
            raise ValueError(f"{self.trec_name} is numeric; use compute()")
        return compute(self, query)
