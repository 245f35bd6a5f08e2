"""Intent-aware (diversity) measures over subtopic judgements, exactly as TREC's ``ndeval``.

Diversity qrels judge each document per *subtopic* (``qid subtopic docno grade``). For one
query, with ``alpha`` the redundancy intolerance (0.5 by default) and ``level`` the relevance
level (a document is relevant to a subtopic when its grade for it is ``>= level``; ndeval
binarises the same way):

* ``S`` is the number of subtopics with at least one relevant document in the qrels (a
  subtopic nobody found relevant is ignored). With ``S = 0`` every measure is 0.
* Gain of the document at rank ``r``: ``sum over its relevant subtopics s of (1-alpha)^c_s``,
  where ``c_s`` is the number of higher-ranked documents relevant to ``s`` (the factor is
  applied by repeated multiplication, in subtopic order, as ndeval does).
* ``alpha_DCG@k`` = ``sum_{r<=k} gain_r / log2(r+1)`` divided by the "ideal ideal" value
  ``sum_{r<=k} S (1-alpha)^(r-1) / log2(r+1)`` (every document covering every subtopic);
  ndeval leaves ``@1`` undivided, and so do we.
* ``alpha_nDCG@k`` = ``alpha_DCG@k`` of the run / ``alpha_DCG@k`` of the ideal ranking. The
  ideal ranking is ndeval's greedy one over the judged documents: at each rank the document
  with the largest gain given the documents already placed, ties going to the larger
  docno (byte order). 0 when the run's gain is 0.
* ``ERR_IA@k`` = ``sum_{r<=k} gain_r / r`` divided by ``sum_{r<=k} S (1-alpha)^(r-1) / r``
  (ndeval's "collection-independent" normalisation; ``@1`` undivided); ``nERR_IA@k``
  divides by the ideal ranking's value instead.
* ``P_IA@k`` = (relevant (document, subtopic) pairs in the top k) / (k * S): a list shorter
  than k still divides by k.
* ``StRecall@k`` = (subtopics with a relevant document in the top k) / S.

ndeval (and pyndeval, through ir_measures) stops at depth 20; here any k works and the same
formulas continue. Documents of the run absent from the qrels are not relevant to any
subtopic; ``unjudged=drop`` (ir_measures' ``judged_only``) removes them from the ranking first.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_ALPHA",
    "DIVERSITY_CONVENTIONS",
    "DiversityMeasureName",
    "DiversityProfile",
    "SubtopicMatrix",
    "diversity_profile",
    "diversity_value",
]

DEFAULT_ALPHA = 0.5

DiversityMeasureName = Literal["alpha_nDCG", "alpha_DCG", "ERR_IA", "nERR_IA", "P_IA", "StRecall"]

DIVERSITY_CONVENTIONS: dict[str, str] = {
    "qrels": "qid subtopic docno grade (one line per document and subtopic)",
    "relevant": "grade >= relevance level, per subtopic (ndeval binarises)",
    "subtopics": "those with at least one relevant document (ndeval's actualSubtopics)",
    "gain": "sum over covered subtopics of (1-alpha)^(documents above already covering it)",
    "ideal": "ndeval's greedy ranking of the judged documents; ties to the larger docno",
    "alpha_DCG/ERR_IA": "divided by the 'ideal ideal' (every document covers every subtopic); @1 undivided",
    "P_IA": "relevant (document, subtopic) pairs in the top k / (k * subtopics)",
    "StRecall": "subtopics covered in the top k / subtopics",
    "ordinary_measures": "with diversity qrels, a document's grade is its largest subtopic grade",
    "reference": "equal to ndeval / pyndeval (ir_measures) for k <= 20",
}


class SubtopicMatrix(Protocol):
    """One query's subtopic judgements (``judge.io.SubtopicJudgements`` satisfies it).

    ``ranked``: (retrieved documents in rank order, subtopics) grades, negative where the
    document has no judgement for the subtopic; ``pool``: the same for every judged document
    of the query, rows in docno byte order; ``in_pool``: whether each retrieved document
    has any judgement.
    """

    @property
    def ranked(self) -> npt.NDArray[np.int64]: ...

    @property
    def pool(self) -> npt.NDArray[np.int64]: ...

    @property
    def in_pool(self) -> npt.NDArray[np.bool_]: ...


@dataclass(frozen=True)
class DiversityProfile:
    """Everything the measures need at depths 1..``depth`` for one (query, level, alpha)."""

    depth: int
    subtopics: int  # S
    dcg: tuple[float, ...]  # alpha_DCG@1..depth of the run (ideal-ideal normalised)
    err: tuple[float, ...]  # ERR_IA@1..depth of the run
    ideal_dcg: tuple[float, ...]
    ideal_err: tuple[float, ...]
    pairs: tuple[int, ...]  # relevant (doc, subtopic) pairs in the top 1..depth
    covered: tuple[int, ...]  # subtopics covered in the top 1..depth


def _discount(i: int) -> float:
    """ndeval's discount of 0-based rank i: log(2)/log(i+2)."""
    return math.log(2.0) / math.log(i + 2.0)


