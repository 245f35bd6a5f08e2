"""Redundancy of a ranked list: how much of the top k repeats a higher-ranked passage (no LLM).

Definition (``redundancy@k``):

1. **Cleaning.** HTML comments, ``<script>``/``<style>`` elements and tags are removed
   (each tag becomes a space), character entities are decoded (``&amp;`` -> ``&``), the text
   is NFKC-normalised (full-width forms become ASCII) and case-folded, and *all* whitespace
   is dropped, so highlighting markup (``<em>小狗</em>贫血``), line breaks and spacing never
   make two copies of a passage look different. A ``<`` not followed by a tag name
   (``a < b``) is text, not markup.
2. **Shingles.** The set of character 5-grams of the cleaned text. A cleaned text shorter than
   5 characters has one shingle, the text itself (so it nearly duplicates only an identical
   text); an empty one (e.g. markup only) has none.
3. **Near duplicate.** Passage i nearly duplicates passage j when the Jaccard similarity of
   their shingle sets is >= 0.8, compared exactly in rational arithmetic (a similarity of
   exactly 0.8 counts: ties at the threshold are duplicates). Two identical cleaned texts
   have similarity 1, empty ones included; an empty and a non-empty text have 0.
4. **redundancy@k** = (number of passages among the first ``n = min(k, len(passages))`` that
   nearly duplicate *some* higher-ranked passage) / n. Rank is list order (earlier = higher);
   of two copies the earlier one is the original and the later the duplicate, and a passage
   copying a duplicate is a duplicate too (each passage is compared with every passage
   above it). When fewer than k passages were retrieved the share is over the n there are
   (the list is not padded to k). An empty list has no redundancy (``None``).
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterable, Sequence
from fractions import Fraction

__all__ = [
    "REDUNDANCY_CONVENTIONS",
    "REDUNDANCY_NGRAM",
    "REDUNDANCY_THRESHOLD",
    "clean_passage",
    "duplicate_flags",
    "jaccard",
    "redundancy_at_k",
    "redundancy_by_k",
    "shingles",
]

REDUNDANCY_NGRAM = 5
REDUNDANCY_THRESHOLD = 0.8

REDUNDANCY_CONVENTIONS: dict[str, str] = {
    "definition": "share of the top-k passages that nearly duplicate a higher-ranked passage",
    "cleaning": "HTML tags, comments, script/style removed; entities decoded; NFKC; case-folded; "
    "whitespace dropped",
    "near_duplicate": "Jaccard of character 5-gram sets >= 0.8 (exactly 0.8 counts); a text under 5 "
    "characters is its own single shingle",
    "cutoff": "over the min(k, passages) retrieved; an empty list has none",
    "repeats": "over the list as retrieved: a passage judge score drops as a repeat of an earlier docno "
    "(the same id, or the same text without one) still counts at its rank (the record's dropped)",
    "mean": "over queries",
}

_DROP_ELEMENTS_RE = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)
_TAG_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9:_-]*(?:\s[^<>]*)?/?>|<![A-Za-z][^<>]*>")
_WHITESPACE_RE = re.compile(r"\s+")


def clean_passage(text: str) -> str:
    """The passage as compared: markup stripped, entities decoded, NFKC, case-folded, no whitespace."""
    text = _COMMENT_RE.sub(" ", text)
    text = _DROP_ELEMENTS_RE.sub(" ", text)
    text = _TAG_RE.sub(" ", text)
    text = unicodedata.normalize("NFKC", html.unescape(text)).casefold()
    return _WHITESPACE_RE.sub("", text)


def shingles(text: str, n: int = REDUNDANCY_NGRAM) -> frozenset[str]:
    """Character n-grams of an already cleaned text (the text itself when shorter than n)."""
    if n < 1:
        raise ValueError(f"n-gram size must be >= 1, got {n}")
    if len(text) < n:
        return frozenset((text,)) if text else frozenset()
    return frozenset(text[i : i + n] for i in range(len(text) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> Fraction:
    """|a & b| / |a | b| as an exact fraction; two empty sets are identical (1)."""
    union = len(a | b)
    return Fraction(1) if union == 0 else Fraction(len(a & b), union)


def _threshold(value: float) -> Fraction:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {value}")
    return Fraction(str(value))  # 0.8 is 4/5 exactly, not the binary double


def duplicate_flags(
    passages: Sequence[str], *, threshold: float = REDUNDANCY_THRESHOLD, n: int = REDUNDANCY_NGRAM
) -> list[bool]:
    """``flags[i]`` is True when passage i nearly duplicates some passage ranked above it."""
    limit = _threshold(threshold)
    cleaned = [clean_passage(p) for p in passages]
    sets = [shingles(c, n) for c in cleaned]
    flags: list[bool] = []
    for i, current in enumerate(sets):
        flags.append(any(cleaned[j] == cleaned[i] or jaccard(current, sets[j]) >= limit for j in range(i)))
    return flags


def redundancy_at_k(
    passages: Sequence[str], k: int, *, threshold: float = REDUNDANCY_THRESHOLD, n: int = REDUNDANCY_NGRAM
) -> float | None:
    """redundancy@k of one ranked list (``None`` for an empty list)."""
    return redundancy_by_k(passages, (k,), threshold=threshold, n=n)[str(k)]


def redundancy_by_k(
    passages: Sequence[str],
    ks: Iterable[int],
    *,
    threshold: float = REDUNDANCY_THRESHOLD,
    n: int = REDUNDANCY_NGRAM,
) -> dict[str, float | None]:
    """``{str(k): redundancy@k}`` for each cutoff, from one pass over the top max(k) passages."""
    cutoffs = list(ks)
    for k in cutoffs:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"cutoff must be a positive integer, got {k!r}")
    if isinstance(passages, str):
        raise TypeError("passages must be a list of strings, not one string")
    deepest = max(cutoffs, default=0)
    flags = duplicate_flags(passages[:deepest], threshold=threshold, n=n)
    out: dict[str, float | None] = {}
    for k in cutoffs:
        top = flags[:k]
        out[str(k)] = sum(top) / len(top) if top else None
    return out
