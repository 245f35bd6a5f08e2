"""The batch driver: plan -> execute -> commit, under every entry point that judges many
passages (``judge score``, ``--retry-unjudged``, listwise, stability runs; next pooled
comparison, the HTTP service and the Ray engine).

* A **plan** is any iterable (or async iterable) of :class:`QueryWork`: one query, the
  passages to judge (:class:`~judge.batch._executor.PassageJob`, ``index`` = rank
  position), the verdicts already known for its other positions, and an opaque
  ``payload`` handed back to the commit. Planners: :mod:`judge.batch._plans` (fresh and
  resumed queries of an input file, retry-unjudged from an output file), or build
  :class:`QueryWork` yourself (:meth:`QueryWork.fresh`).
* :meth:`BatchDriver.run` takes the plan lazily: at most ``max_queries`` queries are
  between plan and commit at once (memory stays flat; the next query is planned when one
  commits). For each query it looks every job up in the verdict store (hits never reach
  the executor; ``cached=True``), hands the misses to the :class:`Executor`, stores each
  judged verdict the moment the executor reports it (``on_verdict``), and calls
  ``commit(work, verdicts)`` with the query's complete verdict list (rank order).
* ``commit`` is the caller's: write the output line, keep the result, update a summary.
  With ``ordered=True`` commits happen in plan order (a completed query waits for the ones
  planned before it; it keeps its slot meanwhile, so the bound holds).

Store keys: :func:`cache_keys` (the pointwise key, or with ``listwise_template`` a key of
the listwise template, so a listwise run resumes from the store). Only judged verdicts
are stored; a verdict judged by a listwise run's pointwise fallback is stored under the
run's (listwise) key too, so a re-run makes no call at all.

Errors: the first :class:`~judge.backends.PermanentError` of any query stops the run and
propagates as itself (other errors: the first one); queries already committed stay
committed, and every verdict judged so far is in the store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Protocol

from judge.backends import Backend, PermanentError
from judge.batch._executor import Executor, PassageJob
from judge.judging import (
    Example,
    ExampleBank,
    JudgeConfig,
    Passage,
    PassageVerdict,
    VerdictStore,
    bind_language,
    cached_verdict,
    load_listwise_template,
    verdict_cache_key,
)


class KeyFn(Protocol):
    """``(query, passage_text, config=None, examples=()) -> store key``; ``config``: the
    query's bound config (``language="auto"`` made concrete) when it differs from the
    run's; ``examples``: the worked examples the passage's prompt shows."""

    def __call__(
        self, query: str, text: str, config: JudgeConfig | None = None, examples: Sequence[Example] = ()
    ) -> str: ...


@dataclass
class QueryWork:
    """One planned query.

    ``jobs``: the passages to judge. ``known``: the query's whole verdict list with
    ``None`` at every job's position (retry: the verdicts already judged), or ``None`` when
    the jobs are the whole list (positions 0..n-1). ``payload``: anything the commit needs
    (the dataset record, the old output record, a run number); the driver never reads it.
    A work with no jobs and no ``known`` is committed with ``[]`` at once (a record passed
    through unchanged).
    """

    query: str
    jobs: Sequence[PassageJob]
    known: Sequence[PassageVerdict | None] | None = None
    payload: Any = None
    language: str | None = None
    """``language="auto"``: the language the query is judged in (set by the driver from the
    query and its passages, or by the planner from the query's record); None otherwise."""

    @classmethod
    def fresh(cls, query: str, passages: Iterable[Passage], payload: Any = None) -> QueryWork:
        """Every passage of a query, in rank order."""
        return cls(query, [PassageJob(i, p) for i, p in enumerate(passages)], None, payload)


Commit = Callable[[QueryWork, list[PassageVerdict]], Awaitable[None]]
"""The caller's commit step: ``commit(work, verdicts)`` (verdicts in rank order)."""

Plan = Iterable[QueryWork] | AsyncIterable[QueryWork]
"""A plan: what needs judging, read lazily by the driver."""


@dataclass
class DriverStats:
    """What a driver run did (this run only): queries committed (``begun``: begun, committed
    or not), passages planned (``cached`` of them from the store, ``asked`` handed to the
    executor, ``answered`` of those back from it, judged or not: the progress's measured
    pace), verdicts left unjudged."""

    queries: int = 0
    begun: int = 0
    passages: int = 0
    cached: int = 0
    asked: int = 0
    answered: int = 0
    unjudged: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


def cache_keys(
    backend: Backend, config: JudgeConfig, *, listwise: bool = False, listwise_template: str | None = None
) -> KeyFn:
    """The store key of a passage for runs with ``backend`` and (resolved) ``config``:
    :func:`judge.judging.verdict_cache_key`, with the listwise template when ``listwise``."""
    run_config = config

    def key(
        query: str, text: str, config: JudgeConfig | None = None, examples: Sequence[Example] = ()
    ) -> str:
        cfg = config if config is not None else bind_language(run_config, query, [text])
        template = load_listwise_template(cfg, listwise_template) if listwise else None
        return verdict_cache_key(backend, cfg, query, text, template=template, examples=examples)

    return key


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first PermanentError in ``group`` (nested groups included), else its first leaf."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for sub in exc.exceptions:
                walk(sub)
        else:
            leaves.append(exc)

    walk(group)
    return next((e for e in leaves if isinstance(e, PermanentError)), leaves[0])


@dataclass(eq=False)
class BatchDriver:
    """Runs plans through one executor: see the module docstring.

    ``config`` must be resolved (:func:`judge.judging.resolve_config`). ``store``/``keys``:
    the verdict store and its key function (both or neither). ``listwise``: each query's
    misses are judged in one call (``listwise_template`` or the default for the mode).
    ``max_queries``: queries between plan and commit. ``on_commit``: called after each
    commit (progress). ``examples``: the run's labelled passages; each job gets the worked
    examples :meth:`~judge.judging.ExampleBank.for_passage` chooses for it (by its
    passage's ``query_id``), before the store lookup (its key includes them). A query's
    jobs go to the executor together, in rank order, so their calls (one examples block
    each) follow one another and an embedded model's prefix cache serves them.
    """

    executor: Executor
    config: JudgeConfig
    _: KW_ONLY
    store: VerdictStore | None = None
    keys: KeyFn | None = None
    listwise: bool = False
    listwise_template: str | None = None
    max_queries: int = 32
    on_commit: Callable[[QueryWork, list[PassageVerdict]], None] | None = None
    examples: ExampleBank | None = None
    stats: DriverStats = field(init=False, default_factory=DriverStats)

    def __post_init__(self) -> None:
        if self.store is not None and self.keys is None:
            raise ValueError("a store needs its key function (cache_keys)")
        self.max_queries = max(1, self.max_queries)

    async def run(
        self,
        plan: Plan,
        commit: Commit,
        *,
        ordered: bool = False,
    ) -> DriverStats:
        """Plan, execute and commit every work of ``plan``; returns the cumulative stats."""
        slots = asyncio.Semaphore(self.max_queries)
        previous: asyncio.Future[None] | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                works = _aiter(plan)
                while True:
                    await slots.acquire()  # before reading the plan: it is read no further ahead
                    work = await anext(works, None)
                    if work is None:
                        slots.release()
                        break
                    mine: asyncio.Future[None] | None = None
                    if ordered:
                        mine = asyncio.get_running_loop().create_future()
                    tg.create_task(self._one(work, commit, slots, previous, mine))
                    previous = mine
        except BaseExceptionGroup as group:
            raise _first_error(group) from None
        return self.stats

    async def collect(
        self, plan: Iterable[QueryWork] | AsyncIterable[QueryWork]
    ) -> list[list[PassageVerdict]]:
        """Run ``plan`` and return each work's verdicts, in plan order (a static batch:
        pooled comparison, an API call over many queries)."""
        results: list[list[PassageVerdict]] = []
        order: dict[int, int] = {}

        async def numbered() -> AsyncIterator[QueryWork]:
            async for work in _aiter(plan):
                order[id(work)] = len(results)
                results.append([])
                yield work

        async def keep(work: QueryWork, verdicts: list[PassageVerdict]) -> None:
            results[order.pop(id(work))] = verdicts

        await self.run(numbered(), keep)
        return results

    async def _one(
        self,
        work: QueryWork,
        commit: Commit,
        slots: asyncio.Semaphore,
        after: asyncio.Future[None] | None,
        done: asyncio.Future[None] | None,
    ) -> None:
        try:
            verdicts = await self.judge(work)
            if after is not None:
                await after
            await commit(work, verdicts)
            self.stats.queries += 1
            if self.on_commit is not None:
                self.on_commit(work, verdicts)
        finally:
            if done is not None and not done.done():
                done.set_result(None)
            slots.release()

    def config_of(self, work: QueryWork) -> JudgeConfig:
        """The config ``work`` is judged with: ``language="auto"`` bound once per query (to
        ``work.language`` when the planner knows it, else from the query and the passages
        to judge), recorded in ``work.language``."""
        config = bind_language(
            self.config, work.query, (job.passage.text for job in work.jobs), language=work.language
        )
        if config is not self.config:
            work.language = config.language
        return config

    def _with_examples(self, jobs: Sequence[PassageJob]) -> list[PassageJob]:
        """``jobs`` with the worked examples of each (none without a bank)."""
        bank = self.examples
        if bank is None or not bank.spec.active:
            return list(jobs)
        return [
            replace(job, examples=bank.for_passage(job.passage.query_id, job.passage.id, job.passage.text))
            for job in jobs
        ]

    async def judge(self, work: QueryWork) -> list[PassageVerdict]:
        """The verdicts of one work (store hits, then the executor for the misses), in
        rank order; judged verdicts of the misses are stored as they arrive."""
        found: dict[int, PassageVerdict] = {}
        misses: list[PassageJob] = []
        keys: dict[int, str] = {}
        stats = self.stats
        stats.begun += 1
        config = self.config_of(work)
        bound = config if config is not self.config else None
        for job in self._with_examples(work.jobs):
            stats.passages += 1
            if self.store is not None and self.keys is not None:
                key = self.keys(work.query, job.passage.text, bound, job.examples)
                hit = await self.store.get(key)
                if hit is not None:
                    found[job.index] = cached_verdict(hit, job.index, job.passage)
                    stats.cached += 1
                    continue
                keys[job.index] = key
            misses.append(job)

        async def on_verdict(job: PassageJob, verdict: PassageVerdict) -> None:
            stats.answered += 1
            if not verdict.judged:
                stats.unjudged += 1
            elif self.store is not None:
                await self.store.put(keys[job.index], verdict)

        if misses:
            stats.asked += len(misses)
            judged = await self.executor.judge(
                work.query,
                misses,
                config,
                listwise=self.listwise,
                listwise_template=self.listwise_template,
                on_verdict=on_verdict,
            )
            for job, verdict in zip(misses, judged, strict=True):
                found[job.index] = verdict
        if work.known is None:
            return [found[i] for i in sorted(found)]
        merged = list(work.known)
        for index, verdict in found.items():
            merged[index] = verdict
        if any(v is None for v in merged):
            raise ValueError(f"query {work.query!r}: a position has neither a job nor a known verdict")
        return [v for v in merged if v is not None]


async def _aiter(plan: Plan) -> AsyncIterator[QueryWork]:
    if isinstance(plan, AsyncIterable):
        async for work in plan:
            yield work
    else:
        for work in plan:
            yield work
