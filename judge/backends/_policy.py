"""One call policy: how every provider call is made, whoever makes it.

:class:`CallPolicy` holds the settings of the resilience layer (calls in flight, per-call
timeout, retries, rate limits, price overrides). It is validated once, here, with errors
that name the field (:class:`~judge.backends.ConfigurationError` with ``field=``), and
it is the only place where the call defaults live (the run's other defaults, workers and
window, are in :mod:`judge.batch`'s ``RunSpec``). ``None`` always means "not given: the
default below", whoever passes it (a CLI flag left out, a server option, a Python keyword,
``ResilientBackend(concurrency=None)``):

* ``concurrency`` None -> ``min(DEFAULT_CONCURRENCY, backend.max_concurrency)``: 16 calls
  in flight for a remote API, 1 for the embedded model. This is the one cap on concurrency:
  :class:`~judge.backends.ResilientBackend` enforces it (with AIMD on 429s) and every layer
  above reads it from ``backend.max_concurrency`` instead of keeping its own default;
* ``timeout_s`` None -> :data:`REMOTE_TIMEOUT_S` (60 s) for a remote API,
  :data:`LOCAL_TIMEOUT_S` (600 s) for a one-call-at-a-time backend
  (:func:`~judge.backends._resilient.default_timeout`);
* ``max_retries`` :data:`DEFAULT_MAX_RETRIES` (5; a builder given None leaves it at that);
  ``rpm``/``tpm`` None (unlimited);
* ``prices`` None -> ``PriceTable.from_env()``; else a :class:`PriceTable`, a mapping laid
  over the default table (the ``from_mapping`` format) or a JSON file path.

:func:`make_backend` (in :mod:`judge.backends._resolve`) applies a policy to a resolved
backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from judge.backends._base import ConfigurationError
from judge.backends._pricing import PriceTable

if TYPE_CHECKING:
    from judge.backends._base import Backend

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_MAX_RETRIES", "LOCAL_TIMEOUT_S", "REMOTE_TIMEOUT_S", "CallPolicy"]

#: Calls in flight when nobody says otherwise (capped by the backend's own limit).
DEFAULT_CONCURRENCY = 16
#: Retries after the first attempt (so at most 6 provider calls per request).
DEFAULT_MAX_RETRIES = 5
#: Seconds per attempt for a remote API when nobody says otherwise.
REMOTE_TIMEOUT_S = 60.0
#: Seconds per attempt for a backend that serves one call at a time (the embedded model).
LOCAL_TIMEOUT_S = 600.0


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class CallPolicy:
    """How provider calls are made (see the module docstring for the defaults).

    ``concurrency``: most calls in flight (None: the default above). ``timeout_s``: seconds
    per attempt. ``max_retries``: retries after a transient failure (timeouts, 5xx, 429).
    ``rpm``/``tpm``: requests/tokens per minute. ``prices``: price overrides.
    ``backoff_base_s``/``backoff_max_s``: the retry wait is
    ``min(base * 2**(n-1) + U(0, base), max)`` before retry *n*.
    """

    concurrency: int | None = None
    timeout_s: float | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    rpm: float | None = None
    tpm: float | None = None
    prices: PriceTable | Mapping[str, Any] | str | Path | None = None
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        c = self.concurrency
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ConfigurationError(f"must be an integer >= 1, got {c!r}", field="concurrency")
        if self.timeout_s is not None and not (_number(self.timeout_s) and self.timeout_s > 0):
            raise ConfigurationError(f"must be a number > 0, got {self.timeout_s!r}", field="timeout_s")
        r = self.max_retries
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ConfigurationError(f"must be an integer >= 0, got {r!r}", field="max_retries")
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and not (_number(value) and value > 0):
                raise ConfigurationError(f"must be a number > 0, got {value!r}", field=name)
        for name in ("backoff_base_s", "backoff_max_s"):
            value = getattr(self, name)
            if not (_number(value) and value >= 0):
                raise ConfigurationError(f"must be a number >= 0, got {value!r}", field=name)
        p = self.prices
        if p is not None and not isinstance(p, PriceTable | Mapping | str | Path):
            raise ConfigurationError(
                f"must be a PriceTable, a mapping or a JSON file path, got {type(p).__name__}",
                field="prices",
            )

    def ceiling(self) -> int:
        """Calls in flight whatever the backend: ``concurrency``, else the default."""
        return self.concurrency if self.concurrency is not None else DEFAULT_CONCURRENCY

    def concurrency_for(self, backend: Backend) -> int:
        """Calls in flight for ``backend``: :meth:`ceiling`, never more than the backend
        can serve (``backend.max_concurrency``)."""
        limit = backend.max_concurrency
        return self.ceiling() if limit is None else min(self.ceiling(), limit)

    def price_table(self) -> PriceTable:
        """The price table in force (``prices`` resolved; None -> ``PriceTable.from_env()``)."""
        p = self.prices
        if p is None:
            return PriceTable.from_env()
        if isinstance(p, PriceTable):
            return p
        if isinstance(p, str | Path):
            return PriceTable.from_json(p)
        return PriceTable.from_mapping(p)