def _gains(rel: npt.NDArray[np.bool_], alpha: float, depth: int) -> list[float]:
    """Novelty-discounted gain of each of the first ``depth`` rows, as ndeval sums it."""
    n_sub = rel.shape[1]
    left = [1.0] * n_sub
    decay = 1.0 - alpha
    out: list[float] = []
    for row in rel[:depth].tolist():
        score = 0.0
        for j in range(n_sub):
            if row[j]:
                score += left[j]
                left[j] *= decay
        out.append(score)
    return out


def _ideal_gains(pool: npt.NDArray[np.bool_], alpha: float, depth: int) -> list[float]:
    """ndeval's greedy ideal ranking: gains of its first ``depth`` documents. Rows are in
    docno order, so a tie goes to the last (largest docno) of the tied rows."""
    n, n_sub = pool.shape
    left = np.ones(n_sub, dtype=np.float64)
    decay = 1.0 - alpha
    placed = np.zeros(n, dtype=np.bool_)
    columns = [pool[:, j] for j in range(n_sub)]
    out: list[float] = []
    for _ in range(min(depth, n)):
        score = np.zeros(n, dtype=np.float64)
        for j in range(n_sub):  # summed in subtopic order, like ndeval's loop
            score += np.where(columns[j], left[j], 0.0)
        score[placed] = -np.inf
        best = float(score.max())
        where = int(np.flatnonzero(score == best)[-1])
        placed[where] = True
        out.append(best)
        for j in range(n_sub):
            if columns[j][where]:
                left[j] *= decay
    return out


def _normalised(raw: Sequence[float], n_sub: int, alpha: float, depth: int, log: bool) -> tuple[float, ...]:
    """Cumulative sums of the discounted ``raw`` gains (``log``: 1/log2(r+1), else 1/r)
    divided by the ideal-ideal sums; rank 1 is left undivided, as in ndeval."""
    out: list[float] = []
    total = ideal_total = 0.0
    ideal_gain = float(n_sub)
    for i in range(depth):
        gain = raw[i] if i < len(raw) else 0.0
        if log:
            total += gain * _discount(i)
            ideal_total += ideal_gain * _discount(i)
        else:
            total += gain / float(i + 1)
            ideal_total += ideal_gain / float(i + 1)
        ideal_gain *= 1.0 - alpha
        out.append(total if i == 0 else total / ideal_total)
    return tuple(out)


_CACHE: weakref.WeakKeyDictionary[object, dict[tuple[int, float, bool], DiversityProfile]] = (
    weakref.WeakKeyDictionary()
)


