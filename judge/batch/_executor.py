"""The executor seam of the batch driver: who actually asks the LLM.

The batch driver (``judge score``, ``--retry-unjudged``, listwise, stability, pooled
comparison, the HTTP service) works in three steps:

1. **plan**: decide which passages need a verdict (fresh, resumed, retry-unjudged, pooled)
   and look each one up in the verdict store; hits never reach an executor;
2. **execute**: hand the misses, one query at a time, to an :class:`Executor`;
3. **commit**: write the verdicts the executor returned into the verdict store (judged ones
   only), the output file and the summary.

An executor therefore never sees the store: it judges what it is given and returns one
:class:`~judge.judging.PassageVerdict` per job, in the order of ``jobs``. That is what lets
an executor run on other machines (Ray workers cannot share one SQLite file): workers
return verdicts, the driver commits them.

Executors: :class:`LocalExecutor` (asyncio tasks over one resilient backend, the default);
a distributed one (Ray) implements the same protocol and is passed as
``BatchOptions(executor=...)`` or ``BatchDriver(executor, ...)``. Both fan a query's jobs
out the same way, through :class:`FanOutExecutor`, and differ only in who makes the calls.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from judge.backends import Backend
from judge.judging import Example, JudgeConfig, Passage, PassageVerdict, judge_listwise, judge_passage

_T = TypeVar("_T")


@dataclass(frozen=True)
class PassageJob:
    """One passage to judge: ``index`` is its rank position in the query's list;
    ``examples``: the worked examples its prompt shows (``--examples``; the driver
    chooses them)."""

    index: int
    passage: Passage
    examples: tuple[Example, ...] = ()


OnVerdict = Callable[[PassageJob, PassageVerdict], Awaitable[None]]
"""Called by an executor as soon as one job's verdict is known (the driver stores it at
once, so a kill loses only the calls in flight)."""


@runtime_checkable
class Executor(Protocol):
    """Judges the passages of one query; the store is the driver's business, not its own."""

    @property
    def name(self) -> str:
        """Short label for logs and the summary (``local``, ``ray``)."""
        ...

    async def judge(
        self,
        query: str,
        jobs: Sequence[PassageJob],
        config: JudgeConfig,
        *,
        listwise: bool = False,
        listwise_template: str | None = None,
        on_verdict: OnVerdict | None = None,
    ) -> list[PassageVerdict]:
        """One verdict per job, in job order, each with ``index == job.index`` (unjudged
        verdicts carry their error). ``on_verdict`` (if given) is awaited for every verdict
        before this returns, as soon as that verdict is known. A
        :class:`~judge.backends.PermanentError` propagates."""
        ...

    async def aclose(self) -> None:
        """Release workers, pools and connections."""
        ...


class FanOutExecutor(ABC):
    """An executor that judges a query by fanning its jobs out over its own calls: every
    job at once through :meth:`judge_one` (one passage per call), or, listwise, the whole
    query through :meth:`judge_list` (one call). The fan-out, the ordering of the verdicts
    and the ``on_verdict`` hand-off are written once here; an executor supplies the calls
    (asyncio tasks over a backend for :class:`LocalExecutor`, Ray actors for the Ray
    engine) and, if it needs one, a :meth:`start`.

    A job whose call raises (a :class:`~judge.backends.PermanentError`, a bug) makes
    :meth:`judge` raise that exception as itself; the verdicts that came back before it
    have been handed to ``on_verdict`` already (the driver has stored them), and calls
    still in flight are not cancelled (their verdicts still reach ``on_verdict``).
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """Short label for logs and the summary (``local``, ``ray``)."""

    async def start(self) -> None:
        """Get ready to judge (idempotent); awaited before each query's calls."""
        return None

    @abstractmethod
    async def judge_one(self, query: str, job: PassageJob, config: JudgeConfig) -> PassageVerdict:
        """The verdict on one job (its ``index`` the job's)."""

    @abstractmethod
    async def judge_list(
        self, query: str, passages: list[Passage], config: JudgeConfig, template: str | None
    ) -> list[PassageVerdict]:
        """One verdict per passage, in order, from one listwise call."""

    async def judge(
        self,
        query: str,
        jobs: Sequence[PassageJob],
        config: JudgeConfig,
        *,
        listwise: bool = False,
        listwise_template: str | None = None,
        on_verdict: OnVerdict | None = None,
    ) -> list[PassageVerdict]:
        """See :meth:`Executor.judge`; no jobs make no call."""
        if not jobs:
            return []
        await self.start()
        if listwise:
            found = await self.judge_list(query, [j.passage for j in jobs], config, listwise_template)
            verdicts = [v.model_copy(update={"index": j.index}) for j, v in zip(jobs, found, strict=True)]
            if on_verdict is not None:
                for job, verdict in zip(jobs, verdicts, strict=True):
                    await on_verdict(job, verdict)
            return verdicts

        async def one(job: PassageJob) -> PassageVerdict:
            verdict = await self.judge_one(query, job, config)
            if on_verdict is not None:
                await on_verdict(job, verdict)
            return verdict

        return list(await asyncio.gather(*(one(job) for job in jobs)))

    async def aclose(self) -> None:
        """Release workers, pools and connections (nothing by default)."""
        return None


class LocalExecutor(FanOutExecutor):
    """asyncio tasks over one (resilient) backend in this process.

    At most ``window`` passages are in flight over every query handed to :meth:`judge`
    (a FIFO semaphore: the jobs of a query handed over earlier get their slots first, so
    earlier queries finish first); a listwise query takes one slot. The provider-call
    bound itself (concurrency, rate limits, retries) is the backend wrapper's
    (:class:`~judge.backends.ResilientBackend`). ``window=None``: no bound here.
    """

    def __init__(self, backend: Backend, *, window: int | None = None) -> None:
        self.backend = backend
        self.window = window
        self._slots = asyncio.Semaphore(window) if window is not None else None

    @property
    def name(self) -> str:
        return "local"

    async def _slot(self, call: Callable[[], Awaitable[_T]]) -> _T:
        if self._slots is None:
            return await call()
        async with self._slots:
            return await call()

    async def judge_one(self, query: str, job: PassageJob, config: JudgeConfig) -> PassageVerdict:
        return await self._slot(
            lambda: judge_passage(self.backend, query, job.passage, job.index, config, examples=job.examples)
        )

    async def judge_list(
        self, query: str, passages: list[Passage], config: JudgeConfig, template: str | None
    ) -> list[PassageVerdict]:
        """All passages in one listwise call (pointwise fallbacks included), in one slot."""

        async def call() -> list[PassageVerdict]:
            result = await judge_listwise(self.backend, query, passages, config, template=template)
            return result.verdicts

        return await self._slot(call)
