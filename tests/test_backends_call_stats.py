"""BackendStats: the one record of a backend's call counters (add, merge, as_dict)."""

from __future__ import annotations

import pickle

import pytest

from judge.backends import BackendStats, ResilientBackend, ScriptedBackend, Usage
from judge.backends._base import ChatRequest, Message
from judge.backends._pricing import PriceTable

REQUEST = ChatRequest(messages=[Message(role="user", content="hi")])


def test_a_new_record_is_all_zero_and_lists_every_counter() -> None:
    s = BackendStats()
    assert s.as_dict() == {
        "requests": 0,
        "calls": 0,
        "successes": 0,
        "retries": 0,
        "rate_limited": 0,
        "timeouts": 0,
        "failures": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost": 0.0,
        "currency": "CNY",
        "unpriced_calls": 0,
    }
    assert BackendStats.counters() == tuple(k for k in s.as_dict() if k != "currency")
    assert s.total_tokens == 0


def test_add_sums_every_counter_unpriced_calls_included() -> None:
    a = BackendStats(
        requests=2, calls=3, successes=2, retries=1, prompt_tokens=10, cost=0.5, unpriced_calls=1
    )
    b = BackendStats(
        requests=1,
        calls=1,
        failures=1,
        rate_limited=4,
        timeouts=2,
        completion_tokens=7,
        cost=0.25,
        currency="USD",
        unpriced_calls=2,
    )
    a.add(b)
    assert a == BackendStats(
        requests=3,
        calls=4,
        successes=2,
        retries=1,
        rate_limited=4,
        timeouts=2,
        failures=1,
        prompt_tokens=10,
        completion_tokens=7,
        cost=0.75,
        currency="USD",
        unpriced_calls=3,
    )
    assert a.total_tokens == 17
    assert b.calls == 1  # the added record is left as it was


def test_total_of_none_is_zero_and_of_several_is_their_sum() -> None:
    assert BackendStats.total([]) == BackendStats()
    parts = [BackendStats(calls=i, unpriced_calls=i % 2, cost=i / 4) for i in (1, 2, 3)]
    assert BackendStats.total(parts) == BackendStats(calls=6, unpriced_calls=2, cost=1.5)


def test_merge_keeps_the_later_snapshot_whichever_arrives_first() -> None:
    earlier = BackendStats(requests=1, calls=2, retries=1, unpriced_calls=1, cost=0.1)
    later = BackendStats(
        requests=3, calls=4, retries=1, successes=3, unpriced_calls=3, cost=0.3, currency="USD"
    )
    assert earlier.merge(later) == later
    # out of order: the later one is kept field by field; currency is the arriving one's
    assert later.merge(earlier) == BackendStats(
        requests=3, calls=4, retries=1, successes=3, unpriced_calls=3, cost=0.3, currency="CNY"
    )
    assert earlier.calls == 2  # neither snapshot is changed


def test_a_record_pickles_as_ray_ships_it() -> None:
    s = BackendStats(calls=5, cost=1.25, currency="USD", unpriced_calls=4)
    assert pickle.loads(pickle.dumps(s)) == s


async def test_the_resilient_wrapper_counts_into_the_record_and_hands_out_snapshots() -> None:
    inner = ScriptedBackend(["a", "b"], name="fake:x", model="not-in-the-table", usage=Usage(100, 10))
    rb = ResilientBackend(inner, prices=PriceTable.from_mapping({}))
    await rb.complete(REQUEST)
    first = rb.stats
    await rb.complete(REQUEST)
    assert first == BackendStats(
        requests=1, calls=1, successes=1, prompt_tokens=100, completion_tokens=10, unpriced_calls=1
    )
    assert rb.stats.as_dict()["unpriced_calls"] == 2 and rb.stats.requests == 2
    first.calls = 99  # a snapshot is a copy: the wrapper's counters are its own
    assert rb.stats.calls == 2


@pytest.mark.parametrize("name", BackendStats.counters())
def test_each_counter_takes_part_in_add_and_merge(name: str) -> None:
    one = BackendStats()
    setattr(one, name, 1)
    two = BackendStats()
    two.add(one)
    two.add(one)
    assert getattr(two, name) == 2
    assert getattr(one.merge(two), name) == 2 and getattr(two.merge(one), name) == 2
