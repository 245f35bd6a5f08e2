"""The one rule every reader of a labels file applies to a pair rated more than once: the
same (query, document) pair given again with the same rating is a harmless repeat and is
read once; given again with another rating it is an :class:`InputError` naming the file,
the later line, the earlier one and the rating's field. No reader keeps "the last line"
or "the first line" of a contradiction: a file that says two things about a pair is
refused before anything is stored or scored.

Used by the judgment lists' reader (TREC qrels, CSV, SRW, RRE:
:func:`judge.io.read_judgments`) and by the label files' reader of TREC qrels
(:func:`judge.store.read_label_lines`: ``judge labels import``, ``--labels FILE``, the
service's ``POST /v1/labels``)."""

from __future__ import annotations

from collections.abc import Hashable

from judge.io._errors import InputError

__all__ = ["RatedPairs"]


class RatedPairs:
    """The pairs of one file seen so far, with the line and rating each was first given."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._first: dict[tuple[str, str], tuple[int, Hashable]] = {}

    def first(self, query: str, docid: str, rating: Hashable, *, line: int, field: str) -> bool:
        """True when ``(query, docid)`` is met for the first time (read it), False for a
        repeat of the same rating (read it once: skip this one); an :class:`InputError` at
        ``line`` naming ``field`` and the first line when the rating differs. Ratings
        compare as values (``1`` and ``1.0`` are the same rating)."""
        key = (query, docid)
        seen = self._first.get(key)
        if seen is None:
            self._first[key] = (line, rating)
            return True
        at, before = seen
        if before == rating:
            return False
        shown = query if len(query) <= 60 else query[:60] + "..."
        raise InputError(
            f"docid {docid!r} of query {shown!r} is rated {rating} here and {before} at line {at}: "
            "a pair rated twice must have one rating (remove one of the two lines)",
            path=self.path,
            line=line,
            field=field,
        )
