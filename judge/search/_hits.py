"""What an engine returns and the protocol every engine follows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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
