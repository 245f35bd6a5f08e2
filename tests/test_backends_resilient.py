"""ResilientBackend: retries, Retry-After, timeouts, AIMD rate limiting, buckets, accounting.

No real waiting: backoff sleeps go through injected fakes; only the timeout test waits
for a real 50 ms ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from judge.backends import (
    AdaptiveLimiter,
    Backend,
    BackendStats,
    ChatRequest,
    Completion,
    ConfigurationError,
    Message,
    PermanentError,
    PriceTable,
    RateLimitError,
    ResilientBackend,
    ScriptedBackend,
    TransientError,
    Usage,
    ensure_resilient,
    estimate_tokens,
)


def req(text: str = "q", **kw: object) -> ChatRequest:
    return ChatRequest(messages=(Message("user", text),), **kw)  # type: ignore[arg-type]


class AutoTime:
    """A sleep that returns at once (after yielding) and records what it was asked for."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class ManualTime:
    """Discrete-event time: sleepers wake only when the test advances the clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, fut))
        await fut

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for deadline, fut in list(self._sleepers):
            if deadline <= self.now + 1e-9 and not fut.done():
                fut.set_result(None)
                self._sleepers.remove((deadline, fut))
        for _ in range(20):
            await asyncio.sleep(0)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_fails_twice_then_succeeds_with_exponential_jittered_backoff() -> None:
    t = AutoTime()
    inner = ScriptedBackend([TransientError("a"), TransientError("b"), "ok"], model="qwen-plus")
    rb = ResilientBackend(inner, sleep=t.sleep, backoff_base_s=0.5, backoff_max_s=30)
    assert isinstance(rb, Backend)
    c = await rb.complete(req())
    assert c.text == "ok"
    assert c.attempts == 3
    assert inner.calls == 3
    # wait before retry n = 0.5 * 2**(n-1) + U(0, 0.5)
    assert len(t.sleeps) == 2
    assert 0.5 <= t.sleeps[0] <= 1.0
    assert 1.0 <= t.sleeps[1] <= 1.5
    s = rb.stats
    assert (s.requests, s.calls, s.successes, s.retries, s.failures) == (1, 3, 1, 2, 0)


async def test_backoff_is_capped() -> None:
    t = AutoTime()
    inner = ScriptedBackend([TransientError("x")] * 5 + ["ok"])
    rb = ResilientBackend(inner, sleep=t.sleep, backoff_base_s=1.0, backoff_max_s=3.0)
    await rb.complete(req())
    assert t.sleeps[2:] == [3.0, 3.0, 3.0]


async def test_rate_limit_waits_exactly_retry_after() -> None:
    t = AutoTime()
    inner = ScriptedBackend([RateLimitError("slow down", retry_after=2.5), "ok"])
    rb = ResilientBackend(inner, sleep=t.sleep, concurrency=4)
    c = await rb.complete(req())
    assert c.text == "ok"
    assert t.sleeps == [2.5]
    assert rb.stats.rate_limited == 1
    assert rb.stats.retries == 1
    assert rb.limiter.limit == 2  # the window halved from 4


async def test_rate_limit_pauses_every_caller_until_retry_after() -> None:
    t = ManualTime()
    inner = ScriptedBackend(lambda r, i: RateLimitError("429", retry_after=3.0) if i == 0 else f"ok{i}")
    rb = ResilientBackend(inner, sleep=t.sleep, clock=t.clock, concurrency=4)
    a = asyncio.create_task(rb.complete(req("a")))
    await settle()
    assert t.sleeps == [3.0]  # A waits its Retry-After
    b = asyncio.create_task(rb.complete(req("b")))
    await settle()
    assert t.sleeps == [3.0, 3.0]  # B, started after the 429, is paused as well
    assert inner.calls == 1  # ... and has not reached the provider
    await t.advance(1.0)
    assert not a.done() and not b.done()
    await t.advance(2.0)
    ra, rb_ = await asyncio.gather(a, b)
    assert {ra.text, rb_.text} == {"ok1", "ok2"}
    assert inner.calls == 3


async def test_rate_limit_without_retry_after_uses_backoff_and_pauses() -> None:
    t = AutoTime()
    inner = ScriptedBackend([RateLimitError("429"), "ok"])
    rb = ResilientBackend(inner, sleep=t.sleep, backoff_base_s=0.5)
    await rb.complete(req())
    assert len(t.sleeps) == 1 and 0.5 <= t.sleeps[0] <= 1.0


async def test_timeout_is_retried() -> None:
    t = AutoTime()
    inner = ScriptedBackend(lambda r, i: f"ok{i}", latency_s=lambda r, i: 30.0 if i == 0 else 0.0)
    rb = ResilientBackend(inner, timeout_s=0.05, sleep=t.sleep)
    c = await rb.complete(req())
    assert c.text == "ok1"
    assert c.attempts == 2
    s = rb.stats
    assert (s.timeouts, s.retries, s.calls, s.successes) == (1, 1, 2, 1)


async def test_timeout_exhausting_retries_raises_transient() -> None:
    inner = ScriptedBackend(lambda r, i: "never", latency_s=30.0)
    rb = ResilientBackend(inner, timeout_s=0.02, max_retries=1, sleep=AutoTime().sleep)
    with pytest.raises(TransientError, match=r"no reply within 0\.02 s"):
        await rb.complete(req())
    assert rb.stats.timeouts == 2 and rb.stats.failures == 1


async def test_permanent_error_is_never_retried() -> None:
    t = AutoTime()
    inner = ScriptedBackend([PermanentError("bad request"), "ok"])
    rb = ResilientBackend(inner, sleep=t.sleep)
    with pytest.raises(PermanentError, match="bad request"):
        await rb.complete(req())
    assert inner.calls == 1
    assert t.sleeps == []
    assert rb.stats.failures == 1 and rb.stats.retries == 0


async def test_retries_are_bounded() -> None:
    inner = ScriptedBackend([TransientError("x")] * 10)
    rb = ResilientBackend(inner, max_retries=2, sleep=AutoTime().sleep)
    with pytest.raises(TransientError):
        await rb.complete(req())
    assert inner.calls == 3
    assert rb.stats == BackendStats(requests=1, calls=3, retries=2, failures=1)


async def test_max_retries_zero_means_one_attempt() -> None:
    inner = ScriptedBackend([TransientError("x"), "ok"])
    rb = ResilientBackend(inner, max_retries=0, sleep=AutoTime().sleep)
    with pytest.raises(TransientError):
        await rb.complete(req())
    assert inner.calls == 1


async def test_bugs_propagate_unchanged_and_unretried() -> None:
    inner = ScriptedBackend([ValueError("a bug"), "ok"])
    rb = ResilientBackend(inner, sleep=AutoTime().sleep)
    with pytest.raises(ValueError, match="a bug"):
        await rb.complete(req())
    assert inner.calls == 1


async def test_concurrency_window_is_respected() -> None:
    t = AutoTime()
    inner = ScriptedBackend(lambda r, i: "ok", latency_s=1.0, sleep=t.sleep)
    rb = ResilientBackend(inner, concurrency=3, sleep=t.sleep)
    results = await asyncio.gather(*(rb.complete(req(str(i))) for i in range(10)))
    assert len(results) == 10
    assert inner.max_in_flight == 3


async def test_aimd_halves_on_429_then_recovers_one_per_window() -> None:
    t = AutoTime()
    inner = ScriptedBackend(lambda r, i: RateLimitError("429", retry_after=1.0) if i == 0 else "ok")
    rb = ResilientBackend(inner, concurrency=8, sleep=t.sleep)
    assert rb.limiter.limit == 8
    await rb.complete(req())  # 429 -> window 4, then the retry succeeds (1 success)
    trajectory = [rb.limiter.limit]
    for _ in range(30):
        await rb.complete(req())
        trajectory.append(rb.limiter.limit)
    # +1 after each window-full of successes: 4 successes at 4, 5 at 5, 6 at 6, 7 at 7.
    assert trajectory[:4] == [4, 4, 4, 5]
    assert trajectory.index(6) == 8
    assert trajectory.index(7) == 14
    assert trajectory.index(8) == 21
    assert trajectory[-1] == 8  # never above the ceiling


async def test_slowed_window_limits_parallel_calls() -> None:
    t = AutoTime()
    inner = ScriptedBackend(
        lambda r, i: RateLimitError("429", retry_after=0.5) if i == 0 else "ok",
        latency_s=lambda r, i: 0.0 if i == 0 else 1.0,
        sleep=t.sleep,
    )
    rb = ResilientBackend(inner, concurrency=8, sleep=t.sleep)
    await rb.complete(req())
    assert rb.limiter.limit == 4
    inner.max_in_flight = 0
    await asyncio.gather(*(rb.complete(req()) for _ in range(12)))
    assert inner.max_in_flight <= 5  # the window is 4 and grows by one after 4 successes
    assert inner.max_in_flight >= 4


async def test_one_episode_halves_once() -> None:
    t = ManualTime()
    inner = ScriptedBackend(
        lambda r, i: RateLimitError("429") if i < 4 else "ok", latency_s=1.0, sleep=t.sleep
    )
    rb = ResilientBackend(inner, concurrency=8, sleep=t.sleep, clock=t.clock)
    tasks = [asyncio.create_task(rb.complete(req())) for _ in range(4)]
    await settle()
    await t.advance(1.0)  # all four started before the first 429 comes back
    assert rb.limiter.limit == 4  # halved once, not 8 -> 4 -> 2 -> 1 -> 1
    for _ in range(10):
        await t.advance(1.0)
    await asyncio.gather(*tasks)


async def test_unbounded_window_set_by_first_429() -> None:
    t = ManualTime()
    inner = ScriptedBackend(
        lambda r, i: RateLimitError("429") if i == 5 else "ok", latency_s=1.0, sleep=t.sleep
    )
    # concurrency=None is the call policy's default (16): an unbounded window is a limiter
    # without a ceiling, given explicitly.
    unbounded = AdaptiveLimiter(ceiling=None, rpm=None, tpm=None, clock=t.clock, sleep=t.sleep)
    rb = ResilientBackend(inner, sleep=t.sleep, clock=t.clock, limiter=unbounded)
    assert rb.limiter.limit is None
    tasks = [asyncio.create_task(rb.complete(req())) for _ in range(6)]
    await settle()
    await t.advance(1.0)
    assert rb.limiter.limit == 3  # 6 in flight when the 429 came back
    for _ in range(10):
        await t.advance(1.0)
    await asyncio.gather(*tasks)


async def test_rpm_bucket_spaces_calls() -> None:
    t = AutoTime()
    inner = ScriptedBackend(lambda r, i: "ok")
    rb = ResilientBackend(inner, rpm=60, sleep=t.sleep, clock=t.clock)
    for _ in range(3):
        await rb.complete(req())
    assert t.sleeps == [pytest.approx(1.0), pytest.approx(1.0)]


async def test_tpm_bucket_uses_estimate_then_corrects_with_usage() -> None:
    t = AutoTime()
    request = req("x" * 40)  # estimate: 40/4 + 4 = 14 tokens
    assert estimate_tokens(request) == 14
    inner = ScriptedBackend(lambda r, i: "ok", usage=Usage(5, 5))  # real: 10 tokens
    rb = ResilientBackend(inner, tpm=600, sleep=t.sleep, clock=t.clock)  # 10 tokens/s, burst 10
    await rb.complete(request)
    await rb.complete(request)
    # after the first call the bucket holds 10 - 14 + (14 - 10) = 0: one second to refill
    # 10 tokens (1.4 s had the estimate not been corrected)
    assert t.sleeps == [pytest.approx(1.0)]


def test_estimate_tokens_counts_cjk_per_character() -> None:
    r = ChatRequest(messages=(Message("system", "abcd" * 3), Message("user", "小狗贫血")), max_tokens=8)
    assert estimate_tokens(r) == (3 + 4) + (4 + 4) + 8


async def test_cost_accounting_from_usage() -> None:
    inner = ScriptedBackend(["a", "b"], model="qwen-plus", usage=Usage(1000, 500))
    rb = ResilientBackend(inner, sleep=AutoTime().sleep, prices=PriceTable.default())
    c = await rb.complete(req())
    # qwen-plus: 0.8 CNY / 1M input, 2.0 CNY / 1M output
    assert c.cost == pytest.approx((1000 * 0.8 + 500 * 2.0) / 1e6)
    await rb.complete(req())
    s = rb.stats
    assert s.cost == pytest.approx(0.0036)
    assert (s.prompt_tokens, s.completion_tokens, s.total_tokens) == (2000, 1000, 3000)
    assert s.currency == "CNY"
    assert rb.cost_of("qwen-max", Usage(1_000_000, 0)) == pytest.approx(2.4)


async def test_cost_with_user_prices_and_unpriced_models() -> None:
    prices = PriceTable.from_mapping({"scripted": {"input_per_1k": 0.002, "output_per_1k": 0.006}})
    rb = ResilientBackend(ScriptedBackend(["ab"], usage=Usage(500, 100)), prices=prices)
    c = await rb.complete(req())
    assert c.cost == pytest.approx(500 * 0.002 / 1000 + 100 * 0.006 / 1000)
    unpriced = ResilientBackend(ScriptedBackend(["ab"], model="mystery"), prices=PriceTable.default())
    c = await unpriced.complete(req())
    assert c.cost == 0.0
    assert unpriced.stats.unpriced_calls == 1


async def test_reported_cost_wins_over_price_table() -> None:
    inner = ScriptedBackend([Completion("x", usage=Usage(10, 10), model="qwen-plus", cost=0.5)])
    rb = ResilientBackend(inner, prices=PriceTable.default())
    c = await rb.complete(req())
    assert c.cost == 0.5 and rb.stats.cost == 0.5


async def test_wrapper_mirrors_inner() -> None:
    inner = ScriptedBackend(["x"], name="fake:a", model="m", params={"p": 1}, max_concurrency=2)
    rb = ResilientBackend(inner)
    assert (rb.name, rb.model, rb.params(), rb.max_concurrency) == ("fake:a", "m", {"p": 1}, 2)
    assert rb.supports_probabilities is True
    assert ensure_resilient(rb) is rb
    assert ensure_resilient(inner).inner is inner
    await rb.aclose()
    assert inner.closed
    with pytest.raises(ConfigurationError):
        ResilientBackend(rb)
    with pytest.raises(ConfigurationError):
        ResilientBackend(inner, concurrency=0)
    with pytest.raises(ConfigurationError):
        ResilientBackend(inner, rpm=-1)


def test_usable_across_event_loops() -> None:
    inner = ScriptedBackend(lambda r, i: f"r{i}")
    rb = ResilientBackend(inner, concurrency=2)
    assert asyncio.run(rb.complete(req())).text == "r0"
    assert asyncio.run(rb.complete(req())).text == "r1"


async def test_retries_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    inner = ScriptedBackend([TransientError("HTTP 503: busy"), "ok"])
    rb = ResilientBackend(inner, sleep=AutoTime().sleep)
    with caplog.at_level(logging.INFO, logger="judge.backends"):
        await rb.complete(req())
    messages = [r.getMessage() for r in caplog.records if r.name == "judge.backends"]
    assert any("attempt 1 failed (TransientError: HTTP 503: busy); retrying in" in m for m in messages)


def test_a_backend_that_queues_calls_on_one_model_gets_the_local_timeout() -> None:
    """The embedded judge keeps several calls in flight (batched reasons) but they wait for
    each other on one model: the long local timeout, not the remote API's."""
    from judge.backends._resilient import LOCAL_TIMEOUT_S, REMOTE_TIMEOUT_S, default_timeout

    class Remote:
        max_concurrency: int | None = 8

    class Queued(Remote):
        queues_calls = True

    class Single(Remote):
        max_concurrency = 1

    assert default_timeout(Remote()) == REMOTE_TIMEOUT_S  # type: ignore[arg-type]
    assert default_timeout(Queued()) == LOCAL_TIMEOUT_S  # type: ignore[arg-type]
    assert default_timeout(Single()) == LOCAL_TIMEOUT_S  # type: ignore[arg-type]
