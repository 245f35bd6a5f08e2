"""Source quality and contextual recall as pure functions.

Source quality. ``qualities`` are the 0-3 source grades of the ranked passages (None where
the source is unknown: no URL/site, or its verdict could not be had):

* :func:`source_quality_at_k`: mean grade of the top-k passages with a known grade (None
  when none is known);
* :func:`low_quality_share_at_k`: the share of the top-k passages with a known grade whose
  grade is <= ``low`` (default 1: forums, blogs, content farms, ads, spam);
* :func:`quality_weighted_ndcg`: NDCG where each passage's gain is multiplied by the quality
  factor ``(1 + q) / 4`` (q = 3 -> 1, 2 -> 0.75, 1 -> 0.5, 0 -> 0.25; unknown -> 1, i.e. not
  penalised). The ideal DCG is that of the *unweighted* gains sorted (what the best ranking
  of these passages would score if every source were top quality), so the measure is at most
  the plain NDCG and falls when relevant passages come from weak sources or are ranked
  below weaker ones. Linear gain, log2 discount (the judge NDCG's conventions).

Contextual recall. Each claim of a reference answer carries its support verdicts against
the ranked passages (:class:`ClaimSupport`); :func:`claim_recall_at_k` turns them into
recall@k = supported claims / judged claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from judge.metrics._ranking import dcg

__all__ = [
    "LOW_QUALITY_MAX",
    "ClaimSupport",
    "claim_recall_at_k",
    "claim_status_at_k",
    "low_quality_share_at_k",
    "quality_factor",
    "quality_weighted_ndcg",
    "source_quality_at_k",
]

LOW_QUALITY_MAX = 1
"""A source is low quality when its grade is at most this (1: ordinary; 0: spam)."""


def quality_factor(quality: int | None) -> float:
    """``(1 + q) / 4`` for a 0-3 grade; 1.0 for an unknown source."""
    if quality is None:
        return 1.0
    if not 0 <= quality <= 3:
        raise ValueError(f"source quality must be 0..3, got {quality}")
    return (1.0 + quality) / 4.0


def _top(qualities: Sequence[int | None], k: int) -> list[int]:
    if k < 1:
        raise ValueError(f"cutoff k must be a positive integer, got {k}")
    return [q for q in qualities[:k] if q is not None]


def source_quality_at_k(qualities: Sequence[int | None], k: int) -> float | None:
    """Mean grade of the top-k passages whose source grade is known (None: none known)."""
    known = _top(qualities, k)
    return sum(known) / len(known) if known else None


def low_quality_share_at_k(
    qualities: Sequence[int | None], k: int, *, low: int = LOW_QUALITY_MAX
) -> float | None:
    """Share of the top-k passages with a known grade that are <= ``low`` (None: none known)."""
    known = _top(qualities, k)
    return sum(1 for q in known if q <= low) / len(known) if known else None


def quality_weighted_ndcg(gains: Sequence[float], qualities: Sequence[int | None], k: int) -> float:
    """NDCG@k with gain x :func:`quality_factor`; IDCG from the unweighted gains (0.0 when
    there is no positive gain)."""
    if len(gains) != len(qualities):
        raise ValueError("gains and qualities must have the same length")
    plain = np.asarray(gains, dtype=np.float64)
    weighted = plain * np.asarray([quality_factor(q) for q in qualities], dtype=np.float64)
    ideal = np.sort(plain[plain > 0])[::-1]
    idcg = dcg(ideal, k=k)
    return 0.0 if idcg <= 0.0 else dcg(weighted, k=k) / idcg


@dataclass(frozen=True)
class ClaimSupport:
    """One claim's verdicts against the ranked passages, in rank order, as far as they
    were asked: True (the passage supports the claim), False (it does not), None (no
    verdict could be had). Asking stops at the first supporting passage, so ``labels``
    may be shorter than ``passages``, the length of the ranking."""

    labels: tuple[bool | None, ...]
    passages: int


def claim_status_at_k(claim: ClaimSupport, k: int) -> str:
    """``supported`` (a passage in the top k supports it), ``unsupported`` (every one of the
    top k passages, or all of them when fewer, was judged and none supports it) or
    ``unjudged`` (neither: a verdict in the top k is missing)."""
    if k < 1:
        raise ValueError(f"cutoff k must be a positive integer, got {k}")
    top = claim.labels[:k]
    if any(label is True for label in top):
        return "supported"
    if len(top) >= min(k, claim.passages) and all(label is False for label in top):
        return "unsupported"
    return "unjudged"


def claim_recall_at_k(claims: Sequence[ClaimSupport], k: int) -> tuple[float | None, int, int, int]:
    """(recall@k, supported, unsupported, unjudged) over the claims (see
    :func:`claim_status_at_k`): recall@k = supported / (supported + unsupported), None when
    no claim is judged at k. An unjudged claim is never counted as unsupported."""
    counts = {"supported": 0, "unsupported": 0, "unjudged": 0}
    for claim in claims:
        counts[claim_status_at_k(claim, k)] += 1
    judged = counts["supported"] + counts["unsupported"]
    recall = counts["supported"] / judged if judged else None
    return recall, counts["supported"], counts["unsupported"], counts["unjudged"]
