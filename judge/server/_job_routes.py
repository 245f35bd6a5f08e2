"""The scoring jobs' routes: submit (``POST /v1/jobs``), list, one job, its progress events,
results, rejects and query details, and cancel / resume / retry-unjudged."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import ValidationError

from judge.io import InputError
from judge.server import _bounds, _comparisons, _job_files, _score_job
from judge.server._app_state import (
    NDJSON,
    AppState,
    Intake,
    State,
    field_error,
    idempotency_hash,
    json_error,
    validation_error,
)
from judge.server._jobs import new_job_id
from judge.server._kinds import job_kind, validate_job
from judge.server._schemas import JobOptions, JobRequest

JOB_TYPES = (NDJSON, "application/jsonl", "application/json", "text/plain", "")

router = APIRouter(route_class=_bounds.ParsedBodyRoute, tags=["jobs"])


def merge_options(defaults: dict[str, Any], given: JobOptions) -> dict[str, Any]:
    """A job's effective options: what it asked for over the server's defaults (saved with the
    job, so a restart with other flags resumes it unchanged)."""
    merged = dict(defaults)
    for key, value in given.model_dump().items():
        if value is not None:
            merged[key] = value
    return merged


def options_from_query(request: Request) -> JobOptions:
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
        return JobOptions.model_validate(raw, context=_bounds.QUERY_CONTEXT)
    except ValidationError as exc:
        raise validation_error(exc, ("query",)) from None


@router.post("/v1/jobs", status_code=202)
async def submit(request: Request, state: State) -> JSONResponse:
    """Submit a scoring job: an NDJSON body (``judge score``'s input; options as query
    parameters, e.g. ``?mode=graded&k=5&k=10``) or JSON ``{"records": [...], "options": {...}}``.
    ``Idempotency-Key`` returns the same job for the same key."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in JOB_TYPES:
        return json_error(415, f"unsupported Content-Type {ctype!r}; use {NDJSON} or application/json")
    if state.manager.queue_full() and not request.headers.get("idempotency-key"):
        return state.queue_full()  # refused before the body is read
    job_id = new_job_id()
    job_dir = state.manager.job_dir(job_id)
    job_dir.mkdir(parents=True)
    try:
        return await _submit(state, request, ctype, job_id, job_dir)
    except BaseException:
        shutil.rmtree(job_dir, ignore_errors=True)
        raise


async def _receive(request: Request, ctype: str, input_path: Path) -> tuple[JobOptions, str]:
    """The job's input saved as ``input_path``; its options and the hash of both."""
    digest = hashlib.sha256()
    if ctype == "application/json":
        raw = await request.body()
        digest.update(raw)
        try:
            body = await asyncio.to_thread(JobRequest.model_validate_json, raw)
        except ValidationError as exc:
            raise validation_error(exc, ("body",)) from None
        given = body.options
        await asyncio.to_thread(_bounds.write_records, input_path, body.records)
    else:
        given = options_from_query(request)
        with open(input_path, "wb") as fh:
            async for chunk in request.stream():
                digest.update(chunk)
                fh.write(chunk)
    digest.update(json.dumps(given.model_dump(), sort_keys=True).encode())
    return given, digest.hexdigest()


async def _submit(state: AppState, request: Request, ctype: str, job_id: str, job_dir: Path) -> JSONResponse:
    input_path = job_dir / _job_files.INPUT_NAME
    given, body_hash = await _receive(request, ctype, input_path)
    intake = Intake(job_id, "score", idempotency_hash(request), body_hash)
    refused = state.replayed(intake.idem_hash, body_hash)
    if refused is None and state.manager.queue_full():
        refused = state.queue_full()
    if refused is not None:
        shutil.rmtree(job_dir, ignore_errors=True)
        return refused
    options = merge_options(state.config.defaults, given)
    options = state.review.with_calibration(options, ctype == "application/json")
    bounds = state.runtime.bounds
    check = await asyncio.to_thread(validate_job, "score", job_dir, options, state.runtime)
    if (refused := _bounds.too_many_records(check, bounds)) is not None:
        shutil.rmtree(job_dir, ignore_errors=True)
        return refused
    if check.queries == 0:
        shutil.rmtree(job_dir, ignore_errors=True)
        return json_error(
            422, "no valid record in the body", rejects=state.manager.public(job_id, check.rejects[:100])
        )
    await asyncio.to_thread(_job_files.save_sample_labels, job_dir, options)
    try:
        await asyncio.to_thread(_score_job.check_job_sample, job_dir, options, input_path)
    except InputError as err:
        shutil.rmtree(job_dir, ignore_errors=True)
        return json_error(
            422,
            state.manager.public(job_id, str(err)),
            line=err.line,
            field="options.sample_labels" + (f".{err.field}" if err.field and "." not in err.field else ""),
        )
    await asyncio.to_thread(_score_job.write_rejects, job_dir, check.rejects)
    return state.accept_job(job_dir, intake, options, check)


