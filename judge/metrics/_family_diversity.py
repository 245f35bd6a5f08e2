"""The intent-aware diversity measures (ndeval's) as measure formulas: each reads the
query's subtopic judgements and is computed by :func:`judge.metrics._diversity.diversity_value`."""

from __future__ import annotations

from collections.abc import Callable

from judge.metrics._diversity import DEFAULT_ALPHA, DiversityMeasureName, diversity_value
from judge.metrics._measure import Measure
from judge.metrics._query import RankedQuery

__all__ = ["diversity"]


def diversity(name: DiversityMeasureName) -> Callable[[Measure, RankedQuery], float]:
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
