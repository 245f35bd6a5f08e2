"""Hybrid retrieval's arithmetic: score normalisation and the combination of two ranked
lists, as pure functions, with the knobs that choose them.

Two lists of (key, score), each best first, are combined into one. ``weight`` is the share
of the *second* list (the dense side of the embedded engine, the second source of a hybrid
configuration), ``1 - weight`` the first's.

The formulas are those of OpenSearch's normalization processor (neural-search's
``MinMaxScoreNormalizationTechnique``, ``L2ScoreNormalizationTechnique``,
``ZScoreNormalizationTechnique`` and the ``*MeanScoreCombinationTechnique`` classes), with the
differences listed below and in docs/guides/search.md.

Normalisation (each list on its own, over the hits it returned):

* ``min_max``: ``(s - min) / (max - min)``, floored at :data:`MIN_SCORE` (0.001, OpenSearch's
  constant): a list's lowest hit gets 0.001, never 0, so no hit a list returned counts as
  missing; a list whose scores are all equal (one hit, or ties) gives 1.0 to each;
* ``l2``: ``s / sqrt(sum(s**2))``; all zero gives 0.0; a negative score stays negative;
* ``z_score``: ``(s - mean) / std`` with the *sample* standard deviation (n - 1, as
  OpenSearch's Apache Commons statistics), floored at 0.001 (a score at or below the mean
  gets 0.001, as in OpenSearch); a list with no spread (one hit, or ties) gives 1.0 to each
  (OpenSearch gives the list's raw score there, unnormalised).

A key one list did not return counts as 0.0 for that list (OpenSearch's missing score).

Combination of the normalised scores ``a`` (first) and ``b`` (second), ``w`` the weight:

* ``arithmetic``: ``(1 - w) * a + w * b``, a missing side 0.0 (OpenSearch's weighted
  arithmetic mean; OpenSearch also leaves a *negative* score and its weight out, which only
  ``l2`` can give: judge keeps it, so a negative cosine lowers the key);
* ``geometric``: ``exp(sum(w_i * ln s_i) / sum(w_i))`` and ``harmonic``:
  ``sum(w_i) / sum(w_i / s_i)``, over the sides that returned the key with a weight above 0
  (OpenSearch's: over the scores above 0): a key only one side returned keeps that side's
  normalised score; no such side gives 0.0. Only ``min_max`` goes with them: ``l2`` can give
  0 or a negative score (a cosine below 0) that the mean would count as missing, and
  OpenSearch itself refuses ``z_score`` with them, so both pairs are a :class:`SearchError`;
* ``rrf``: reciprocal rank fusion, ``(1 - w) / (rrf_k + rank_a) + w / (rrf_k + rank_b)``
  over the lists that hold the key (rank from 1; ``rrf_k`` above 0; scores and
  normalisation unused).

The result is ordered by combined score, then by rank in the list of the larger weight (the
second at 0.5), then by rank in the other: at weight 0 the first list comes back in its own
order, at weight 1 the second, each followed by the keys only the other returned.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from judge.search._request_template import Value
from judge.search._search_errors import SearchError

RETRIEVERS = ("bm25", "dense", "hybrid")
NORMALIZATIONS = ("min_max", "l2", "z_score")
COMBINATIONS = ("arithmetic", "geometric", "harmonic", "rrf")
#: OpenSearch's floor for a normalised score (``MIN_SCORE`` of its min-max and z-score
#: techniques): the lowest hit of a list is 0.001, not 0, and so is not taken for missing.
MIN_SCORE = 0.001
#: The combinations defined over positive scores only, and the normalisations they take.
MEANS = ("geometric", "harmonic")
MEAN_NORMALIZATIONS = ("min_max",)
MAX_FUSION_DEPTH = 10_000

#: The knobs of a combination of two lists and their defaults (the ``hybrid`` engine's [params]).
FUSION_PARAMS: dict[str, Value] = {
    "weight": 0.5,
    "normalization": "min_max",
    "combination": "arithmetic",
    "rrf_k": 60,
    "fusion_depth": 100,
}
#: The embedded engine's retrieval knobs beyond BM25's (left out of a configuration's hash
#: at their defaults, so every BM25 configuration keeps its hash).
DENSE_PARAMS: dict[str, Value] = {"retriever": "bm25", **FUSION_PARAMS, "ann": False}

K = TypeVar("K", bound=Hashable)


def normalize(scores: Sequence[float], method: str) -> list[float]:
    """``scores`` normalised by ``method`` (see the module docstring); empty stays empty.

    Every formula is invariant under scaling all scores by one positive factor, so they are
    first divided by the power of two nearest above the largest magnitude (exact: only the
    exponents change) and the squares, sums and differences never overflow or vanish, for
    any finite scores (``1e160`` squared, ``1e308 - -1e308``, ``5e-324`` squared); where the
    unscaled arithmetic stays finite and normal the results are the same bits."""
    values = _scaled([float(s) for s in scores])
    if not values:
        return []
    if method == "min_max":
        low, high = min(values), max(values)
        if high == low:
            return [1.0] * len(values)
        return [max((v - low) / (high - low), MIN_SCORE) for v in values]
    if method == "l2":
        norm = math.sqrt(math.fsum(v * v for v in values))
        return [v / norm for v in values] if norm > 0 else [0.0] * len(values)
    if method == "z_score":
        mean = math.fsum(values) / len(values)
        spread = math.fsum((v - mean) ** 2 for v in values)
        if len(values) < 2 or spread <= 0:
            return [1.0] * len(values)
        std = math.sqrt(spread / (len(values) - 1))
        return [max((v - mean) / std, MIN_SCORE) for v in values]
    raise SearchError(f"unknown normalization {method!r} (known: {', '.join(NORMALIZATIONS)})")


def _scaled(values: list[float]) -> list[float]:
    """``values`` divided by ``2**e``, ``e`` the exponent of the largest finite magnitude
    (every result within (-1, 1)); as they are when none is finite and nonzero."""
    largest = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    if largest == 0.0:
        return values
    exponent = math.frexp(largest)[1]
    return [math.ldexp(v, -exponent) for v in values]


def _mean(pairs: Sequence[tuple[float, float]], combination: str) -> float:
    """The weighted geometric or harmonic mean of (score, weight) over the sides that returned
    the key (``pairs``), those of weight 0 and (as in OpenSearch) of score 0 left out."""
    used = [(s, w) for s, w in pairs if s > 0 and w > 0]
    total = math.fsum(w for _, w in used)
    if not used or total <= 0:
        return 0.0
    if combination == "geometric":
        return math.exp(math.fsum(w * math.log(s) for s, w in used) / total)
    return total / math.fsum(w / s for s, w in used)


def fuse(
    first: Sequence[tuple[K, float]],
    second: Sequence[tuple[K, float]],
    *,
    weight: float,
    normalization: str = "min_max",
    combination: str = "arithmetic",
    rrf_k: float = 60,
) -> list[tuple[K, float]]:
    """The two ranked lists combined (see the module docstring): (key, combined score), best
    first. A key repeated within one list counts at its first place."""
    if not 0 <= weight <= 1:
        raise SearchError(f"must be a number from 0 to 1, got {weight!r}", field="params.weight")
    if combination not in COMBINATIONS:
        raise SearchError(f"unknown combination {combination!r}", field="params.combination")
    _check_pair(normalization, combination, None)
    _check_rrf_k(rrf_k, None)
    sides = [_dedupe(first), _dedupe(second)]
    weights = (1.0 - weight, weight)
    ranks: list[dict[K, int]] = [{k: r for r, (k, _) in enumerate(side, start=1)} for side in sides]
    keys: dict[K, None] = {}
    for side in sides if weight >= 0.5 else sides[::-1]:
        keys.update((k, None) for k, _ in side)
    combined: dict[K, float] = {}
    if combination == "rrf":
        for k in keys:
            combined[k] = math.fsum(
                w / (rrf_k + rank[k]) for rank, w in zip(ranks, weights, strict=True) if k in rank
            )
    else:
        normal: list[dict[K, float]] = []
        for side in sides:
            values = normalize([s for _, s in side], normalization)
            normal.append({k: v for (k, _), v in zip(side, values, strict=True)})
        for k in keys:
            if combination == "arithmetic":
                combined[k] = math.fsum(w * n.get(k, 0.0) for n, w in zip(normal, weights, strict=True))
            else:
                combined[k] = _mean(
                    [(n[k], w) for n, w in zip(normal, weights, strict=True) if k in n], combination
                )
    major, minor = (ranks[1], ranks[0]) if weight >= 0.5 else (ranks[0], ranks[1])
    missing = len(keys) + 1
    order = sorted(keys, key=lambda k: (-combined[k], major.get(k, missing), minor.get(k, missing)))
    return [(k, combined[k]) for k in order]


def _dedupe(side: Sequence[tuple[K, float]]) -> list[tuple[K, float]]:
    seen: set[K] = set()
    out: list[tuple[K, float]] = []
    for k, s in side:
        if k not in seen:
            seen.add(k)
            out.append((k, float(s)))
    return out


def check_fusion_params(params: Mapping[str, Value], where: str | None) -> None:
    """The fusion knobs of ``params`` (defaults for those missing) checked: a SearchError
    naming ``params.<knob>``."""
    p = {**DENSE_PARAMS, **params}
    weight = p["weight"]
    if (
        isinstance(weight, bool)
        or not isinstance(weight, int | float)
        or not math.isfinite(weight)
        or not 0 <= weight <= 1
    ):
        raise SearchError(f"must be a number from 0 to 1, got {weight!r}", path=where, field="params.weight")
    for name, known in (
        ("retriever", RETRIEVERS),
        ("normalization", NORMALIZATIONS),
        ("combination", COMBINATIONS),
    ):
        if p[name] not in known:
            raise SearchError(
                f"unknown {name} {p[name]!r} (known: {', '.join(known)})", path=where, field=f"params.{name}"
            )
    _check_rrf_k(p["rrf_k"], where)
    depth = p["fusion_depth"]
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_FUSION_DEPTH:
        raise SearchError(
            f"must be an integer from 1 to {MAX_FUSION_DEPTH}, got {depth!r}",
            path=where,
            field="params.fusion_depth",
        )
    if not isinstance(p["ann"], bool):
        raise SearchError(f"must be true or false, got {p['ann']!r}", path=where, field="params.ann")
    _check_pair(str(p["normalization"]), str(p["combination"]), where)


def _check_rrf_k(rrf_k: object, where: str | None) -> None:
    """RRF's rank constant: a finite number above 0 (OpenSearch's ``rank_constant`` is at least
    1); at 0 or below a rank's term ``1 / (rrf_k + rank)`` can divide by zero or turn negative."""
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, int | float) or not 0 < rrf_k < math.inf:
        raise SearchError(f"must be a number above 0, got {rrf_k!r}", path=where, field="params.rrf_k")


def _check_pair(normalization: str, combination: str, where: str | None) -> None:
    """A geometric or harmonic mean only over ``min_max`` scores (all above 0)."""
    if combination in MEANS and normalization not in MEAN_NORMALIZATIONS:
        why = (
            "gives scores of 0 or below (a negative cosine), which the mean would count as missing"
            if normalization == "l2"
            else "is refused with a geometric or harmonic mean, as by OpenSearch"
        )
        raise SearchError(
            f"normalization {normalization} {why}: use normalization min_max with {combination}, "
            f"or combination arithmetic or rrf with {normalization}",
            path=where,
            field="params.normalization",
        )
