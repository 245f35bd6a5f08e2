"""What an engine returns, the protocol every engine follows, and the rules every hit
passes whatever engine found it: :func:`make_hit` checks one hit (an id ``judge score``
takes, a text, a finite score), :func:`finish_hits` de-duplicates a ranking by id (keeping
the first) and cuts it at the configuration's depth."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from judge.io import id_problem, number_problem
from judge.search._search_errors import SearchError


@dataclass(frozen=True)
class Hit:
    """One result: the passage's id and text, and the engine's score when it gives one."""

    id: str
    text: str
    score: float | None = None


class Engine(Protocol):
    """A search engine behind a configuration. ``search`` raises
    :class:`~judge.search.TransientSearchError` for a failure worth retrying and
    :class:`~judge.search.SearchError` for one that is not (a bad mapping)."""

    async def search(self, query: str, depth: int) -> list[Hit]: ...

    async def version(self) -> str | None: ...

    async def stats(self) -> dict[str, Any]: ...

    def describe_request(self, query: str, depth: int) -> dict[str, Any]:
        """The request ``search(query, depth)`` sends, secrets redacted."""
        ...

    async def close(self) -> None: ...


def make_hit(
    i: int,
    hid: Any,
    text: Any,
    score: Any,
    *,
    path: str | None,
    field: str,
    text_field: str | None = None,
    score_field: str | None = None,
) -> Hit:
    """Hit ``i`` of an engine's answer, checked: the id a string or an integer that
    ``judge score`` accepts (not empty, no control character, not over ``MAX_ID_CHARS``),
    the text a string (a list is joined), the score absent or a finite number. A
    :class:`SearchError` naming ``field`` (``response.ids``, ``sql``, ``callable``...), or
    ``text_field`` / ``score_field`` for the text and the score when given."""
    if hid is None:
        raise SearchError(f"hit {i}: no id", path=path, field=field)
    if isinstance(hid, bool) or not isinstance(hid, str | int):
        raise SearchError(
            f"hit {i}: the id must be a string or an integer, got {_short(hid)}", path=path, field=field
        )
    hid = str(hid)
    problem = id_problem(hid)
    if problem is not None:
        raise SearchError(f"hit {i}: the id {problem}", path=path, field=field)
    if isinstance(text, list):
        text = " ".join(str(t) for t in text)
    if text is None:
        raise SearchError(f"hit {i}: no text", path=path, field=text_field or field)
    if not isinstance(text, str):
        raise SearchError(
            f"hit {i}: the text must be a string, got {_short(text)}", path=path, field=text_field or field
        )
    if score is None:
        return Hit(hid, text, None)
    problem = number_problem(score)
    if problem is not None:
        raise SearchError(f"hit {i} ({hid!r}): the score {problem}", path=path, field=score_field or field)
    return Hit(hid, text, float(score))


def finish_hits(hits: Sequence[Hit], depth: int) -> tuple[list[Hit], int, int]:
    """``hits`` without a repeated id (the first kept) and cut at ``depth``, with the
    number of duplicates dropped and the number of hits past ``depth`` dropped."""
    seen: set[str] = set()
    kept: list[Hit] = []
    duplicates = 0
    for hit in hits:
        if hit.id in seen:
            duplicates += 1
            continue
        seen.add(hit.id)
        kept.append(hit)
    return kept[:depth], duplicates, max(0, len(kept) - depth)


def _short(value: Any) -> str:
    text = type(value).__name__ if isinstance(value, dict | list | tuple) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
