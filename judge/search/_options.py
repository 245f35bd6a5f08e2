"""How a run talks to its engine: requests in flight, timeout, retries, rate."""

from __future__ import annotations

import math
from dataclasses import dataclass

from judge.search._search_errors import SearchError

DEFAULT_SEARCH_CONCURRENCY = 8
DEFAULT_SEARCH_TIMEOUT_S = 30.0
DEFAULT_SEARCH_RETRIES = 3
DEFAULT_BACKOFF_S = 0.5
MAX_BACKOFF_S = 10.0


@dataclass(frozen=True)
class SearchOptions:
    """``concurrency``: queries in flight (default 8). ``timeout_s``: one request's limit in
    seconds (default 30). ``max_retries``: retries after the first attempt, on transient
    errors only (timeouts, refused connections, HTTP 429 and 5xx; default 3), with
    exponential backoff from ``backoff_s`` (default 0.5 s) capped at 10 s. ``rate_limit``:
    requests per second at most (default None: unlimited)."""

    concurrency: int = DEFAULT_SEARCH_CONCURRENCY
    timeout_s: float = DEFAULT_SEARCH_TIMEOUT_S
    max_retries: int = DEFAULT_SEARCH_RETRIES
    rate_limit: float | None = None
    backoff_s: float = DEFAULT_BACKOFF_S

    def __post_init__(self) -> None:
        if (
            isinstance(self.concurrency, bool)
            or not isinstance(self.concurrency, int)
            or not 1 <= self.concurrency <= 1024
        ):
            raise SearchError(
                f"must be an integer from 1 to 1024, got {self.concurrency!r}", field="concurrency"
            )
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or not 0 <= self.max_retries <= 100
        ):
            raise SearchError(
                f"must be an integer from 0 to 100, got {self.max_retries!r}", field="max_retries"
            )
        _positive(self.timeout_s, "timeout_s")
        _positive(self.backoff_s, "backoff_s", zero_ok=True)
        if self.rate_limit is not None:
            _positive(self.rate_limit, "rate_limit")


def _positive(value: object, name: str, *, zero_ok: bool = False) -> None:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value >= 0 if zero_ok else value > 0)
    )
    if not ok:
        bound = ">= 0" if zero_ok else "> 0"
        raise SearchError(f"must be a finite number {bound}, got {value!r}", field=name)
