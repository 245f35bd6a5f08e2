"""One query's ranked list and judgements, the input every measure formula reads.

Grades follow trec_eval: a ranked list carries -1 for documents not in the qrels and -2 for
documents in the qrels with a negative judgement; binary measures call a document relevant
when ``grade >= level``.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import numpy.typing as npt

from judge.metrics._diversity import SubtopicMatrix
from judge.metrics._ranking import UnjudgedPolicy

__all__ = ["RankedQuery"]


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
