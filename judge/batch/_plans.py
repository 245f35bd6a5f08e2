"""Planners of the batch driver: what needs judging, as a lazy stream of :class:`QueryWork`.

* :class:`InputPlan`: the queries of an input JSONL file not yet in the output (fresh run
  or resume); bad lines go to the reporter; the payload is the :class:`DatasetRecord`.
* :class:`RetryPlan`: the records of an output file, in file order; a record with
  unjudged passages becomes a work re-asking just those (its other verdicts ``known``),
  every other record a pass-through work (no jobs) so the rewritten file keeps it in
  place; a record that cannot be re-asked (a malformed verdict or passage entry) is
  reported and passed through unchanged. The payload is the :class:`RetryItem`.

* :class:`FeedPlan`: the general planner, fed while the driver runs (the HTTP service,
  pooled comparison): :meth:`FeedPlan.submit` a query and await its verdicts; its
  :meth:`FeedPlan.commit` is the driver's commit. A static batch can also hand the driver
  any iterable of :class:`QueryWork` (:meth:`QueryWork.fresh`;
  :meth:`~judge.batch._driver.BatchDriver.collect` returns the verdicts in order).

The file planners read their file as the driver asks for the next work, so memory holds
only the queries in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from judge.batch._driver import QueryWork
from judge.batch._executor import PassageJob
from judge.batch._records import verdicts_of
from judge.io import DEFAULT_MAX_PASSAGE_CHARS, InputError, iter_dataset
from judge.judging import Passage, PassageVerdict
from judge.store import iter_output


class Reporter(Protocol):
    """Where bad input goes (stderr + the rejects file in batch runs)."""

    def report(self, err: InputError, action: str, *, count: int = 1) -> None: ...


class InputPlan:
    """Queries of ``path`` whose id is not in ``done_ids``. After iteration: ``skipped``
    (already done) and ``rejected`` (bad lines) are counted."""

    def __init__(
        self,
        path: str | Path,
        *,
        done_ids: Collection[str] = (),
        field_map: Mapping[str, str] | None = None,
        max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
        reporter: Reporter | None = None,
    ) -> None:
        self.path = Path(path)
        self.done_ids = done_ids
        self.field_map = field_map
        self.max_passage_chars = max_passage_chars
        self.reporter = reporter
        self.skipped = 0
        self.rejected = 0

    def __iter__(self) -> Iterator[QueryWork]:
        for item in iter_dataset(
            self.path, field_map=self.field_map, max_passage_chars=self.max_passage_chars
        ):
            if isinstance(item, InputError):
                self.rejected += 1
                if self.reporter is not None:
                    self.reporter.report(item, "rejected")
                continue
            if item.id in self.done_ids:
                self.skipped += 1
                continue
            if self.reporter is not None:
                for warning in item.warnings:
                    self.reporter.report(warning, "truncated")
                if item.dropped is not None:
                    self.reporter.report(item.dropped, "dropped", count=item.duplicates)
            passages = [Passage(p.text, p.id, p.truncated, query_id=item.id) for p in item.passages]
            yield QueryWork.fresh(item.query, passages, item)


@dataclass
class RetryItem:
    """The payload of a retry work: the output record as read, and its unjudged entries
    (those being re-asked, in job order; empty for a pass-through)."""

    record: dict[str, Any]
    entries: list[dict[str, Any]]


class RetryPlan:
    """Every record of the output file ``path`` (see the module docstring). After
    iteration: ``records``, ``todo`` (records re-asked), ``passages`` (passages re-asked)
    and ``rejected`` are counted."""

    def __init__(self, path: str | Path, *, reporter: Reporter | None = None) -> None:
        self.path = Path(path)
        self.reporter = reporter
        self.records = 0
        self.todo = 0
        self.passages = 0
        self.rejected = 0

    def _work(self, record: dict[str, Any]) -> QueryWork:
        entries = list(record.get("unjudged_passages") or [])
        if not entries:
            return QueryWork("", [], payload=RetryItem(record, []))
        field_name = "verdicts"
        try:
            known: list[PassageVerdict | None] = list(verdicts_of(record))
            field_name = "unjudged_passages"
            jobs = [
                PassageJob(
                    int(p["index"]),
                    Passage(
                        str(p["text"]),
                        p.get("id"),
                        bool(p.get("truncated", False)),
                        query_id=None if record.get("id") is None else str(record["id"]),
                    ),
                )
                for p in entries
            ]
            for job in jobs:
                if not 0 <= job.index < len(known):
                    raise ValueError(f"passage index {job.index} is outside the record's verdicts")
                known[job.index] = None
            field_name = "query"
            query = record["query"]
            if not isinstance(query, str) or not query.strip():
                raise ValueError("the query is missing or empty")
        except (KeyError, TypeError, ValueError) as exc:
            raise _Unusable(field_name, f"cannot re-ask this record's unjudged passages: {exc}") from exc
        # The language the query was judged in (``auto``): its re-asked passages keep it.
        language = (record.get("conventions") or {}).get("language")
        return QueryWork(query, jobs, known, RetryItem(record, entries), language=language)

    def __iter__(self) -> Iterator[QueryWork]:
        for line, record in iter_output(self.path, repair=False):
            self.records += 1
            try:
                work = self._work(record)
            except _Unusable as exc:
                self.rejected += 1
                if self.reporter is not None:
                    self.reporter.report(
                        InputError(exc.message, path=str(self.path), line=line, field=exc.field), "rejected"
                    )
                yield QueryWork("", [], payload=RetryItem(record, []))
                continue
            if work.jobs:
                self.todo += 1
                self.passages += len(work.jobs)
            yield work


class _Unusable(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass
class _Fed:
    future: asyncio.Future[list[PassageVerdict]]
    payload: Any


class FeedPlan:
    """A plan fed while the driver runs: ``async for`` yields what :meth:`submit` was given,
    in order, until :meth:`close`; :meth:`commit` resolves each submission's future.

    Use::

        feed = FeedPlan()
        runner = asyncio.create_task(driver.run(feed, feed.commit))
        verdicts = await feed.submit("query", [Passage("...")])
        ...
        feed.close(); await runner

    If the run fails, :meth:`fail` (or leaving ``run`` with an error: call it in the
    caller's ``except``) fails every submission not yet committed.
    """

    def __init__(self) -> None:
        self._queue: asyncio.Queue[QueryWork | None] = asyncio.Queue()
        self._pending: set[asyncio.Future[list[PassageVerdict]]] = set()
        self._closed = False

    def submit(
        self, query: str, passages: Sequence[Passage | str], payload: Any = None
    ) -> asyncio.Future[list[PassageVerdict]]:
        """Plan one query (every passage, rank order); the future gets its verdicts."""
        if self._closed:
            raise RuntimeError("this plan is closed")
        if not isinstance(query, str) or not query.strip():
            raise InputError("the query is empty", field="query")
        items = [p if isinstance(p, Passage) else Passage(text=p) for p in passages]
        future: asyncio.Future[list[PassageVerdict]] = asyncio.get_running_loop().create_future()
        self._pending.add(future)
        self._queue.put_nowait(QueryWork.fresh(query, items, _Fed(future, payload)))
        return future

    def close(self) -> None:
        """No more submissions: the driver's run ends once the submitted ones commit."""
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)

    def fail(self, exc: BaseException) -> None:
        """Fail every submission not yet committed with ``exc``."""
        for future in self._pending:
            if not future.done():
                future.set_exception(exc)
        self._pending.clear()

    async def commit(self, work: QueryWork, verdicts: list[PassageVerdict]) -> None:
        fed: _Fed = work.payload
        self._pending.discard(fed.future)
        if not fed.future.done():
            fed.future.set_result(verdicts)

    def __aiter__(self) -> AsyncIterator[QueryWork]:
        return self._works()

    async def _works(self) -> AsyncIterator[QueryWork]:
        while True:
            work = await self._queue.get()
            if work is None:
                return
            yield work
