"""What every router of ``judge serve`` shares: one :class:`AppState` per app (the
:class:`ServerConfig` decided at start, job database, sessions, job manager, metrics,
review), reached by a route through the :data:`State` dependency, and the small answers
several routers give (404 for an unknown job, 409 for a job of the wrong kind, 429 for a
full queue, a job accepted with 202).
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from judge.server import _failures, _job_files
from judge.server._auth import KeyRing
from judge.server._db import JobDB, QueueFull, sha256_hex
from judge.server._job_kind import Runtime
from judge.server._jobs import JobManager
from judge.server._kinds import UnknownJobKind
from judge.server._lock import DatabaseLock
from judge.server._metrics import ServerMetrics
from judge.server._review import Review
from judge.server._sessions import DEFAULT_TTL_S, Authenticator, SessionStore

NDJSON = "application/x-ndjson"


class NotFound(Exception):
    """No job with this id (404)."""


class NotCompare(Exception):
    """The job is not a comparison of systems (409)."""


def json_error(status: int, message: str, **extra: Any) -> JSONResponse:
    headers = extra.pop("headers", None)
    return JSONResponse({"detail": message, **extra}, status_code=status, headers=headers)


def validation_error(exc: ValidationError, prefix: tuple[str, ...]) -> RequestValidationError:
    """A pydantic error as FastAPI's 422, its locations under ``prefix``."""
    errors: list[dict[str, Any]] = []
    for found in exc.errors(include_url=False):
        err: dict[str, Any] = dict(found)
        err["loc"] = (*prefix, *err.get("loc", ()))
        err.pop("ctx", None)
        errors.append(err)
    return RequestValidationError(errors)


