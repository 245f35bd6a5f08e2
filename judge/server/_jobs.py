"""Durable jobs: a FIFO queue in the job database, run one (or ``max_jobs``) at a time in
the server's event loop, each through its kind (:class:`~judge.server._job_kind.JobKind`,
registered in :data:`judge.server._kinds.KINDS`).

Start-up requeues the jobs a dead process left ``running``; they resume where their output
stops (finished queries are in the output, judged passages in the verdict cache), so a
kill -9 repeats at most the LLM calls that were in flight. A job has a ``kind`` (``score``:
``judge score`` on a dataset; ``compare``: ``judge compare-systems`` on several systems'
results, pooled; ``experiment``: ``judge experiment`` over a search configuration the
server registered) and a ``phase`` (``score``, then ``retry`` when its unjudged passages
are asked again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi.exceptions import RequestValidationError

from judge.io import dataset_limits
from judge.server._db import TERMINAL, JobDB
from judge.server._failures import job_error
from judge.server._job_files import OutputTail
from judge.server._job_kind import Runtime
from judge.server._kinds import job_kind
from judge.server._metrics import ServerMetrics
from judge.server._public import public

TICK_S = 0.5
LOGGER = logging.getLogger("judge.server")


def new_job_id() -> str:
    return "j" + datetime.now(UTC).strftime("%Y%m%d") + secrets.token_hex(6)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def option_error(exc: ValueError, *where: str) -> RequestValidationError:
    """A judging option refused by its config object as a 422 whose ``loc`` ends with the
    field the error names (``exc.field``, as :class:`~judge.backends.ConfigError` and
    :class:`~judge.io.InputError` carry it)."""
    name = getattr(exc, "field", None) or "config"
    return RequestValidationError([{"loc": (*where, name), "msg": str(exc), "type": "value_error"}])


class _Progress:
    """A running job's counters and ETA, from its progress file as it grows. The file is
    read and parsed in a worker thread: a resumed job's file can be large, and reading it
    on the event loop would hold every other request (``/healthz`` too) meanwhile."""

    def __init__(self, manager: JobManager, job: Mapping[str, Any], tail: OutputTail) -> None:
        self.manager = manager
        self.job = job
        self.tail = tail
        self.started = time.monotonic()
        self.done_at_start = 0

    async def start(self) -> None:
        await asyncio.to_thread(self.tail.poll)
        self.done_at_start = self.tail.queries

    async def update(self) -> None:
        tail, job_id = self.tail, self.job["id"]
        await asyncio.to_thread(tail.poll)
        rate = (tail.queries - self.done_at_start) / max(time.monotonic() - self.started, 1e-9)
        remaining = max(0, self.job["queries_total"] - tail.queries)
        self.manager._eta[job_id] = 0.0 if remaining == 0 else (remaining / rate if rate > 0 else None)
        self.manager.db.update(
            job_id, queries_done=tail.queries, passages_done=tail.passages, unjudged=tail.unjudged
        )

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            await self.update()


class JobManager:
    def __init__(self, db: JobDB, runtime: Runtime, metrics: ServerMetrics) -> None:
        self.db = db
        self.runtime = runtime
        self.metrics = metrics
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._cancelling: set[str] = set()
        self._eta: dict[str, float | None] = {}
        self._wake = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self._closing = False

    # --- lifecycle -----------------------------------------------------------------------
    def job_dir(self, job_id: str) -> Path:
        return self.runtime.jobs_dir / job_id

    async def start(self) -> list[str]:
        resumed = self.db.requeue_interrupted()
        self._dispatcher = asyncio.create_task(self._dispatch(), name="judge-jobs")
        self._wake.set()
        return resumed

    async def stop(self) -> None:
        """Stop without marking anything: running jobs stay ``running`` in the database and
        are requeued (resumed) by the next start."""
        self._closing = True
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def wake(self) -> None:
        self._wake.set()

    async def _dispatch(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while not self._closing and len(self._tasks) < self.runtime.max_jobs:
                job = self.db.next_queued(exclude=self._tasks)
                if job is None:
                    break
                self.db.update(
                    job["id"],
                    status="running",
                    started=job["started"] or time.time(),
                    attempts=job["attempts"] + 1,
                    error=None,
                )
                job = self.db.get(job["id"]) or job
                self._tasks[job["id"]] = asyncio.create_task(self._run(job), name=f"judge-job-{job['id']}")

    # --- one run -------------------------------------------------------------------------
    async def _run(self, job: dict[str, Any]) -> None:
        job_id = job["id"]
        job_dir = self.job_dir(job_id)
        seen_verdicts: Counter[str] = Counter()
        before_summary = job.get("summary") or {}
        tick: asyncio.Task[None] | None = None
        try:
            # in the try: a kind this server does not run fails the job, and the slot is freed
            kind = job_kind(job["kind"])
            progress = _Progress(self, job, OutputTail(kind.files(job_dir).records))
            await progress.start()
            if job["phase"] != "retry":
                tick = asyncio.create_task(progress.ticker())
            with dataset_limits(self.runtime.bounds.dataset()):
                summary = await kind.run(self.runtime, job, job_dir)
        except asyncio.CancelledError:
            if job_id in self._cancelling:
                self.db.update(job_id, status="cancelled", finished=time.time())
                self.metrics.finished(job, "cancelled")
            raise
        except Exception as exc:
            message = job_error(exc)  # in words, secrets redacted
            LOGGER.error("job %s (%s) failed: %s", job_id, job["kind"], message)  # the whole error
            shown = self.public(job_id, message, error=True)  # what a response may show of it
            self.db.update(job_id, status="failed", finished=time.time(), error=shown)
            self.metrics.finished(job, "failed")
        else:
            verdicts = Counter({k: int(v) for k, v in (summary.get("verdicts") or {}).items()})
            old = Counter({k: int(v) for k, v in (before_summary.get("verdicts") or {}).items()})
            if job["phase"] == "retry":
                seen_verdicts = Counter(
                    {k: max(0, verdicts[k] - old[k]) for k in verdicts if k != "unjudged"}
                )
                seen_verdicts["unjudged"] = int(summary.get("unjudged", 0))
            else:
                seen_verdicts = verdicts
            self.metrics.count_verdicts(dict(seen_verdicts))
            self.db.update(
                job_id,
                status="done",
                phase="score",
                finished=time.time(),
                summary=summary,
                queries_done=int(summary.get("queries", 0)),
                passages_done=int(summary.get("passages", 0)),
                # an experiment knows its pool only once it searched: at least what was judged
                passages_total=max(int(job["passages_total"] or 0), int(summary.get("passages", 0))),
                unjudged=int(summary.get("unjudged", 0)),
            )
            self._eta[job_id] = 0.0
            self.metrics.finished(job, "done")
        finally:
            if tick is not None:
                tick.cancel()
            self._tasks.pop(job_id, None)
            self._cancelling.discard(job_id)
            if not self._closing:
                self._wake.set()

    # --- requests ------------------------------------------------------------------------
    def queued_count(self) -> int:
        return self.db.count_by_status()["queued"]

    def queue_full(self) -> bool:
        return self.queued_count() >= self.runtime.queue_size

    def retry_after_s(self) -> int:
        """A guess at when a queue slot frees: the soonest ETA of a running job (1..600 s)."""
        etas = [e for j, e in self._eta.items() if j in self._tasks and e is not None]
        return int(min(max(min(etas, default=30.0), 1.0), 600.0))

    async def cancel(self, job_id: str) -> dict[str, Any] | None:
        job = self.db.get(job_id)
        if job is None:
            return None
        if job["status"] == "queued":
            self.db.update(job_id, status="cancelled", finished=time.time())
            self.metrics.finished(job, "cancelled")
        elif job["status"] == "running":
            task = self._tasks.get(job_id)
            if task is not None:
                self._cancelling.add(job_id)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            else:
                self.db.update(job_id, status="cancelled", finished=time.time())
        return self.db.get(job_id)

    def retry_unjudged(self, job_id: str) -> dict[str, Any]:
        """Queue the job again to re-ask its unjudged passages (its ``phase`` becomes ``retry``)."""
        self.db.update(job_id, status="queued", phase="retry", finished=None)
        self.wake()
        job = self.db.get(job_id)
        assert job is not None
        return job

    def resume(self, job_id: str) -> dict[str, Any]:
        """Queue a failed job again; its run resumes from its output and the verdict cache."""
        self.db.update(job_id, status="queued", finished=None, error=None)
        self.wake()
        job = self.db.get(job_id)
        assert job is not None
        return job

    def public(self, job_id: str, value: Any, *, error: bool = False) -> Any:
        """``value`` as a response about job ``job_id`` may carry it: no server path, no
        engine URL (:func:`judge.server._public.public`, the one scrubbing of every route)."""
        return public(value, self.job_dir(job_id), self.runtime.search_configs, error=error)

    def view(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """A job as the API shows it (every route's one serialisation of a job: its files
        named relative to its folder, a registered configuration by its name, no engine URL;
        its error as :meth:`public` shows free text, also for an error stored before)."""
        status = job["status"]
        eta: float | None
        if status == "done":
            eta = 0.0
        elif status == "running":
            eta = self._eta.get(job["id"])
            eta = None if eta is None else round(eta, 1)
        else:
            eta = None
        job_id = str(job["id"])
        error = None if job["error"] is None else self.public(job_id, job["error"], error=True)
        view: dict[str, Any] = {
            "id": job["id"],
            "kind": job["kind"],
            "status": status,
            "phase": job["phase"],
            "queries_total": job["queries_total"],
            "queries_done": job["queries_done"],
            "passages_total": job["passages_total"],
            "passages_done": job["passages_done"],
            "unjudged": job["unjudged"],
            "rejected": job["rejected"],
            "eta_s": eta,
            "attempts": job["attempts"],
            "created": _iso(job["created"]),
            "started": _iso(job["started"]),
            "finished": _iso(job["finished"]),
            "error": error,
            "options": job["options"],
            "summary": job["summary"],
        }
        shown: dict[str, Any] = self.public(job_id, view)
        shown["error"] = error  # free text: scrubbed as such above
        return shown

    @staticmethod
    def is_terminal(job: Mapping[str, Any]) -> bool:
        return str(job["status"]) in TERMINAL