@router.get("/v1/jobs")
async def list_jobs(
    state: State,
    status: str | None = Query(default=None, pattern="^(queued|running|done|failed|cancelled)$"),
    limit: int = Query(default=50, ge=1, le=1000),
    offset: _bounds.Offset = 0,
) -> dict[str, Any]:
    """Jobs, newest first (without their summaries; ``GET /v1/jobs/{id}`` has it)."""
    rows = state.db.list_jobs(status=status, limit=limit, offset=offset)
    jobs = [state.manager.view(j) | {"summary": None} for j in rows]
    return {"jobs": jobs, "offset": offset, "limit": limit}


@router.get("/v1/jobs/{job_id}")
async def get_job(job_id: str, state: State) -> dict[str, Any]:
    """Status, counters, ETA and, once done, the summary ``judge score`` writes (its files
    named relative to the job's folder: ``output.jsonl``, never a path of the server)."""
    job = state.job(job_id)
    view = await asyncio.to_thread(state.review.view, job, state.manager.view(job))
    return cast(dict[str, Any], state.manager.public(job_id, view))


async def _progress(state: AppState, job_id: str, request: Request) -> AsyncIterator[str]:
    """A job's view as server-sent events whenever it changes, until the job ends."""
    interval = state.config.sse_interval_s
    last: str | None = None
    quiet = 0.0
    while True:
        job = state.db.get(job_id)
        if job is None:
            return
        view = state.manager.view(job) | {"summary": None}
        data = json.dumps(view, ensure_ascii=False)
        if data != last:
            last = data
            quiet = 0.0
            yield f"event: progress\ndata: {data}\n\n"
        elif quiet >= 15.0:
            quiet = 0.0
            yield ": keep-alive\n\n"
        if state.manager.is_terminal(job):
            yield f"event: end\ndata: {json.dumps({'id': job_id, 'status': job['status']})}\n\n"
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(interval)
        quiet += interval


