"""Durable jobs: a FIFO queue in the job database, run one (or ``max_jobs``) at a time in
the server's event loop through :mod:`judge.server._engine`.

Start-up requeues the jobs a dead process left ``running``; they resume where their output
stops (finished queries are in the output, judged passages in the verdict cache), so a
kill -9 repeats at most the LLM calls that were in flight. A job has a ``kind`` (``score``:
``judge score`` on a dataset; ``compare``: ``judge compare-systems`` on several systems'
results, pooled) and a ``phase`` (``score``, then ``retry`` when its unjudged passages are
asked again).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi.exceptions import RequestValidationError

from judge.backends import Backend
from judge.batch import RunSpec, run_spec_from_job_options
from judge.io import dataset_limits
from judge.judging import JudgeConfig, VerdictStore
from judge.server import _engine
from judge.server._bounds import JobBounds
from judge.server._db import TERMINAL, JobDB
from judge.server._failures import job_error
from judge.server._metrics import ServerMetrics
from judge.server._schemas import ADAPT_OPTION_KEYS, EXAMPLE_OPTION_KEYS, JUDGE_OPTION_KEYS

TICK_S = 0.5


@dataclass
class Runtime:
    """What every job of this server shares: the backend (one call policy for all jobs),
    the verdict cache and the server's defaults. ``spec``: the server's
    :class:`~judge.batch.RunSpec` (its judge flags, call policy and engine); each job's
    judging options are laid over it (:func:`job_spec`). ``concurrency``: the calls in
    flight the backend enforces (the spec's, made concrete for the backend)."""

    backend: Backend
    store: VerdictStore | None
    jobs_dir: Path
    concurrency: int
    max_jobs: int = 1
    queue_size: int = 100
    settings: Mapping[str, Any] = field(default_factory=dict)
    bounds: JobBounds = field(default_factory=JobBounds)
    spec: RunSpec = field(default_factory=RunSpec)
    executor: Any = None
    """Who judges every job (``judge serve --engine ray``: one Ray executor for the server's
    life); None: each job's local engine over ``backend``."""
    labels: Any = None
    """A scoring job's labels for ``examples``: ``labels(query_ids) -> (LabelSet, level,
    yes_grade)`` from the server's label store and its stated mapping (set with the review
    state); None: no labels, so no worked examples."""


def new_job_id() -> str:
    return "j" + datetime.now(UTC).strftime("%Y%m%d") + secrets.token_hex(6)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def job_spec(options: Mapping[str, Any], base: RunSpec | None = None) -> RunSpec:
    """The :class:`~judge.batch.RunSpec` of a job: its judging options
    (:data:`~judge.server._schemas.JUDGE_OPTION_KEYS`; a job's other options, such as a
    comparison's resampling ``seed``, are not judge settings), its worked examples
    (:data:`~judge.server._schemas.EXAMPLE_OPTION_KEYS`) and ``adapt`` over ``base``, the
    server's."""
    keys = (*JUDGE_OPTION_KEYS, *EXAMPLE_OPTION_KEYS, *ADAPT_OPTION_KEYS)
    return run_spec_from_job_options({k: options.get(k) for k in keys}, base)


def config_of(options: Mapping[str, Any], base: RunSpec | None = None) -> JudgeConfig:
    """The JudgeConfig of a job's (merged, validated) options (:func:`job_spec`)."""
    return job_spec(options, base).config


def option_error(exc: ValueError, *where: str) -> RequestValidationError:
    """A judging option refused by its config object as a 422 whose ``loc`` ends with the
    field the error names (``exc.field``, as :class:`~judge.backends.ConfigError` and
    :class:`~judge.io.InputError` carry it)."""
    name = getattr(exc, "field", None) or "config"
    return RequestValidationError([{"loc": (*where, name), "msg": str(exc), "type": "value_error"}])


Runner = Callable[["JobManager", dict[str, Any], Path], Awaitable[dict[str, Any]]]


async def _run_score_kind(manager: JobManager, job: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    rt = manager.runtime
    opts = job["options"]
    spec = job_spec(opts, rt.spec)
    config = spec.config
    batch = _engine.batch_options(
        k=opts["k"],
        concurrency=rt.concurrency,
        field_map=opts.get("map") or {},
        max_passage_chars=opts["max_passage_chars"],
        listwise=bool(opts.get("listwise")),
        listwise_template=opts.get("listwise_template"),
        settings={**rt.settings, "job": job["id"]},
        executor=rt.executor,
        sample_labels=_engine.sample_label_options(job_dir, opts),
        examples=await _engine.job_example_bank(job_dir, spec, opts, rt.labels),
        adapt=spec.adapt,
    )
    if job["phase"] == "retry":
        return await _engine.run_retry_unjudged(job_dir, rt.backend, config, rt.store, batch)
    return await _engine.run_score(job_dir, rt.backend, config, rt.store, batch)


async def _run_compare_kind(manager: JobManager, job: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    """``judge compare-systems`` in the job's directory (a restart re-runs it: the pool's
    output and the verdict cache make that a resume). ``phase=retry`` asks the pool's
    unjudged pairs again and rewrites the report."""
    rt = manager.runtime
    opts = job["options"]
    return await _engine.run_compare(
        job_dir,
        rt.backend,
        job_spec(opts, rt.spec),
        rt.store,
        opts,
        concurrency=rt.concurrency,
        settings={**rt.settings, "job": job["id"]},
        retry=job["phase"] == "retry",
        executor=rt.executor,
        labels=rt.labels,
    )


# Job kinds: their runners, and the file whose appended records are the job's progress.
RUNNERS: dict[str, Runner] = {"score": _run_score_kind, "compare": _run_compare_kind}
PROGRESS_FILES: dict[str, str] = {"score": _engine.OUTPUT_NAME, "compare": _engine.POOL_JUDGED}


class _Progress:
    """A running job's counters and ETA, from its progress file as it grows. The file is
    read and parsed in a worker thread: a resumed job's file can be large, and reading it
    on the event loop would hold every other request (``/healthz`` too) meanwhile."""

    def __init__(self, manager: JobManager, job: Mapping[str, Any], tail: _engine.OutputTail) -> None:
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
        progress = _Progress(self, job, _engine.OutputTail(job_dir / PROGRESS_FILES[job["kind"]]))
        seen_verdicts: Counter[str] = Counter()
        before_summary = job.get("summary") or {}
        tick: asyncio.Task[None] | None = None
        try:
            await progress.start()
            if job["phase"] != "retry":
                tick = asyncio.create_task(progress.ticker())
            with dataset_limits(self.runtime.bounds.dataset()):
                summary = await RUNNERS[job["kind"]](self, job, job_dir)
        except asyncio.CancelledError:
            if job_id in self._cancelling:
                self.db.update(job_id, status="cancelled", finished=time.time())
                self.metrics.finished(job, "cancelled")
            raise
        except Exception as exc:
            self.db.update(job_id, status="failed", finished=time.time(), error=job_error(exc))
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

    def view(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """A job as the API shows it."""
        status = job["status"]
        eta: float | None
        if status == "done":
            eta = 0.0
        elif status == "running":
            eta = self._eta.get(job["id"])
            eta = None if eta is None else round(eta, 1)
        else:
            eta = None
        return {
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
            "error": job["error"],
            "options": job["options"],
            "summary": job["summary"],
        }

    @staticmethod
    def is_terminal(job: Mapping[str, Any]) -> bool:
        return str(job["status"]) in TERMINAL
