"""The batch driver (plan -> execute -> commit) with a fake executor and a dict store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from judge.backends._base import PermanentError
from judge.backends._fake import RuleBackend
from judge.batch import (
    BatchDriver,
    Executor,
    FanOutExecutor,
    FeedPlan,
    LocalExecutor,
    PassageJob,
    QueryWork,
    cache_keys,
)
from judge.judging import JudgeConfig, Passage, resolve_config
from judge.judging._models import PassageVerdict

BACKEND = RuleBackend.keyword("RELEVANT")
CONFIG = resolve_config(JudgeConfig(), BACKEND)
KEYS = cache_keys(BACKEND, CONFIG)


def _verdict(index: int, label: str, *, reason: str = "fake") -> PassageVerdict:
    return PassageVerdict(
        index=index,
        verdict=label,  # type: ignore[arg-type]
        reason=reason,
        template_id="fake",
        template_hash="fake",
        backend="fake",
        error="no reply" if label == "unjudged" else None,
    )


class DictStore:
    def __init__(self) -> None:
        self.data: dict[str, PassageVerdict] = {}
        self.puts: list[str] = []

    async def get(self, key: str) -> PassageVerdict | None:
        return self.data.get(key)

    async def put(self, key: str, verdict: PassageVerdict) -> None:
        self.puts.append(key)
        self.data[key] = verdict


class FakeExecutor(FanOutExecutor):
    """Judges by text: ``yes`` if it contains RELEVANT, ``unjudged`` if it contains FAIL,
    else ``no``; records every job it is given and how many queries it holds at once."""

    def __init__(self, delay: float = 0.0, delays: dict[str, float] | None = None) -> None:
        self.seen: list[tuple[str, list[int]]] = []
        self.delay = delay
        self.delays = delays or {}
        self.active = 0
        self.peak = 0

    @property
    def name(self) -> str:
        return "fake"

    async def judge(
        self, query: str, jobs: Sequence[PassageJob], *args: Any, **kw: Any
    ) -> list[PassageVerdict]:
        self.seen.append((query, [j.index for j in jobs]))
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(self.delays.get(query, self.delay))
            return await super().judge(query, jobs, *args, **kw)
        finally:
            self.active -= 1

    async def judge_one(self, query: str, job: PassageJob, config: JudgeConfig) -> PassageVerdict:
        text = job.passage.text
        return _verdict(job.index, "unjudged" if "FAIL" in text else ("yes" if "RELEVANT" in text else "no"))

    async def judge_list(
        self, query: str, passages: list[Passage], config: JudgeConfig, template: str | None
    ) -> list[PassageVerdict]:
        raise NotImplementedError("the driver tests judge pointwise")


def test_the_fake_and_the_local_executor_fill_the_seam() -> None:
    assert isinstance(FakeExecutor(), Executor)
    assert isinstance(LocalExecutor(BACKEND), Executor)


async def test_plan_skips_store_hits_and_commit_stores_only_judged_verdicts() -> None:
    store = DictStore()
    cached = _verdict(7, "yes", reason="from an earlier run")
    store.data[KEYS("q", "b")] = cached
    executor = FakeExecutor()
    driver = BatchDriver(executor, CONFIG, store=store, keys=KEYS)
    committed: list[tuple[Any, list[PassageVerdict]]] = []

    async def commit(work: QueryWork, verdicts: list[PassageVerdict]) -> None:
        committed.append((work.payload, verdicts))

    work = QueryWork.fresh("q", [Passage("RELEVANT a"), Passage("b", id="d2"), Passage("FAIL c")], "p")
    stats = await driver.run([work], commit)
    # the hit never reached the executor
    assert executor.seen == [("q", [0, 2])]
    [(payload, verdicts)] = committed
    assert payload == "p"
    assert [v.verdict for v in verdicts] == ["yes", "yes", "unjudged"]
    assert [v.index for v in verdicts] == [0, 1, 2]
    hit = verdicts[1]
    assert hit.cached and hit.reason == "from an earlier run" and hit.passage_id == "d2"
    # only the judged miss was stored; the unjudged one and the hit were not
    assert store.puts == [KEYS("q", "RELEVANT a")]
    assert (stats.queries, stats.passages, stats.cached, stats.asked, stats.unjudged) == (1, 3, 1, 2, 1)
    # a second run asks only for the passage that is still unjudged
    executor.seen.clear()
    await driver.run([work], commit)
    assert executor.seen == [("q", [2])]


async def test_known_verdicts_are_merged_and_passthrough_works_need_no_executor() -> None:
    executor = FakeExecutor()
    driver = BatchDriver(executor, CONFIG)
    got: list[list[str]] = []

    async def commit(work: QueryWork, verdicts: list[PassageVerdict]) -> None:
        got.append([v.verdict for v in verdicts])

    retry = QueryWork(
        "q", [PassageJob(1, Passage("RELEVANT x"))], [_verdict(0, "no"), None, _verdict(2, "no")]
    )
    passthrough = QueryWork("", [])
    await driver.run([retry, passthrough], commit, ordered=True)
    assert got == [["no", "yes", "no"], []]
    assert executor.seen == [("q", [1])]


async def test_queries_in_flight_are_bounded_and_the_plan_is_read_lazily() -> None:
    executor = FakeExecutor(delay=0.005)
    driver = BatchDriver(executor, CONFIG, max_queries=3)
    planned = 0
    gaps: list[int] = []
    committed = 0

    def plan() -> Iterator[QueryWork]:
        nonlocal planned
        for i in range(20):
            planned += 1
            gaps.append(planned - committed)
            yield QueryWork.fresh(f"q{i}", [Passage("a"), Passage("b")])

    async def commit(work: QueryWork, verdicts: list[PassageVerdict]) -> None:
        nonlocal committed
        committed += 1

    await driver.run(plan(), commit)
    assert committed == 20
    assert executor.peak == 3  # concurrent, and never more than max_queries
    assert max(gaps) == 3  # the plan is never read further ahead than the bound


async def test_ordered_commits_follow_the_plan_even_when_later_queries_finish_first() -> None:
    delays = {"q0": 0.03, "q1": 0.0, "q2": 0.01, "q3": 0.0}
    driver = BatchDriver(FakeExecutor(delays=delays), CONFIG, max_queries=4)
    order: list[str] = []

    async def commit(work: QueryWork, verdicts: list[PassageVerdict]) -> None:
        order.append(work.query)

    works = [QueryWork.fresh(q, [Passage("a")]) for q in delays]
    await driver.run(works, commit, ordered=True)
    assert order == ["q0", "q1", "q2", "q3"]
    order.clear()
    await driver.run(works, commit)
    assert order[0] != "q0"  # unordered: completion order


async def test_a_permanent_error_stops_the_run_and_propagates_as_itself() -> None:
    class Broken(FakeExecutor):
        async def judge(self, query: str, jobs: Sequence[PassageJob], *args: Any, **kw: Any) -> Any:
            if query == "q2":
                raise PermanentError("HTTP 401")
            return await super().judge(query, jobs, *args, **kw)

    driver = BatchDriver(Broken(), CONFIG, max_queries=1)
    committed: list[str] = []

    async def commit(work: QueryWork, verdicts: list[PassageVerdict]) -> None:
        committed.append(work.query)

    with pytest.raises(PermanentError, match="401"):
        await driver.run([QueryWork.fresh(f"q{i}", [Passage("a")]) for i in range(5)], commit)
    assert committed == ["q0", "q1"]


def test_a_store_needs_its_keys() -> None:
    with pytest.raises(ValueError, match="key function"):
        BatchDriver(FakeExecutor(), CONFIG, store=DictStore())


def test_listwise_keys_differ_from_pointwise_keys() -> None:
    listwise = cache_keys(BACKEND, CONFIG, listwise=True)
    assert listwise("q", "p") != KEYS("q", "p")
    assert listwise("q", "p") == cache_keys(BACKEND, CONFIG, listwise=True)("q", "p")


async def test_collect_returns_each_works_verdicts_in_plan_order() -> None:
    delays = {"slow": 0.02, "fast": 0.0}
    driver = BatchDriver(FakeExecutor(delays=delays), CONFIG, max_queries=2)
    got = await driver.collect(
        [
            QueryWork.fresh("slow", [Passage("RELEVANT a")]),
            QueryWork.fresh("fast", [Passage("b"), Passage("c")]),
        ]
    )
    assert [[v.verdict for v in verdicts] for verdicts in got] == [["yes"], ["no", "no"]]


async def test_a_feed_plan_takes_queries_while_the_driver_runs() -> None:
    store = DictStore()
    executor = FakeExecutor(delay=0.001)
    driver = BatchDriver(executor, CONFIG, store=store, keys=KEYS, max_queries=2)
    feed = FeedPlan()
    runner = asyncio.create_task(driver.run(feed, feed.commit))
    first = await feed.submit("q", ["RELEVANT a", "b"])
    assert [v.verdict for v in first] == ["yes", "no"]
    # submitted later, while the driver is still running: served from the store
    both = await asyncio.gather(feed.submit("q", ["b"]), feed.submit("q2", [Passage("FAIL x")]))
    assert both[0][0].cached and both[1][0].verdict == "unjudged"
    feed.close()
    stats = await asyncio.wait_for(runner, 5)
    assert stats.queries == 3 and executor.seen == [("q", [0, 1]), ("q2", [0])]
    with pytest.raises(RuntimeError, match="closed"):
        feed.submit("q", ["a"])


async def test_a_feed_plan_fails_pending_submissions() -> None:
    class Broken(FakeExecutor):
        async def judge(self, *args: Any, **kw: Any) -> Any:
            raise PermanentError("HTTP 401")

    feed = FeedPlan()
    driver = BatchDriver(Broken(), CONFIG)
    pending = feed.submit("q", ["a"])
    with pytest.raises(PermanentError):
        try:
            await driver.run(feed, feed.commit)
        except PermanentError as exc:
            feed.fail(exc)
            raise
    with pytest.raises(PermanentError, match="401"):
        await pending