@router.get("/v1/jobs/{job_id}/events")
async def events(job_id: str, request: Request, state: State) -> StreamingResponse:
    """Progress as server-sent events (``event: progress``; ``event: end`` when the job ends)."""
    state.job(job_id)
    return StreamingResponse(
        _progress(state, job_id, request),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _compare_file(state: AppState, job: dict[str, Any], fmt: str, system: str | None) -> Response:
    """A comparison's pool qrels, or one system's run."""
    if fmt == "run" and system not in job["options"]["systems"]:
        raise field_error(("query", "system"), f"format=run needs system= one of {job['options']['systems']}")
    job_dir = state.manager.job_dir(job["id"])
    found = await asyncio.to_thread(_comparisons.compare_export, job_dir, fmt, system)
    if found is None:
        return json_error(409, f"job is {job['status']}; the pool's files are written when it is done")
    name, text = found
    return PlainTextResponse(text, headers={"Content-Disposition": f'inline; filename="{name}"'})


async def _trec_file(state: AppState, job: dict[str, Any], fmt: str, tag: str) -> Response:
    """A scoring job's verdicts as TREC qrels, or its input ranking as a run."""
    labelled = await asyncio.to_thread(state.review.export_records, job)
    text = await asyncio.to_thread(
        _score_job.export_text, state.manager.job_dir(job["id"]), fmt, tag, labelled
    )
    return PlainTextResponse(text, headers={"Content-Disposition": f'inline; filename="{job["id"]}.{fmt}"'})


@router.get("/v1/jobs/{job_id}/results", response_class=PlainTextResponse)
async def results(
    job_id: str,
    state: State,
    offset: _bounds.Offset = 0,
    limit: int = Query(default=1000, ge=1, le=100_000),
    format: str = Query(default="ndjson", pattern="^(ndjson|qrels|run)$"),
    tag: str = Query(default="judge", pattern=r"^\S{1,64}$"),
    system: str | None = Query(default=None, max_length=200),
) -> Response:
    """The records ``judge score`` writes, as NDJSON in input order (the order of the
    submitted lines, whatever order the queries finished in; while a job runs, a query that
    finishes later is inserted at its place), ``offset``/``limit`` paginated
    (``X-Total-Count``, ``X-Next-Offset``); ``format=qrels|run``: TREC files of
    the whole output. A comparison's results are its pooled verdicts
    (``pool.judged.jsonl``); ``format=qrels`` its ``pool.qrels``, ``format=run&system=NAME``
    that system's ``runs/NAME.run``."""
    job = state.job(job_id)
    if format != "ndjson":
        if job["kind"] == "compare":
            return await _compare_file(state, job, format, system)
        return await _trec_file(state, job, format, tag)
    records = job_kind(job["kind"]).files(state.manager.job_dir(job_id)).records
    lines, _ = _job_files.complete_lines(records)
    lines = await asyncio.to_thread(state.review.lines, job, [x for x in lines if x.strip()])
    lines = await asyncio.to_thread(_job_files.in_input_order, lines)
    page = lines[offset : offset + limit]
    headers = {"X-Total-Count": str(len(lines))}
    if offset + limit < len(lines):
        headers["X-Next-Offset"] = str(offset + limit)
        headers["Link"] = f'</v1/jobs/{job_id}/results?offset={offset + limit}&limit={limit}>; rel="next"'
    return Response(b"".join(x + b"\n" for x in page), media_type=NDJSON, headers=headers)


@router.get("/v1/jobs/{job_id}/rejects")
async def rejects(job_id: str, state: State) -> dict[str, Any]:
    """The input lines that were rejected: line, field, error (and, for a comparison,
    the system)."""
    job = state.job(job_id)
    job_dir = state.manager.job_dir(job_id)
    found = state.manager.public(job_id, job_kind(job["kind"]).rejects(job_dir))
    return {"rejects": found, "count": len(found)}


@router.get("/v1/jobs/{job_id}/queries/{query_id:path}")
async def query_detail(job_id: str, query_id: str, state: State) -> dict[str, Any]:
    """One finished query's record with its passages' texts (for the viewer)."""
    job = state.job(job_id)
    job_dir = state.manager.job_dir(job_id)
    detail = await asyncio.to_thread(_score_job.query_detail, job_dir, query_id, job["options"])
    if detail is None:
        return json_error(404, f"no finished query {query_id!r} in job {job_id!r}")  # type: ignore[return-value]
    return await asyncio.to_thread(state.review.detail, job, detail)


@router.post("/v1/jobs/{job_id}/cancel")
async def cancel(job_id: str, state: State) -> JSONResponse:
    """Cancel a queued or running job (finished queries stay in its results)."""
    job = state.job(job_id)
    if state.manager.is_terminal(job):
        return json_error(409, f"job is {job['status']}; nothing to cancel", job=state.manager.view(job))
    done = await state.manager.cancel(job_id)
    assert done is not None
    return JSONResponse(state.manager.view(done))


@router.post("/v1/jobs/{job_id}/resume", status_code=202)
async def resume(job_id: str, state: State) -> JSONResponse:
    """Queue a failed job again (e.g. once the disk has space or the LLM key is fixed):
    it resumes where it stopped (finished queries and judged passages are kept)."""
    job = state.job(job_id)
    if job["status"] != "failed":
        return json_error(409, f"job is {job['status']}; resume needs a failed job")
    if state.manager.queue_full():
        return state.queue_full()
    return JSONResponse(state.manager.view(state.manager.resume(job_id)), status_code=202)


@router.post("/v1/jobs/{job_id}/retry-unjudged", status_code=202)
async def retry(job_id: str, state: State) -> JSONResponse:
    """Queue a finished job again to re-ask only its unjudged passages."""
    job = state.job(job_id)
    if job["status"] != "done":
        return json_error(409, f"job is {job['status']}; retry-unjudged needs a done job")
    if not job["unjudged"]:
        return json_error(409, "job has no unjudged passage")
    if state.manager.queue_full():
        return state.queue_full()
    return JSONResponse(state.manager.view(state.manager.retry_unjudged(job_id)), status_code=202)


__all__ = ["merge_options", "options_from_query", "router"]
