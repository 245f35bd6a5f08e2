"""Retries, timeouts, rate limiting and cost accounting, written once around any backend.

:class:`ResilientBackend` is itself a Backend (same ``name``/``model``/``params()`` as the
backend it wraps). For every request it

* waits for the shared :class:`AdaptiveLimiter` (a concurrency window plus optional
  requests-per-minute and tokens-per-minute buckets, all shared by every call through this
  wrapper);
* calls the inner backend under a per-call timeout (``asyncio.timeout``; expiry becomes a
  :class:`~judge.backends.TransientError`);
* retries with tenacity: :class:`TransientError` (timeouts, 5xx, dropped connections) after
  an exponential backoff with jitter; :class:`RateLimitError` after exactly its
  ``retry_after`` when the provider gave one (else the same backoff), and the whole client
  pauses until then and halves its concurrency window (AIMD: the window grows back by one
  after each window-full of successes). :class:`PermanentError` is never retried; other
  exceptions (bugs) propagate untouched;
* counts calls, retries, 429s, timeouts, failures, tokens and cost (from the API's usage
  fields priced by :class:`~judge.backends.PriceTable`) in :attr:`ResilientBackend.stats`,
  and returns the completion with ``cost`` and ``attempts`` filled in.

Nothing in here reads the wall clock directly: ``sleep`` and ``clock`` are injectable.
When only ``sleep`` is injected, the wrapper's clock advances by every injected sleep, so
tests run instantly and still see the waits they expect.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from judge.backends._base import (
    Backend,
    BackendError,
    ChatRequest,
    Completion,
    ConfigurationError,
    RateLimitError,
    TransientError,
    Usage,
)
from judge.backends._call_stats import BackendStats
from judge.backends._policy import LOCAL_TIMEOUT_S, REMOTE_TIMEOUT_S, CallPolicy
from judge.backends._pricing import ModelPrice, PriceTable
from judge.backends._redact import LOGGER, redact

__all__ = [
    "AdaptiveLimiter",
    "CallLimiter",
    "ResilientBackend",
    "ensure_resilient",
    "estimate_tokens",
]

SleepFn = Callable[[float], Awaitable[None]]
ClockFn = Callable[[], float]


class _WideChars(dict[int, int | None]):
    """A ``str.translate`` table that deletes wide (CJK) characters and keeps the rest.

    Filled lazily, one ``unicodedata.east_asian_width`` lookup per distinct character ever
    seen, so counting is C-speed: ``len(text) - len(text.translate(table))``."""

    def __missing__(self, code: int) -> int | None:
        value = None if unicodedata.east_asian_width(chr(code)) in ("W", "F") else code
        self[code] = value
        return value


_WIDE = _WideChars()


@functools.lru_cache(maxsize=256)
def _text_tokens(text: str) -> int:
    """One text's share of :func:`estimate_tokens` (cached: a template's system prompt is
    the same text in every request)."""
    wide = 0 if text.isascii() else len(text) - len(text.translate(_WIDE))
    return wide + -(-(len(text) - wide) // 4) + 4


def estimate_tokens(request: ChatRequest) -> int:
    """A cheap upper-side estimate of a request's tokens, for the tokens-per-minute bucket.

    Wide (CJK) characters count one token each, other text one token per 4 characters,
    plus 4 per message and ``max_tokens`` for the reply. Corrected with the real usage
    after the call.
    """
    total = sum(_text_tokens(m.content) for m in request.messages)
    if request.answer_prefix:
        total += _text_tokens(request.answer_prefix)
    return total + (request.max_tokens or 0)


class _TokenBucket:
    """``rate`` tokens per second, at most ``capacity`` banked; may go negative (debt)."""

    def __init__(self, per_minute: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate)  # at most one second's worth of burst
        self.tokens = self.capacity
        self._last: float | None = None

    def _refill(self, now: float) -> None:
        if self._last is not None and now > self._last:
            self.tokens = min(self.capacity, self.tokens + (now - self._last) * self.rate)
        if self._last is None or now > self._last:
            self._last = now

    def wait_time(self, amount: float, now: float) -> float:
        self._refill(now)
        need = min(amount, self.capacity)
        return 0.0 if self.tokens >= need else (need - self.tokens) / self.rate

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self.tokens -= amount

    def adjust(self, delta: float) -> None:
        """Charge ``delta`` more tokens (negative: refund)."""
        self.tokens = min(self.capacity, self.tokens - delta)


class AdaptiveLimiter:
    """Concurrency window (AIMD) + global pause + rpm/tpm buckets, shared by all callers.

    ``ceiling``: the most calls in flight (None: unbounded until the first 429). On a 429
    the window halves (from the peak number in flight when it was unbounded), once per
    congestion episode: calls that started before the last decrease do not halve it
    again. After ``window`` successes in a row it grows by one, up to the ceiling.
    ``pause_for(s)`` makes every new call wait until ``s`` seconds from now. Works across
    event loops (waiters are plain futures of the running loop).
    """

    def __init__(
        self,
        *,
        ceiling: int | None,
        rpm: float | None,
        tpm: float | None,
        clock: ClockFn,
        sleep: SleepFn,
    ) -> None:
        self.ceiling = ceiling
        self.limit: int | None = ceiling
        self.in_flight = 0
        self.peak_in_flight = 0  # most calls in flight since the window last changed
        self.epoch = 0
        self.resume_at = -math.inf
        self._successes = 0
        self._rpm = _TokenBucket(rpm) if rpm else None
        self._tpm = _TokenBucket(tpm) if tpm else None
        self._clock = clock
        self._sleep = sleep
        self._waiters: list[asyncio.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def _check_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A new event loop (e.g. another asyncio.run): calls of the old one are gone.
            self._loop = loop
            self._waiters = []
            self.in_flight = 0
        return loop

    async def acquire(self, tokens: int) -> int:
        """Wait for a slot, the pause and the buckets; return the congestion epoch."""
        loop = self._check_loop()
        while True:
            if self.limit is not None and self.in_flight >= self.limit:
                fut: asyncio.Future[None] = loop.create_future()
                self._waiters.append(fut)
                try:
                    await fut
                finally:
                    if fut in self._waiters:
                        self._waiters.remove(fut)
                continue
            now = self._clock()
            wait = self.resume_at - now
            if wait <= 0:
                wait = max(
                    self._rpm.wait_time(1, now) if self._rpm else 0.0,
                    self._tpm.wait_time(tokens, now) if self._tpm else 0.0,
                )
            if wait > 0:
                await self._sleep(wait)
                continue
            if self._rpm:
                self._rpm.take(1, now)
            if self._tpm:
                self._tpm.take(tokens, now)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            return self.epoch

    @property
    def counts_tokens(self) -> bool:
        """Whether :meth:`acquire`/:meth:`release` use token counts (a tpm bucket is set)."""
        return self._tpm is not None

    def release(self, estimate: int, actual_tokens: int | None) -> None:
        """End a call; correct the tpm bucket (``actual_tokens`` None: refund the estimate)."""
        self.in_flight = max(0, self.in_flight - 1)
        if self._tpm is not None:
            self._tpm.adjust((actual_tokens if actual_tokens is not None else 0) - estimate)
        self._wake()

    def _wake(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters = []

    def on_success(self) -> None:
        if self.limit is None:
            return
        self._successes += 1
        if self._successes >= self.limit:
            self._successes = 0
            if self.ceiling is None or self.limit < self.ceiling:
                self.limit += 1
                self._wake()

    def on_rate_limited(self, epoch: int) -> bool:
        """Halve the window unless this episode already did; True when it halved."""
        self._successes = 0
        if epoch < self.epoch:
            return False
        self.epoch += 1
        base = self.limit if self.limit is not None else self.peak_in_flight
        self.limit = max(1, base // 2)
        self.peak_in_flight = self.in_flight
        return True

    def pause_for(self, seconds: float) -> None:
        if seconds > 0:
            self.resume_at = max(self.resume_at, self._clock() + seconds)


class CallLimiter(Protocol):
    """What :class:`ResilientBackend` asks of its limiter (:class:`AdaptiveLimiter`'s
    methods). Another implementation may forward them elsewhere, e.g. to one limiter
    shared by every worker of a cluster (:mod:`judge.batch._ray`)."""

    @property
    def limit(self) -> int | None: ...

    @property
    def counts_tokens(self) -> bool: ...

    async def acquire(self, tokens: int) -> int: ...

    def release(self, estimate: int, actual_tokens: int | None) -> None: ...

    def on_success(self) -> None: ...

    def on_rate_limited(self, epoch: int) -> bool: ...

    def pause_for(self, seconds: float) -> None: ...


def default_timeout(backend: Backend) -> float:
    """Per-call timeout when none is given: 60 s for remote APIs, 600 s for a backend that
    serves one call at a time or queues its calls on one model (``queues_calls``: the
    embedded model, whose calls wait for each other and whose first call assembles and
    loads the model)."""
    if backend.max_concurrency == 1 or getattr(backend, "queues_calls", False):
        return LOCAL_TIMEOUT_S
    return REMOTE_TIMEOUT_S


class ResilientBackend:
    """Wrap ``inner`` with retries, timeout, adaptive rate limiting and accounting.

    Settings come from a :class:`~judge.backends.CallPolicy` (``policy=``; what
    :func:`~judge.backends.make_backend` passes, with the policy's defaults: 16 calls in
    flight, capped by the backend's own limit) or, for low-level use, from the same
    settings as keywords (validated by the same ``CallPolicy``, with the same meaning of
    None: ``concurrency=None`` is the policy's default, 16 capped by
    ``inner.max_concurrency``). ``max_retries``: retries after the first attempt (so at most
    ``max_retries + 1`` provider calls per request). ``timeout_s``: per attempt; None picks
    :func:`default_timeout`. ``rpm``/``tpm``: requests and tokens per minute (None:
    unlimited). ``prices``: default ``PriceTable.from_env()``; a backend with ``free =
    True`` (the embedded model) costs nothing whatever the table says. ``backoff_base_s``/
    ``backoff_max_s``: the retry wait is ``min(base * 2**(n-1) + U(0, base), max)`` before
    retry *n*. ``sleep`` and ``clock`` are injectable for tests.
    ``limiter``: use this limiter instead of a new
    :class:`AdaptiveLimiter` (``concurrency``, ``rpm`` and ``tpm`` are then the limiter's
    business): a limiter shared with other wrappers, e.g. across a Ray cluster.
    """

    def __init__(
        self,
        inner: Backend,
        *,
        policy: CallPolicy | None = None,
        max_retries: int | None = None,
        timeout_s: float | None = None,
        rpm: float | None = None,
        tpm: float | None = None,
        concurrency: int | None = None,
        prices: PriceTable | None = None,
        backoff_base_s: float | None = None,
        backoff_max_s: float | None = None,
        sleep: SleepFn = asyncio.sleep,
        clock: ClockFn | None = None,
        limiter: CallLimiter | None = None,
    ) -> None:
        if isinstance(inner, ResilientBackend):
            raise ConfigurationError("is already wrapped in ResilientBackend", field="backend")
        given: dict[str, Any] = {
            k: v
            for k, v in (
                ("max_retries", max_retries),
                ("timeout_s", timeout_s),
                ("rpm", rpm),
                ("tpm", tpm),
                ("concurrency", concurrency),
                ("prices", prices),
                ("backoff_base_s", backoff_base_s),
                ("backoff_max_s", backoff_max_s),
            )
            if v is not None
        }
        if policy is not None:
            if given:
                raise ConfigurationError(
                    f"and {', '.join(sorted(given))}= were both given: give one", field="policy"
                )
        else:
            policy = CallPolicy(**given)
        limit = policy.concurrency_for(inner)
        self.policy = policy
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.supports_probabilities = inner.supports_probabilities
        self.prefers_probabilities = bool(getattr(inner, "prefers_probabilities", False))
        self.free = bool(getattr(inner, "free", False))
        self.max_concurrency: int | None = limit
        self.max_retries = policy.max_retries
        self.timeout_s = policy.timeout_s if policy.timeout_s is not None else default_timeout(inner)
        self.prices = policy.price_table()
        self._inject_sleep = sleep
        self._skew = 0.0
        if clock is not None:
            self._clock: ClockFn = clock
        elif sleep is asyncio.sleep:
            self._clock = time.monotonic
        else:
            self._clock = lambda: time.monotonic() + self._skew
        self.limiter: CallLimiter = (
            limiter
            if limiter is not None
            else AdaptiveLimiter(
                ceiling=self.max_concurrency,
                rpm=policy.rpm,
                tpm=policy.tpm,
                clock=self._clock,
                sleep=self._sleep,
            )
        )
        self._backoff = _backoff(policy.backoff_base_s, policy.backoff_max_s)
        self._c = BackendStats()
        self._unpriced_warned: set[str] = set()
        self._price_cache: dict[str, ModelPrice | None] = {}
        self._price_cache_table: PriceTable | None = None

    def __repr__(self) -> str:
        return (
            f"ResilientBackend({self.inner!r}, max_retries={self.max_retries}, timeout_s={self.timeout_s:g})"
        )

    # -- Backend protocol -------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        return self.inner.params()

    @property
    def fingerprint(self) -> str:
        """The inner backend's :func:`~judge.backends._fingerprint.backend_fingerprint`."""
        from judge.backends._fingerprint import backend_fingerprint

        return backend_fingerprint(self.inner)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def complete(self, request: ChatRequest) -> Completion:
        self._c.requests += 1
        # Only a tokens-per-minute bucket reads the estimate.
        estimate = estimate_tokens(request) if self.limiter.counts_tokens else 0
        # Fast path: the first attempt runs outside tenacity (its per-request setup was about
        # a tenth of the client's CPU per passage). A TransientError hands over to tenacity,
        # which "replays" that failure as its attempt 1, so waits, before_sleep and the stop
        # rule see exactly the attempts they would have seen.
        try:
            return self._account(await self._attempt(request, estimate), 1)
        except TransientError as exc:
            first_failure: TransientError | None = exc
        except BackendError as exc:
            self._log_failure(1, exc)
            raise
        attempts = 1
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(TransientError),
            sleep=self._sleep,
            before_sleep=self._before_sleep,
            reraise=True,
        )
        completion: Completion | None = None
        try:
            async for attempt in retrying:
                with attempt:
                    if first_failure is not None:
                        failure, first_failure = first_failure, None
                        raise failure
                    attempts += 1
                    completion = await self._attempt(request, estimate)
        except BackendError as exc:
            self._log_failure(attempts, exc)
            raise
        if completion is None:  # tenacity ran no attempt: cannot happen with stop >= 1
            raise TransientError(f"{self.name}: no attempt was made")
        return self._account(completion, attempts)

    def _log_failure(self, attempts: int, exc: BackendError) -> None:
        self._c.failures += 1
        LOGGER.warning(
            "%s: request failed after %d attempt(s): %s: %s",
            self.name,
            attempts,
            type(exc).__name__,
            exc,
        )

    # -- accounting -------------------------------------------------------------------------

    @property
    def stats(self) -> BackendStats:
        """A snapshot of the counters (the wrapper keeps counting)."""
        return replace(self._c, currency=self.prices.currency)

    @property
    def currency(self) -> str:
        return self.prices.currency

    def cost_of(self, model: str, usage: Usage) -> float:
        """Cost of ``usage`` on ``model`` in :attr:`currency` (0.0 when unpriced)."""
        return self.prices.cost_of(model, usage)

    def _account(self, completion: Completion, attempts: int) -> Completion:
        c = self._c
        c.successes += 1
        c.prompt_tokens += completion.usage.prompt_tokens
        c.completion_tokens += completion.usage.completion_tokens
        if completion.cost is not None:
            cost = completion.cost  # the model reported its own cost (e.g. a deepeval model)
        elif self.free:
            cost = 0.0  # runs on this machine (the embedded judge): priced by the backend itself
        else:
            # Price what the provider says it ran, else what we asked for.
            model = completion.model or self.model
            if self._price_for(model) is None:
                model = self.model
            price = self._price_for(model)
            cost = price.cost(completion.usage) if price is not None else 0.0
            if price is None:
                c.unpriced_calls += 1
                if model not in self._unpriced_warned:
                    self._unpriced_warned.add(model)
                    LOGGER.info("%s: no price for model %r; its cost is counted as 0", self.name, model)
        c.cost += cost
        return replace(completion, cost=cost, attempts=attempts)

    def _price_for(self, model: str) -> ModelPrice | None:
        """``self.prices.price_for(model)``, memoised per table (a lookup of an unlisted
        model scans every key; the table is immutable, ``prices`` may be replaced)."""
        if self._price_cache_table is not self.prices or len(self._price_cache) >= 256:
            self._price_cache = {}
            self._price_cache_table = self.prices
        try:
            return self._price_cache[model]
        except KeyError:
            price = self._price_cache[model] = self.prices.price_for(model)
            return price

    # -- one attempt ------------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        await self._inject_sleep(seconds)
        if self._inject_sleep is not asyncio.sleep:
            self._skew += seconds

    async def _attempt(self, request: ChatRequest, estimate: int) -> Completion:
        epoch = await self.limiter.acquire(estimate)
        self._c.calls += 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        actual: int | None = None
        try:
            try:
                async with asyncio.timeout(self.timeout_s):
                    completion = await self.inner.complete(request)
            except TimeoutError:
                self._c.timeouts += 1
                raise TransientError(
                    f"{self.name}: no reply within {self.timeout_s:g} s (timeout_s)"
                ) from None
            except RateLimitError as exc:
                self._c.rate_limited += 1
                if self.limiter.on_rate_limited(epoch):
                    LOGGER.warning(
                        "%s: rate limited (HTTP 429); concurrency window now %s",
                        self.name,
                        self.limiter.limit,
                    )
                _redact_exception(exc)
                raise
            except BackendError as exc:
                _redact_exception(exc)
                raise
            # A backend that reports no usage keeps its estimate charged.
            actual = completion.usage.total_tokens or estimate
        finally:
            self.limiter.release(estimate, actual)
        self.limiter.on_success()
        if not completion.latency_s:
            completion = replace(completion, latency_s=loop.time() - started)
        return completion

    def _wait(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, RateLimitError) and exc.retry_after is not None:
            delay = max(0.0, float(exc.retry_after))
        else:
            delay = float(self._backoff(retry_state))
        if isinstance(exc, RateLimitError):
            self.limiter.pause_for(delay)
        return delay

    def _before_sleep(self, retry_state: RetryCallState) -> None:
        self._c.retries += 1
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        wait = retry_state.next_action.sleep if retry_state.next_action is not None else 0.0
        LOGGER.info(
            "%s: attempt %d failed (%s: %s); retrying in %.2f s",
            self.name,
            retry_state.attempt_number,
            type(exc).__name__,
            redact(str(exc)),
            wait,
        )


def _backoff(base_s: float, max_s: float) -> wait_exponential_jitter:
    """tenacity's ``min(base * 2**(n-1) + U(0, base), max)`` wait. Recent tenacity (9.2 here)
    names the base ``multiplier`` and deprecates ``initial`` (a DeprecationWarning for every
    wrapper); older releases (the project allows >= 8.2) only know ``initial``."""
    if "multiplier" in inspect.signature(wait_exponential_jitter).parameters:
        return wait_exponential_jitter(multiplier=base_s, max=max_s, jitter=base_s)
    return wait_exponential_jitter(initial=base_s, max=max_s, jitter=base_s)


def _redact_exception(exc: BaseException) -> None:
    if exc.args:
        exc.args = tuple(redact(a) if isinstance(a, str) else a for a in exc.args)


def ensure_resilient(backend: Backend, **options: Any) -> ResilientBackend:
    """``backend`` itself when it is already a ResilientBackend, else wrapped with ``options``
    (low level: entry points use :func:`~judge.backends.make_backend` and a CallPolicy)."""
    if isinstance(backend, ResilientBackend):
        return backend
    return ResilientBackend(backend, **options)
