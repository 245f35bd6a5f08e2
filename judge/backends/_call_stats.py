"""The call counters of a backend, as one record.

The same :class:`BackendStats` is the running tally inside
:class:`~judge.backends.ResilientBackend`, the snapshot it hands out as ``stats``, what a
Ray judging worker reports with each verdict, the workers' sum the Ray executor reports, and
the ``backend`` block of a run's summary (:meth:`BackendStats.as_dict`). A counter added here
reaches every one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["BackendStats"]


@dataclass(slots=True)
class BackendStats:
    """Counters of one backend wrapper (or the sum of several).

    ``requests``: ``complete()`` calls; ``calls``: provider calls made (attempts, so
    ``calls = requests + retries`` once all have finished); ``successes``/``failures``:
    requests that finally succeeded/failed; ``rate_limited``: 429 replies; ``timeouts``:
    attempts that ran past ``timeout_s``; tokens and ``cost`` (in ``currency``) from
    successful calls; ``unpriced_calls``: successes whose model is not in the price table.
    """

    requests: int = 0
    calls: int = 0
    successes: int = 0
    retries: int = 0
    rate_limited: int = 0
    timeouts: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    currency: str = "CNY"
    unpriced_calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @staticmethod
    def counters() -> tuple[str, ...]:
        """The names of the counting fields (every field but ``currency``)."""
        return _COUNTERS

    def add(self, other: BackendStats) -> None:
        """Count ``other``'s calls into this record (in place); the currency becomes
        ``other``'s (sums are only taken over backends that price alike)."""
        for name in _COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.currency = other.currency

    def merge(self, other: BackendStats) -> BackendStats:
        """The later of two snapshots of the same counters, field by field: counters only
        grow, so the larger value is the later one, whichever snapshot arrived first."""
        later = BackendStats(currency=other.currency)
        for name in _COUNTERS:
            setattr(later, name, max(getattr(self, name), getattr(other, name)))
        return later

    @classmethod
    def total(cls, parts: Iterable[BackendStats]) -> BackendStats:
        """The sum of an iterable of records (an empty one: all zero, ``CNY``)."""
        out = cls()
        for part in parts:
            out.add(part)
        return out

    def as_dict(self) -> dict[str, Any]:
        """Every field by name (``currency`` included), in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


_COUNTERS: tuple[str, ...] = tuple(f.name for f in fields(BackendStats) if f.name != "currency")