def diversity_profile(
    judgements: SubtopicMatrix,
    *,
    level: int = 1,
    alpha: float = DEFAULT_ALPHA,
    depth: int,
    drop_unjudged: bool = False,
) -> DiversityProfile:
    """The run's and the ideal ranking's cumulative values at depths 1..``depth``."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    pool = np.asarray(judgements.pool, dtype=np.int64) >= level
    ranked_grades = np.asarray(judgements.ranked, dtype=np.int64)
    if drop_unjudged:
        ranked_grades = ranked_grades[np.asarray(judgements.in_pool, dtype=np.bool_)]
    ranked = ranked_grades >= level
    if ranked.ndim != 2 or pool.ndim != 2 or ranked.shape[1] != pool.shape[1]:
        raise ValueError("subtopic matrices must be 2-d with the same number of subtopics")
    useful = pool.any(axis=0)  # subtopics with a relevant document
    n_sub = int(useful.sum())
    zeros = tuple(0.0 for _ in range(depth))
    if n_sub == 0:
        return DiversityProfile(depth, 0, zeros, zeros, zeros, zeros, (0,) * depth, (0,) * depth)
    run_gains = _gains(ranked, alpha, depth)
    ideal_gains = _ideal_gains(pool, alpha, depth)
    top = ranked[:depth]
    pair_counts = np.cumsum(top.sum(axis=1)).tolist()
    covered_counts = np.cumsum(_first_cover(top)).tolist()
    last_pairs = pair_counts[-1] if pair_counts else 0
    last_cov = covered_counts[-1] if covered_counts else 0
    pairs = tuple(int(x) for x in pair_counts) + (int(last_pairs),) * (depth - len(pair_counts))
    covered = tuple(int(x) for x in covered_counts) + (int(last_cov),) * (depth - len(covered_counts))
    return DiversityProfile(
        depth=depth,
        subtopics=n_sub,
        dcg=_normalised(run_gains, n_sub, alpha, depth, log=True),
        err=_normalised(run_gains, n_sub, alpha, depth, log=False),
        ideal_dcg=_normalised(ideal_gains, n_sub, alpha, depth, log=True),
        ideal_err=_normalised(ideal_gains, n_sub, alpha, depth, log=False),
        pairs=pairs,
        covered=covered,
    )


def _first_cover(top: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """Per rank, how many subtopics are covered there for the first time."""
    if top.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    seen_before = np.zeros_like(top)
    seen_before[1:] = np.logical_or.accumulate(top, axis=0)[:-1]
    return np.asarray((top & ~seen_before).sum(axis=1), dtype=np.int64)


def diversity_value(
    name: DiversityMeasureName,
    judgements: SubtopicMatrix,
    *,
    cutoff: int,
    level: int = 1,
    alpha: float = DEFAULT_ALPHA,
    drop_unjudged: bool = False,
    cache_key: object | None = None,
) -> float:
    """One measure at ``cutoff`` for one query. ``cache_key`` (any weak-referenceable object,
    e.g. the per-query context) shares the profile between measures of the same query."""
    profile = _cached_profile(judgements, level, alpha, cutoff, drop_unjudged, cache_key)
    if profile.subtopics == 0:
        return 0.0
    i = cutoff - 1
    if name == "alpha_DCG":
        return profile.dcg[i]
    if name == "alpha_nDCG":
        return profile.dcg[i] / profile.ideal_dcg[i] if profile.dcg[i] else 0.0
    if name == "ERR_IA":
        return profile.err[i]
    if name == "nERR_IA":
        return profile.err[i] / profile.ideal_err[i] if profile.dcg[i] else 0.0
    if name == "P_IA":
        return float(profile.pairs[i]) / float(cutoff * profile.subtopics)
    if name == "StRecall":
        return float(profile.covered[i]) / float(profile.subtopics)
    raise ValueError(f"unknown diversity measure {name!r}")


def _cached_profile(
    judgements: SubtopicMatrix,
    level: int,
    alpha: float,
    depth: int,
    drop_unjudged: bool,
    cache_key: object | None,
) -> DiversityProfile:
    if cache_key is None:
        return diversity_profile(
            judgements, level=level, alpha=alpha, depth=depth, drop_unjudged=drop_unjudged
        )
    per_key = _CACHE.setdefault(cache_key, {})
    key = (level, alpha, drop_unjudged)
    profile = per_key.get(key)
    if profile is None or profile.depth < depth:
        profile = diversity_profile(
            judgements, level=level, alpha=alpha, depth=max(depth, 20), drop_unjudged=drop_unjudged
        )
        per_key[key] = profile
    return profile
