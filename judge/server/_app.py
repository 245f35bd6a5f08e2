"""The FastAPI app of ``judge serve``, assembled from its routers over one shared state.

* :mod:`judge.server._service_routes`: ``/healthz``, ``/v1/info``, ``/metrics``;
* :mod:`judge.server._evaluate_route`: ``POST /v1/evaluate`` (one query, judged now);
* :mod:`judge.server._job_routes`: scoring jobs (submit, list, view, events, results, ...);
* :mod:`judge.server._compare_routes`: comparisons of systems (submit, report, differences);
* :mod:`judge.server._review`: review queue, labels, agreement, calibration;
* :mod:`judge.server._viewer_routes`: the viewer's pages, sign-in and sign-out; ``/static``.

Each route reaches the server's :class:`~judge.server._app_state.AppState` (settings, job
database, sessions, job manager, metrics, review) through a dependency. In front of every
route, :class:`~judge.server._guard.Guard` times the request, checks the key and bounds the
body; around it, :mod:`judge.server._security` adds the security headers; inside it, the
same-origin rule refuses cross-site state changes; in front of it, without keys, the host
rule refuses a ``Host`` that is not this server (DNS rebinding). Every JSON body is parsed and checked by
:class:`~judge.server._bounds.ParsedBodyRoute` before FastAPI reads it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from judge.server import _compare_routes, _job_routes, _review, _service_routes, _viewer_routes
from judge.server._app_state import AppState, add_error_handlers
from judge.server._auth import KeyRing
from judge.server._bounds import ParsedBodyRoute
from judge.server._db import JobDB
from judge.server._evaluate_route import evaluate_router
from judge.server._guard import Guard
from judge.server._jobs import JobManager, Runtime
from judge.server._lock import DatabaseLock
from judge.server._metrics import ServerMetrics
from judge.server._review import Review
from judge.server._security import CsrfCheck, HostCheck, SecurityHeaders, parse_allowed_hosts, viewer_csp
from judge.server._sessions import DEFAULT_TTL_S, SIGNIN_STYLE, Authenticator, SessionStore


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


def open_state(config: ServerConfig, lock: DatabaseLock) -> AppState:
    """The server's shared state over its job database (the writer lock is held)."""
    try:
        db = JobDB(config.db_path)
    except BaseException:
        lock.release()
        raise
    sessions = SessionStore(config.db_path)
    rt = config.runtime
    rt.jobs_dir.mkdir(parents=True, exist_ok=True)
    metrics = ServerMetrics(
        db.count_by_status, lambda: getattr(rt.backend, "stats", None), jobs_by_kind=db.count_by_kind
    )
    manager = JobManager(db, rt, metrics)
    review = Review.open(
        config.labels_path or config.db_path.with_name("labels.sqlite"),
        manager.job_dir,
        level=config.labels_level,
        yes_grade=config.labels_yes_grade,
        admin_keys=config.admin_keys,
    )
    auth = Authenticator(config.keys, sessions)
    return AppState(config, db, sessions, auth, metrics, manager, review)


def _lifespan(state: AppState, lock: DatabaseLock) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        lock.acquire()  # held already unless this app was served and stopped before
        await state.manager.start()
        try:
            yield
        finally:
            state.review.close()
            await state.manager.stop()
            state.sessions.close()
            state.db.close()
            lock.release()

    return lifespan


def create_app(config: ServerConfig) -> FastAPI:
    """The app for one job database. Jobs start (and interrupted ones resume) when it starts."""
    lock = config.db_lock or DatabaseLock(config.db_path)
    lock.acquire()  # DatabaseBusy: another live server holds this database
    state = open_state(config, lock)
    app = FastAPI(
        title="judge",
        version=_service_routes.version(),
        summary="LLM relevance judging as a service: durable jobs, metrics, a results viewer.",
        lifespan=_lifespan(state, lock),
    )
    app.router.route_class = ParsedBodyRoute
    app.state.judge = state
    add_error_handlers(app)
    app.include_router(evaluate_router(config.runtime, config.defaults, config.max_passages, state.metrics))
    app.include_router(_review.router)  # queue, labels, agreement
    app.include_router(_service_routes.router)
    app.include_router(_job_routes.router)
    app.include_router(_compare_routes.router)
    app.include_router(_viewer_routes.router)
    app.mount("/static", StaticFiles(directory=_viewer_routes.STATIC_DIR), name="static")
    app.add_middleware(CsrfCheck, trust_forwarded_proto=config.trust_forwarded_proto)  # type: ignore[arg-type]  # inside Guard: after authentication
    app.add_middleware(Guard, auth=state.auth, metrics=state.metrics, max_body=config.max_body_bytes)  # type: ignore[arg-type]
    if not config.keys or config.allowed_hosts:  # before authentication and every route
        app.add_middleware(HostCheck, allowed=parse_allowed_hosts(config.allowed_hosts))  # type: ignore[arg-type]
    app.add_middleware(SecurityHeaders, csp=viewer_csp(SIGNIN_STYLE))  # type: ignore[arg-type]
    return app


__all__ = ["ServerConfig", "create_app"]