def field_error(loc: tuple[str, ...], message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": loc, "msg": message, "type": "value_error"}])


@dataclass
class ServerConfig:
    """Everything ``judge serve`` decides at start (see :func:`create_app`)."""

    db_path: Path
    jobs_dir: Path
    runtime: Runtime
    defaults: dict[str, Any]
    keys: KeyRing
    labels_path: Path | None = None  # the label store; None: labels.sqlite beside db_path
    labels_level: int | None = None  # graded labels on a binary job: grade >= level is relevant
    labels_yes_grade: int | None = None  # binary labels on a graded job: the grade of a yes
    max_body_bytes: int = 64 * 1024 * 1024
    max_passages: int = 200
    sse_interval_s: float = 0.5
    session_ttl_s: float = DEFAULT_TTL_S
    trust_forwarded_proto: bool = False
    # Host names (``NAME`` or ``NAME:PORT``) answered beside the server's own address and
    # localhost; the host rule is on without keys, and with keys when this names any.
    allowed_hosts: tuple[str, ...] = ()
    # labels of the keys that may import labels under other reviewers' names (--admin-keys)
    admin_keys: frozenset[str] = frozenset()
    # The database's writer lock, when the caller took it already (``judge serve`` does,
    # before it opens the backend); else create_app takes it.
    db_lock: DatabaseLock | None = None


@dataclass
class AppState:
    """One server's shared state: what :func:`judge.server.create_app` opened."""

    config: ServerConfig
    db: JobDB
    sessions: SessionStore
    auth: Authenticator
    metrics: ServerMetrics
    manager: JobManager
    review: Review
    # one lock per (job, query id, docno) whose reason is being asked on the review page
    reason_locks: weakref.WeakValueDictionary[tuple[str, str, str], asyncio.Lock] = field(
        default_factory=weakref.WeakValueDictionary
    )

    @property
    def runtime(self) -> Runtime:
        return self.config.runtime

    def job(self, job_id: str) -> dict[str, Any]:
        """The job's row, or the app's 404."""
        job = self.db.get(job_id)
        if job is None:
            raise NotFound(job_id)
        return job

    def compare_job(self, job_id: str) -> dict[str, Any]:
        """The comparison's row: 404 if none, 409 if the job is not a comparison."""
        job = self.job(job_id)
        if job["kind"] != "compare":
            raise NotCompare(job_id)
        return job

    def queue_full(self) -> JSONResponse:
        return json_error(
            429,
            f"the queue is full ({self.runtime.queue_size} jobs waiting); retry later",
            headers={"Retry-After": str(self.manager.retry_after_s())},
        )

    async def in_new_job_dir(
        self, job_id: str, submit: Callable[[Path], Awaitable[JSONResponse]]
    ) -> JSONResponse:
        """``submit`` in the new job's folder, made now: a 429 when the queue is full, and the
        folder removed when ``submit`` raises (a refused or failed submission leaves nothing)."""
        if self.manager.queue_full():
            return self.queue_full()
        job_dir = self.manager.job_dir(job_id)
        job_dir.mkdir(parents=True)
        try:
            return await submit(job_dir)
        except BaseException:
            shutil.rmtree(job_dir, ignore_errors=True)
            raise

    def replayed(self, idem_hash: str | None, body_hash: str) -> JSONResponse | None:
        """The job an ``Idempotency-Key`` already made (or a 422 if the body differs)."""
        if idem_hash is None:
            return None
        found = self.db.by_idempotency(idem_hash)
        if found is None:
            return None
        job, old_body = found
        if old_body != body_hash:
            return json_error(
                422, "Idempotency-Key was used with a different request", field="Idempotency-Key"
            )
        return JSONResponse(self.manager.view(job), status_code=200, headers={"Idempotency-Replayed": "true"})

    def _insert(
        self, job_id: str, job_dir: Path, idem_hash: str | None, **fields: Any
    ) -> JSONResponse | dict[str, Any]:
        try:
            job = self.db.insert(
                job_id, idempotency_hash=idem_hash, max_queued=self.runtime.queue_size, **fields
            )
        except QueueFull:
            shutil.rmtree(job_dir, ignore_errors=True)
            return self.queue_full()
        except Exception:
            if idem_hash is not None and (found := self.db.by_idempotency(idem_hash)) is not None:
                # Two requests with one key raced: the other one won.
                shutil.rmtree(job_dir, ignore_errors=True)
                return JSONResponse(self.manager.view(found[0]), status_code=200)
            raise
        self.metrics.jobs_submitted.labels(str(fields["kind"])).inc()
        self.manager.wake()
        return job

    def accept_job(
        self, job_dir: Path, intake: Intake, options: dict[str, Any], check: _job_files.Validation
    ) -> JSONResponse:
        """Record a validated job and answer 202 with its view (and the first rejects)."""
        job = self._insert(
            intake.job_id,
            job_dir,
            intake.idem_hash,
            kind=intake.kind,
            options=options,
            queries_total=check.queries,
            passages_total=check.passages,
            rejected=len(check.rejects),
            body_hash=intake.body_hash,
        )
        if isinstance(job, JSONResponse):
            return job
        view = self.manager.view(job)
        view["rejects"] = self.manager.public(intake.job_id, check.rejects[:100])
        return JSONResponse(view, status_code=202, headers={"Location": f"/v1/jobs/{intake.job_id}"})


@dataclass(frozen=True)
class Intake:
    """A submission being accepted: its job id and kind, and the hashes that make a retry
    with the same ``Idempotency-Key`` return the same job."""

    job_id: str
    kind: str
    idem_hash: str | None
    body_hash: str


def idempotency_hash(request: Request) -> str | None:
    idem = request.headers.get("idempotency-key")
    return sha256_hex("idem:" + idem) if idem else None


async def app_state(request: Request) -> AppState:
    """The app's shared state (async: a plain function would cost each request a thread hop)."""
    state: AppState = request.app.state.judge
    return state


State = Annotated[AppState, Depends(app_state)]


async def _on_validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    fields = [".".join(str(p) for p in e.get("loc", ())) for e in errors]
    return JSONResponse(
        {
            "detail": [{k: v for k, v in e.items() if k not in ("input", "ctx")} for e in errors],
            "fields": fields,
        },
        status_code=422,
    )


async def _on_not_found(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": f"no job {exc.args[0]!r}"}, status_code=404)


async def _on_not_compare(_: Request, exc: Exception) -> JSONResponse:
    return json_error(409, f"job {exc.args[0]!r} is not a comparison of systems (POST /v1/compare makes one)")


async def _on_unknown_kind(_: Request, exc: Exception) -> JSONResponse:
    return json_error(409, str(exc))


def add_error_handlers(app: FastAPI) -> None:
    """422 with ``fields``, 404/409 for a missing or wrong job (409 too for a job of a kind
    this server does not run), 503 for storage errors."""
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(OSError, _failures.on_storage_error)
    app.add_exception_handler(sqlite3.Error, _failures.on_storage_error)
    app.add_exception_handler(NotFound, _on_not_found)
    app.add_exception_handler(NotCompare, _on_not_compare)
    app.add_exception_handler(UnknownJobKind, _on_unknown_kind)


__all__ = [
    "NDJSON",
    "AppState",
    "Intake",
    "NotCompare",
    "NotFound",
    "ServerConfig",
    "State",
    "add_error_handlers",
    "app_state",
    "field_error",
    "idempotency_hash",
    "json_error",
    "validation_error",
]
