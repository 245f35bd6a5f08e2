"""The FastAPI app of ``judge serve``: the HTTP API, ``/metrics`` and the web viewer.

One ASGI middleware in front of everything does what every route shares: it times the
request for ``/metrics``, checks the key (``Authorization: Bearer`` or the viewer's
session cookie; ``/healthz`` is open), and bounds the request body. Around it,
:mod:`judge.server._security` adds the security headers; inside it, the same-origin rule
refuses cross-site state changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import shutil
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError

from judge.io._errors import InputError
from judge.server import _bounds, _engine, _failures
from judge.server._auth import KeyRing
from judge.server._db import JobDB, QueueFull, sha256_hex
from judge.server._evaluate_route import evaluate_router
from judge.server._jobs import JobManager, Runtime, config_of, new_job_id, option_error
from judge.server._lock import DatabaseLock
from judge.server._metrics import CONTENT_TYPE, ServerMetrics
from judge.server._review import Review, review_router
from judge.server._schemas import JUDGE_OPTION_KEYS, CompareRequest, JobOptions, JobRequest
from judge.server._security import CsrfCheck, SecurityHeaders, viewer_csp
from judge.server._sessions import (
    DEFAULT_TTL_S,
    SIGNIN_STYLE,
    Authenticator,
    SessionStore,
    session_router,
    signin_page,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

NDJSON = "application/x-ndjson"
# report.html is self-contained (inline CSS and SVG, no script): forbid every network load.
REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'self'; sandbox"
)
STATIC_DIR = Path(str(resources.files("judge.server") / "static"))
OPEN_PATHS = frozenset({"/healthz"})


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
    # The database's writer lock, when the caller took it already (``judge serve`` does,
    # before it opens the backend); else create_app takes it.
    db_lock: DatabaseLock | None = None


def _json_error(status: int, message: str, **extra: Any) -> JSONResponse:
    headers = extra.pop("headers", None)
    return JSONResponse({"detail": message, **extra}, status_code=status, headers=headers)


def _validation_error(exc: ValidationError, prefix: tuple[str, ...]) -> RequestValidationError:
    errors: list[dict[str, Any]] = []
    for found in exc.errors(include_url=False):
        err: dict[str, Any] = dict(found)
        err["loc"] = (*prefix, *err.get("loc", ()))
        err.pop("ctx", None)
        errors.append(err)
    return RequestValidationError(errors)


class Guard:
    """Metrics timing, auth and the body limit, as one pure ASGI middleware."""

    def __init__(self, app: ASGIApp, *, auth: Authenticator, metrics: ServerMetrics, max_body: int) -> None:
        self.app = app
        self.auth = auth
        self.metrics = metrics
        self.max_body = max_body

    def _authorized(self, scope: Scope) -> bool:
        """Identifies the caller (``request.state.principal``) by bearer key or session."""
        return self.auth.identify(scope) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = int(message["status"])
                started = True
            await send(message)

        path = scope.get("path", "")
        method = scope.get("method", "GET")
        try:
            open_path = path in OPEN_PATHS or self._login(path, method)
            if not self._authorized(scope) and not open_path:
                await self._unauthorized(scope, receive, send_wrapper)
                return
            length = dict(scope.get("headers", [])).get(b"content-length")
            if length is not None and length.isdigit():
                if int(length) > self.max_body:
                    await self._too_large(scope, receive, send_wrapper)
                    return
                await self.app(scope, receive, send_wrapper)
                return
            if method not in ("POST", "PUT", "PATCH"):
                await self.app(scope, receive, send_wrapper)
                return
            # No Content-Length (chunked): read the body up to the limit first, then replay it.
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                size += len(message.get("body", b""))
                if size > self.max_body:
                    await self._too_large(scope, receive, send_wrapper)
                    return
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                return await receive()

            await self.app(scope, replay, send_wrapper)
        finally:
            route = scope.get("route")
            label = getattr(route, "path", None) or ("/static" if path.startswith("/static/") else "other")
            self.metrics.observe_http(method, label, status, time.perf_counter() - start)

    @staticmethod
    def _login(path: str, method: str) -> bool:
        return path in ("/login", "/logout") and method == "POST"

    async def _unauthorized(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path = scope.get("path", "/")
        response: Response
        if (
            scope.get("method") == "GET"
            and "text/html" in headers.get("accept", "")
            and not path.startswith("/v1/")
        ):
            response = HTMLResponse(signin_page(path, False), status_code=401)
        else:
            response = JSONResponse(
                {"detail": "missing or invalid API key (Authorization: Bearer <key>)"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="judge"'},
            )
        await response(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"request body larger than {self.max_body} bytes"}, status_code=413
        )
        await response(scope, receive, send)


def _version() -> str:
    try:
        return metadata.version("judge")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _merge_options(defaults: dict[str, Any], given: JobOptions) -> dict[str, Any]:
    """A job's effective options: what it asked for over the server's defaults (saved with the
    job, so a restart with other flags resumes it unchanged)."""
    merged = dict(defaults)
    for key, value in given.model_dump().items():
        if value is not None:
            merged[key] = value
    return merged


def _options_from_query(request: Request) -> JobOptions:
    params = request.query_params
    raw: dict[str, Any] = {}
    for key in params:
        values = params.getlist(key)
        if key == "k":
            raw["k"] = [part for v in values for part in v.replace(",", " ").split()]
        elif key == "map":
            raw["map"] = dict(v.partition("=")[::2] for v in values)
        else:
            raw[key] = values[-1]
    try:
        return JobOptions.model_validate(raw)
    except ValidationError as exc:
        raise _validation_error(exc, ("query",)) from None


def create_app(config: ServerConfig) -> FastAPI:
    """The app for one job database. Jobs start (and interrupted ones resume) when it starts."""
    lock = config.db_lock or DatabaseLock(config.db_path)
    lock.acquire()  # DatabaseBusy: another live server holds this database
    try:
        db = JobDB(config.db_path)
    except BaseException:
        lock.release()
        raise
    sessions = SessionStore(config.db_path)
    auth = Authenticator(config.keys, sessions)
    rt = config.runtime
    rt.jobs_dir.mkdir(parents=True, exist_ok=True)
    metrics = ServerMetrics(
        db.count_by_status, lambda: getattr(rt.backend, "stats", None), jobs_by_kind=db.count_by_kind
    )
    manager = JobManager(db, rt, metrics)
    keys = config.keys
    review = Review.open(
        config.labels_path or config.db_path.with_name("labels.sqlite"),
        manager.job_dir,
        level=config.labels_level,
        yes_grade=config.labels_yes_grade,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        lock.acquire()  # held already unless this app was served and stopped before
        await manager.start()
        try:
            yield
        finally:
            review.close()
            await manager.stop()
            sessions.close()
            db.close()
            lock.release()

    app = FastAPI(
        title="judge",
        version=_version(),
        summary="LLM relevance judging as a service: durable jobs, metrics, a results viewer.",
        lifespan=lifespan,
    )
    app.router.route_class = _bounds.ParsedBodyRoute
    app.state.manager = manager
    app.state.db = db
    app.state.metrics = metrics

    def queue_full() -> JSONResponse:
        return _json_error(
            429,
            f"the queue is full ({rt.queue_size} jobs waiting); retry later",
            headers={"Retry-After": str(manager.retry_after_s())},
        )

    def idempotency_hash(request: Request) -> str | None:
        idem = request.headers.get("idempotency-key")
        return sha256_hex("idem:" + idem) if idem else None

    def replayed(idem_hash: str | None, body_hash: str) -> JSONResponse | None:
        """The job an ``Idempotency-Key`` already made (or a 422 if the body differs)."""
        if idem_hash is None:
            return None
        found = db.by_idempotency(idem_hash)
        if found is None:
            return None
        job, old_body = found
        if old_body != body_hash:
            return _json_error(
                422, "Idempotency-Key was used with a different request", field="Idempotency-Key"
            )
        return JSONResponse(manager.view(job), status_code=200, headers={"Idempotency-Replayed": "true"})

    def insert_job(
        job_id: str, job_dir: Path, idem_hash: str | None, **fields: Any
    ) -> JSONResponse | dict[str, Any]:
        try:
            job = db.insert(job_id, idempotency_hash=idem_hash, max_queued=rt.queue_size, **fields)
        except QueueFull:
            shutil.rmtree(job_dir, ignore_errors=True)
            return queue_full()
        except Exception:
            if idem_hash is not None and (found := db.by_idempotency(idem_hash)) is not None:
                # Two requests with one key raced: the other one won.
                shutil.rmtree(job_dir, ignore_errors=True)
                return JSONResponse(manager.view(found[0]), status_code=200)
            raise
        metrics.jobs_submitted.labels(str(fields["kind"])).inc()
        manager.wake()
        return job

    def accept_job(
        job_id: str,
        job_dir: Path,
        idem_hash: str | None,
        kind: str,
        options: dict[str, Any],
        check: _engine.Validation,
        body_hash: str,
    ) -> JSONResponse:
        """Record a validated job and answer 202 with its view (and the first rejects)."""
        job = insert_job(
            job_id,
            job_dir,
            idem_hash,
            kind=kind,
            options=options,
            queries_total=check.queries,
            passages_total=check.passages,
            rejected=len(check.rejects),
            body_hash=body_hash,
        )
        if isinstance(job, JSONResponse):
            return job
        view = manager.view(job)
        view["rejects"] = check.rejects[:100]
        return JSONResponse(view, status_code=202, headers={"Location": f"/v1/jobs/{job_id}"})

    def job_or_404(job_id: str) -> dict[str, Any]:
        job = db.get(job_id)
        if job is None:
            raise _NotFound(job_id)
        return job

    @app.exception_handler(RequestValidationError)
    async def _on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        fields = [".".join(str(p) for p in e.get("loc", ())) for e in errors]
        return JSONResponse(
            {
                "detail": [{k: v for k, v in e.items() if k not in ("input", "ctx")} for e in errors],
                "fields": fields,
            },
            status_code=422,
        )

    app.add_exception_handler(OSError, _failures.on_storage_error)
    app.add_exception_handler(sqlite3.Error, _failures.on_storage_error)

    @app.exception_handler(_NotFound)
    async def _on_not_found(_: Request, exc: _NotFound) -> JSONResponse:
        return JSONResponse({"detail": f"no job {exc.args[0]!r}"}, status_code=404)

    app.include_router(review_router(review, job_or_404, STATIC_DIR))  # queue, labels, agreement

    # --- service -------------------------------------------------------------------------
    @app.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, str]:
        """Liveness; never needs a key."""
        return {"status": "ok"}

    @app.get("/v1/info", tags=["service"])
    async def info() -> dict[str, Any]:
        """Version, backend, model, templates and their hashes, defaults and limits."""
        from judge.judging import list_templates

        return {
            "version": _version(),
            "backend": rt.backend.name,
            "model": rt.backend.model,
            "templates": [
                {"id": t.id, "mode": t.mode, "language": t.language, "hash": t.hash} for t in list_templates()
            ],
            "defaults": config.defaults,
            "limits": {
                "max_body_bytes": config.max_body_bytes,
                "max_passages": config.max_passages,
                "queue_size": rt.queue_size,
                "max_jobs": rt.max_jobs,
                "concurrency": rt.concurrency,
                **rt.bounds.info(),
            },
            "auth": keys.enabled,
            "schema_version": db.schema_version,
        }

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    async def prometheus() -> Response:
        """Prometheus text exposition; every name starts with ``judge_``."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    # --- one query -----------------------------------------------------------------------
    app.include_router(evaluate_router(rt, config.defaults, config.max_passages, metrics))

    # --- jobs ----------------------------------------------------------------------------
    @app.post("/v1/jobs", tags=["jobs"], status_code=202)
    async def submit(request: Request) -> JSONResponse:
        """Submit a scoring job: an NDJSON body (``judge score``'s input; options as query
        parameters, e.g. ``?mode=graded&k=5&k=10``) or JSON ``{"records": [...], "options": {...}}``.
        ``Idempotency-Key`` returns the same job for the same key."""
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype not in (NDJSON, "application/jsonl", "application/json", "text/plain", ""):
            return _json_error(415, f"unsupported Content-Type {ctype!r}; use {NDJSON} or application/json")
        if manager.queue_full() and not request.headers.get("idempotency-key"):
            return queue_full()  # refused before the body is read
        job_id = new_job_id()
        job_dir = manager.job_dir(job_id)
        job_dir.mkdir(parents=True)
        try:
            return await _submit(request, ctype, job_id, job_dir)
        except BaseException:
            shutil.rmtree(job_dir, ignore_errors=True)
            raise

    async def _submit(request: Request, ctype: str, job_id: str, job_dir: Path) -> JSONResponse:
        input_path = job_dir / _engine.INPUT_NAME
        digest = hashlib.sha256()
        if ctype == "application/json":
            raw = await request.body()
            digest.update(raw)
            try:
                body = await asyncio.to_thread(JobRequest.model_validate_json, raw)
            except ValidationError as exc:
                raise _validation_error(exc, ("body",)) from None
            given = body.options
            await asyncio.to_thread(_bounds.write_records, input_path, body.records)
        else:
            given = _options_from_query(request)
            with open(input_path, "wb") as fh:
                async for chunk in request.stream():
                    digest.update(chunk)
                    fh.write(chunk)
        digest.update(json.dumps(given.model_dump(), sort_keys=True).encode())
        body_hash = digest.hexdigest()

        idem_hash = idempotency_hash(request)
        replay = replayed(idem_hash, body_hash)
        if replay is not None:
            shutil.rmtree(job_dir, ignore_errors=True)
            return replay
        if manager.queue_full():
            shutil.rmtree(job_dir, ignore_errors=True)
            return queue_full()
        options = review.with_calibration(_merge_options(config.defaults, given), ctype == "application/json")
        check = await asyncio.to_thread(
            _bounds.validate_input,
            input_path,
            rt.bounds,
            field_map=options.get("map") or {},
            max_passage_chars=options["max_passage_chars"],
        )
        if (refused := _bounds.too_many_records(check, rt.bounds)) is not None:
            shutil.rmtree(job_dir, ignore_errors=True)
            return refused
        if check.queries == 0:
            shutil.rmtree(job_dir, ignore_errors=True)
            return _json_error(422, "no valid record in the body", rejects=check.rejects[:100])
        await asyncio.to_thread(_engine.write_rejects, job_dir, check.rejects)
        return accept_job(job_id, job_dir, idem_hash, "score", options, check, body_hash)

    # --- comparisons of systems -----------------------------------------------------------
    @app.post("/v1/compare", tags=["compare"], status_code=202)
    async def submit_compare(request: Request, body: CompareRequest) -> JSONResponse:
        """Submit a pooled comparison of systems (``judge compare-systems``) as a job.

        JSON body: ``{"systems": {NAME: [records...] | "NDJSON text", ...}, "options": {...}}``;
        each system's results in ``judge score``'s input format, the first system the
        baseline. ``options``: the judging ones (``mode``, ``language``, ``template``, ...;
        unset: the server's defaults) and ``depth``, ``measures``, ``relevance_level``,
        ``qrels`` (TREC qrels text: human labels judged first), ``qrels_level`` (graded
        labels with a binary judge: grade >= L is relevant; default an explicit
        ``relevance_level``, else 422), ``qrels_yes_grade``, ``seed``, ``resamples``,
        ``stability_resamples``, ``confidence``, ``strict``, ``listwise``, ``map``,
        ``max_passage_chars``, ``top_queries``, ``top_passages``. Bad lines are rejected
        naming the system, line and field (the rest runs; ``strict`` refuses with 422).
        ``Idempotency-Key`` returns the same job for the same key. When done,
        ``GET /v1/jobs/{id}/report`` has ``report.json`` (``?format=md|html``)."""
        raw = await request.body()  # already read and validated by FastAPI (cached)
        idem_hash = idempotency_hash(request)
        body_hash = sha256_hex(b"compare:" + raw)
        replay = replayed(idem_hash, body_hash)
        if replay is not None:
            return replay
        if manager.queue_full():
            return queue_full()
        job_id = new_job_id()
        job_dir = manager.job_dir(job_id)
        job_dir.mkdir(parents=True)
        try:
            return await _submit_compare(body, job_id, job_dir, idem_hash, body_hash)
        except BaseException:
            shutil.rmtree(job_dir, ignore_errors=True)
            raise

    async def _submit_compare(
        body: CompareRequest, job_id: str, job_dir: Path, idem_hash: str | None, body_hash: str
    ) -> JSONResponse:
        given = body.options.model_dump()
        qrels_text = given.pop("qrels")
        options: dict[str, Any] = {k: config.defaults.get(k) for k in JUDGE_OPTION_KEYS}
        options.update({k: v for k, v in given.items() if v is not None})
        options["systems"] = list(body.systems)
        options["qrels"] = _engine.HUMAN_QRELS if qrels_text is not None else None
        try:
            config_of(options, rt.spec)
        except ValueError as exc:
            raise option_error(exc, "body", "options") from None
        await asyncio.to_thread(_engine.write_systems, job_dir, body.systems)
        if qrels_text is not None:
            (job_dir / _engine.HUMAN_QRELS).write_text(qrels_text, encoding="utf-8")
        try:
            check = await asyncio.to_thread(_bounds.validate_compare, job_dir, options, rt.bounds)
        except InputError as err:
            rejects = _engine.compare_rejects(job_dir)
            where: dict[str, Any] = {"line": err.line}
            if err.path is not None and Path(err.path).name == _engine.HUMAN_QRELS:
                where["field"] = "options.qrels" + (f".{err.field}" if err.field else "")
            else:
                names = {str(_engine.system_path(job_dir, n)): n for n in options["systems"]}
                where["system"] = names.get(str(err.path))
                where["field"] = err.field
            shutil.rmtree(job_dir, ignore_errors=True)
            return _json_error(422, _engine.public_message(job_dir, err), **where, rejects=rejects[:100])
        return accept_job(job_id, job_dir, idem_hash, "compare", options, check, body_hash)

    def compare_job(job_id: str) -> dict[str, Any]:
        job = job_or_404(job_id)
        if job["kind"] != "compare":
            raise _NotCompare(job_id)
        return job

    @app.exception_handler(_NotCompare)
    async def _on_not_compare(_: Request, exc: _NotCompare) -> JSONResponse:
        return _json_error(
            409, f"job {exc.args[0]!r} is not a comparison of systems (POST /v1/compare makes one)"
        )

    @app.get("/v1/jobs/{job_id}/report", tags=["compare"], response_model=None)
    async def compare_report(
        job_id: str, format: str = Query(default="json", pattern="^(json|md|html)$")
    ) -> Response:
        """A finished comparison's ``report.json`` (schema ``judge.systems/1``); ``format=md``
        its ``report.md``, ``format=html`` its self-contained ``report.html`` (served with a
        Content-Security-Policy that forbids every network load)."""
        job = compare_job(job_id)
        text = await asyncio.to_thread(_engine.report_text, manager.job_dir(job_id), format)
        if text is None:
            return _json_error(409, f"job is {job['status']}; the report is written when it is done")
        if format == "json":
            return Response(text, media_type="application/json")
        if format == "md":
            return Response(text, media_type="text/markdown; charset=utf-8")
        return HTMLResponse(
            text, headers={"Content-Security-Policy": REPORT_CSP, "X-Content-Type-Options": "nosniff"}
        )

    @app.get("/v1/jobs/{job_id}/differences", tags=["compare"])
    async def compare_differences(job_id: str) -> Any:
        """The queries where a finished comparison's systems differ most on its primary
        measure, each with every system's value and top passages (verdict, grade, P(yes),
        reason): what the viewer's comparison page shows."""
        job = compare_job(job_id)
        data = await asyncio.to_thread(_engine.read_differences, manager.job_dir(job_id), job["options"])
        if data is None:
            return _json_error(409, f"job is {job['status']}; the report is written when it is done")
        return data

    @app.get("/v1/jobs", tags=["jobs"])
    async def list_jobs(
        status: str | None = Query(default=None, pattern="^(queued|running|done|failed|cancelled)$"),
        limit: int = Query(default=50, ge=1, le=1000),
        offset: int = Query(default=0, ge=0),
    ) -> dict[str, Any]:
        """Jobs, newest first (without their summaries; ``GET /v1/jobs/{id}`` has it)."""
        jobs = [
            manager.view(j) | {"summary": None}
            for j in db.list_jobs(status=status, limit=limit, offset=offset)
        ]
        return {"jobs": jobs, "offset": offset, "limit": limit}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    async def get_job(job_id: str) -> dict[str, Any]:
        """Status, counters, ETA and, once done, the summary ``judge score`` writes."""
        job = job_or_404(job_id)
        return await asyncio.to_thread(review.view, job, manager.view(job))

    @app.get("/v1/jobs/{job_id}/events", tags=["jobs"])
    async def events(job_id: str, request: Request) -> StreamingResponse:
        """Progress as server-sent events (``event: progress``; ``event: end`` when the job ends)."""
        job_or_404(job_id)

        async def stream() -> AsyncIterator[str]:
            last: str | None = None
            quiet = 0.0
            while True:
                job = db.get(job_id)
                if job is None:
                    return
                data = json.dumps(manager.view(job) | {"summary": None}, ensure_ascii=False)
                if data != last:
                    last = data
                    quiet = 0.0
                    yield f"event: progress\ndata: {data}\n\n"
                elif quiet >= 15.0:
                    quiet = 0.0
                    yield ": keep-alive\n\n"
                if manager.is_terminal(job):
                    yield f"event: end\ndata: {json.dumps({'id': job_id, 'status': job['status']})}\n\n"
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(config.sse_interval_s)
                quiet += config.sse_interval_s

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get("/v1/jobs/{job_id}/results", tags=["jobs"], response_class=PlainTextResponse)
    async def results(
        job_id: str,
        offset: int = Query(default=0, ge=0),
        limit: int = Query(default=1000, ge=1, le=100_000),
        format: str = Query(default="ndjson", pattern="^(ndjson|qrels|run)$"),
        tag: str = Query(default="judge", pattern=r"^\S{1,64}$"),
        system: str | None = Query(default=None, max_length=200),
    ) -> Response:
        """The records ``judge score`` writes, as NDJSON in finishing order, ``offset``/``limit``
        paginated (``X-Total-Count``, ``X-Next-Offset``); ``format=qrels|run``: TREC files of
        the whole output. A comparison's results are its pooled verdicts
        (``pool.judged.jsonl``); ``format=qrels`` its ``pool.qrels``, ``format=run&system=NAME``
        that system's ``runs/NAME.run``."""
        job = job_or_404(job_id)
        job_dir = manager.job_dir(job_id)
        if job["kind"] == "compare" and format != "ndjson":
            if format == "run" and system not in job["options"]["systems"]:
                raise RequestValidationError(
                    [
                        {
                            "loc": ("query", "system"),
                            "msg": f"format=run needs system= one of {job['options']['systems']}",
                            "type": "value_error",
                        }
                    ]
                )
            text = await asyncio.to_thread(_engine.compare_export, job_dir, format, system)
            if text is None:
                return _json_error(
                    409, f"job is {job['status']}; the pool's files are written when it is done"
                )
            name = "pool.qrels" if format == "qrels" else f"{system}.run"
            return PlainTextResponse(text, headers={"Content-Disposition": f'inline; filename="{name}"'})
        if format != "ndjson":
            labelled = await asyncio.to_thread(review.export_records, job)
            text = await asyncio.to_thread(_engine.export_text, job_dir, format, tag, labelled)
            return PlainTextResponse(
                text, headers={"Content-Disposition": f'inline; filename="{job_id}.{format}"'}
            )
        source = _engine.POOL_JUDGED if job["kind"] == "compare" else _engine.OUTPUT_NAME
        lines, _ = _engine.complete_lines(job_dir / source)
        lines = await asyncio.to_thread(review.lines, job, [x for x in lines if x.strip()])
        page = lines[offset : offset + limit]
        headers = {"X-Total-Count": str(len(lines))}
        if offset + limit < len(lines):
            headers["X-Next-Offset"] = str(offset + limit)
            headers["Link"] = f'</v1/jobs/{job_id}/results?offset={offset + limit}&limit={limit}>; rel="next"'
        body = b"".join(x + b"\n" for x in page)
        return Response(body, media_type=NDJSON, headers=headers)

    @app.get("/v1/jobs/{job_id}/rejects", tags=["jobs"])
    async def rejects(job_id: str) -> dict[str, Any]:
        """The input lines that were rejected: line, field, error (and, for a comparison,
        the system)."""
        job = job_or_404(job_id)
        if job["kind"] == "compare":
            found = _engine.compare_rejects(manager.job_dir(job_id))
            return {"rejects": found, "count": len(found)}
        lines, _ = _engine.complete_lines(manager.job_dir(job_id) / _engine.REJECTS_NAME)
        items = []
        for x in lines:
            if x.strip():
                rec = json.loads(x)
                rec["path"] = _engine.INPUT_NAME
                items.append(rec)
        return {"rejects": items, "count": len(items)}

    @app.get("/v1/jobs/{job_id}/queries/{query_id:path}", tags=["jobs"])
    async def query_detail(job_id: str, query_id: str) -> dict[str, Any]:
        """One finished query's record with its passages' texts (for the viewer)."""
        job = job_or_404(job_id)
        detail = await asyncio.to_thread(
            _engine.query_detail, manager.job_dir(job_id), query_id, job["options"]
        )
        if detail is None:
            return _json_error(404, f"no finished query {query_id!r} in job {job_id!r}")  # type: ignore[return-value]
        return await asyncio.to_thread(review.detail, job, detail)

    @app.post("/v1/jobs/{job_id}/cancel", tags=["jobs"])
    async def cancel(job_id: str) -> JSONResponse:
        """Cancel a queued or running job (finished queries stay in its results)."""
        job = job_or_404(job_id)
        if manager.is_terminal(job):
            return _json_error(409, f"job is {job['status']}; nothing to cancel", job=manager.view(job))
        done = await manager.cancel(job_id)
        assert done is not None
        return JSONResponse(manager.view(done))

    @app.post("/v1/jobs/{job_id}/resume", tags=["jobs"], status_code=202)
    async def resume(job_id: str) -> JSONResponse:
        """Queue a failed job again (e.g. once the disk has space or the LLM key is fixed):
        it resumes where it stopped (finished queries and judged passages are kept)."""
        job = job_or_404(job_id)
        if job["status"] != "failed":
            return _json_error(409, f"job is {job['status']}; resume needs a failed job")
        if manager.queue_full():
            return queue_full()
        return JSONResponse(manager.view(manager.resume(job_id)), status_code=202)

    @app.post("/v1/jobs/{job_id}/retry-unjudged", tags=["jobs"], status_code=202)
    async def retry(job_id: str) -> JSONResponse:
        """Queue a finished job again to re-ask only its unjudged passages."""
        job = job_or_404(job_id)
        if job["status"] != "done":
            return _json_error(409, f"job is {job['status']}; retry-unjudged needs a done job")
        if not job["unjudged"]:
            return _json_error(409, "job has no unjudged passage")
        if manager.queue_full():
            return queue_full()
        return JSONResponse(manager.view(manager.retry_unjudged(job_id)), status_code=202)

    # --- viewer --------------------------------------------------------------------------
    index_html = STATIC_DIR / "index.html"

    @app.get("/", include_in_schema=False)
    async def home() -> FileResponse:
        return FileResponse(index_html, media_type="text/html; charset=utf-8")

    @app.get("/compare/{job_id}", include_in_schema=False)
    async def compare_page(job_id: str) -> FileResponse:
        return FileResponse(index_html, media_type="text/html; charset=utf-8")

    @app.get("/jobs/{job_id}", include_in_schema=False)
    async def job_page(job_id: str) -> FileResponse:
        return FileResponse(index_html, media_type="text/html; charset=utf-8")

    app.include_router(
        session_router(auth, ttl_s=config.session_ttl_s, trust_forwarded_proto=config.trust_forwarded_proto)
    )
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(CsrfCheck)  # type: ignore[arg-type]  # inside Guard: after authentication
    app.add_middleware(Guard, auth=auth, metrics=metrics, max_body=config.max_body_bytes)  # type: ignore[arg-type]
    app.add_middleware(SecurityHeaders, csp=viewer_csp(SIGNIN_STYLE))  # type: ignore[arg-type]
    return app


class _NotFound(Exception):
    pass


class _NotCompare(Exception):
    pass


__all__ = ["ServerConfig", "create_app"]
