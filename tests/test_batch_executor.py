"""The fan-out both executors use (FanOutExecutor.judge): empty, one and many jobs,
listwise, and a query whose calls partly fail."""

from __future__ import annotations

import asyncio

import pytest

from judge.backends import PermanentError, RuleBackend
from judge.batch import Executor, FanOutExecutor, LocalExecutor, PassageJob
from judge.judging import JudgeConfig, Passage, resolve_config
from judge.judging._models import PassageVerdict

BACKEND = RuleBackend.keyword("RELEVANT")
CONFIG = resolve_config(JudgeConfig(), BACKEND)


def _verdict(index: int, label: str) -> PassageVerdict:
    return PassageVerdict(
        index=index,
        verdict=label,  # type: ignore[arg-type]
        reason="fake",
        template_id="fake",
        template_hash="fake",
        backend="fake",
    )


def _jobs(*texts: str, first: int = 0) -> list[PassageJob]:
    return [PassageJob(first + i, Passage(t)) for i, t in enumerate(texts)]


class Calls(FanOutExecutor):
    """Answers ``yes`` for text with RELEVANT; raises for FAIL; with ``together`` set, each
    call waits until that many calls are in flight at once (bounded: 5 s)."""

    def __init__(self, together: int = 0) -> None:
        self.started = 0
        self.one_calls: list[tuple[str, int]] = []
        self.list_calls: list[tuple[str, list[str], str | None]] = []
        self.together = together
        self._all_in = asyncio.Event()

    @property
    def name(self) -> str:
        return "calls"

    async def start(self) -> None:
        self.started += 1

    async def judge_one(self, query: str, job: PassageJob, config: JudgeConfig) -> PassageVerdict:
        self.one_calls.append((query, job.index))
        if self.together and len(self.one_calls) >= self.together:
            self._all_in.set()
        if self.together:
            await asyncio.wait_for(self._all_in.wait(), 5)
        if "FAIL" in job.passage.text:
            raise PermanentError("HTTP 401")
        return _verdict(job.index, "yes" if "RELEVANT" in job.passage.text else "no")

    async def judge_list(
        self, query: str, passages: list[Passage], config: JudgeConfig, template: str | None
    ) -> list[PassageVerdict]:
        self.list_calls.append((query, [p.text for p in passages], template))
        # listwise verdicts come back numbered by list position, not by rank
        return [_verdict(i, "yes" if "RELEVANT" in p.text else "no") for i, p in enumerate(passages)]


class Seen:
    def __init__(self) -> None:
        self.items: list[tuple[int, str]] = []

    async def __call__(self, job: PassageJob, verdict: PassageVerdict) -> None:
        assert job.index == verdict.index
        self.items.append((job.index, verdict.verdict))


def test_a_fan_out_executor_fills_the_seam() -> None:
    assert isinstance(Calls(), Executor) and isinstance(LocalExecutor(BACKEND), Executor)


async def test_no_jobs_make_no_call_and_no_start() -> None:
    ex, seen = Calls(), Seen()
    assert await ex.judge("q", [], CONFIG, on_verdict=seen) == []
    assert await ex.judge("q", [], CONFIG, listwise=True, on_verdict=seen) == []
    assert ex.started == 0 and ex.one_calls == [] and ex.list_calls == [] and seen.items == []


async def test_one_job_is_one_call_after_start() -> None:
    ex, seen = Calls(), Seen()
    got = await ex.judge("q", _jobs("RELEVANT a", first=4), CONFIG, on_verdict=seen)
    assert [(v.index, v.verdict) for v in got] == [(4, "yes")]
    assert ex.started == 1 and ex.one_calls == [("q", 4)] and seen.items == [(4, "yes")]


async def test_many_jobs_are_in_flight_together_and_come_back_in_job_order() -> None:
    ex, seen = Calls(together=5), Seen()
    jobs = [
        PassageJob(i, Passage(t))
        for i, t in zip((7, 2, 9, 0, 3), ("a", "RELEVANT b", "c", "RELEVANT d", "e"), strict=True)
    ]
    got = await ex.judge("q", jobs, CONFIG, on_verdict=seen)  # would time out unless all 5 run at once
    assert [(v.index, v.verdict) for v in got] == [(7, "no"), (2, "yes"), (9, "no"), (0, "yes"), (3, "no")]
    assert sorted(seen.items) == sorted((v.index, v.verdict) for v in got)
    assert ex.started == 1 and ex.list_calls == []


async def test_listwise_is_one_call_and_verdicts_get_their_jobs_rank_back() -> None:
    ex, seen = Calls(), Seen()
    jobs = _jobs("RELEVANT a", "b", first=3)
    got = await ex.judge("q", jobs, CONFIG, listwise=True, listwise_template="lw", on_verdict=seen)
    assert [(v.index, v.verdict) for v in got] == [(3, "yes"), (4, "no")]
    assert ex.list_calls == [("q", ["RELEVANT a", "b"], "lw")] and ex.one_calls == []
    assert seen.items == [(3, "yes"), (4, "no")]


async def test_a_failing_call_raises_as_itself_and_the_verdicts_before_it_were_handed_over() -> None:
    ex, seen = Calls(), Seen()
    with pytest.raises(PermanentError, match="401"):
        await ex.judge("q", _jobs("RELEVANT a", "FAIL b", "c"), CONFIG, on_verdict=seen)
    assert (0, "yes") in seen.items and all(index != 1 for index, _ in seen.items)


async def test_the_local_executor_fans_out_over_its_backend_within_its_window() -> None:
    backend = RuleBackend.keyword("RELEVANT")
    seen = Seen()
    ex = LocalExecutor(backend, window=1)
    got = await ex.judge("q", _jobs("RELEVANT a", "b", "RELEVANT c"), CONFIG, on_verdict=seen)
    assert [(v.index, v.verdict) for v in got] == [(0, "yes"), (1, "no"), (2, "yes")]
    assert sorted(seen.items) == [(0, "yes"), (1, "no"), (2, "yes")]
    assert len(backend.requests) == 3
