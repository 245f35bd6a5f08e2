"""The FastAPI app of ``judge serve``, assembled from its routers over one shared state.

* :mod:`judge.server._service_routes`: ``/healthz``, ``/v1/info``, ``/metrics``;
* :mod:`judge.server._evaluate_route`: ``POST /v1/evaluate`` (one query, judged now);
* :mod:`judge.server._job_routes`: scoring jobs (submit, list, view, events, results, ...);
* :mod:`judge.server._compare_routes`: comparisons of systems (submit, report, differences);
* :mod:`judge.server._experiment_routes`: search experiments over the registered configurations;
* :mod:`judge.server._review_routes`: review queue, labels, agreement, calibration;
* :mod:`judge.server._reason_routes`: a pooled pair's reason, asked when the review page opens it;
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
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from judge.io import InputError
from judge.server import (
    _compare_routes,
    _experiment_routes,
    _job_routes,
    _reason_routes,
    _review_routes,
    _service_routes,
    _viewer_routes,
)
from judge.server._app_state import AppState, ServerConfig, add_error_handlers
from judge.server._bounds import ParsedBodyRoute
from judge.server._db import JobDB
from judge.server._evaluate_route import evaluate_router
from judge.server._guard import Guard
from judge.server._jobs import JobManager
from judge.server._lock import DatabaseLock
from judge.server._metrics import ServerMetrics
from judge.server._review import Review
from judge.server._security import CsrfCheck, HostCheck, SecurityHeaders, parse_allowed_hosts, viewer_csp
from judge.server._sessions import SIGNIN_STYLE, Authenticator, SessionStore


def open_state(config: ServerConfig, lock: DatabaseLock) -> AppState:
    """The server's shared state over its job database (the writer lock is held)."""
    try:
        db = JobDB(config.db_path)
    except BaseException:
        lock.release()
        raise
    sessions = SessionStore(config.db_path)
    rt = config.runtime
    try:
        rt.jobs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        lock.release()
        raise InputError(
            f"cannot make the jobs folder: {exc.strerror}", path=str(rt.jobs_dir), field="--jobs-dir"
        ) from None
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
    rt.labels = review.labels_for_queries
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
    app.include_router(_review_routes.router)  # queue, labels, agreement
    app.include_router(_reason_routes.router)  # reasons on request
    app.include_router(_service_routes.router)
    app.include_router(_job_routes.router)
    app.include_router(_compare_routes.router)
    app.include_router(_experiment_routes.router)  # search experiments, registered configurations
    app.include_router(_viewer_routes.router)
    app.mount("/static", StaticFiles(directory=_viewer_routes.STATIC_DIR), name="static")
    app.add_middleware(CsrfCheck, trust_forwarded_proto=config.trust_forwarded_proto)  # type: ignore[arg-type]  # inside Guard: after authentication
    app.add_middleware(Guard, auth=state.auth, metrics=state.metrics, max_body=config.max_body_bytes)  # type: ignore[arg-type]
    if not config.keys or config.allowed_hosts:  # before authentication and every route
        app.add_middleware(
            HostCheck,  # type: ignore[arg-type]
            allowed=parse_allowed_hosts(config.allowed_hosts),
            keys=bool(config.keys),
        )
    app.add_middleware(SecurityHeaders, csp=viewer_csp(SIGNIN_STYLE))  # type: ignore[arg-type]
    return app


__all__ = ["create_app", "open_state"]
