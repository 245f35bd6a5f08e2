"""The comparisons' routes: submit a pooled comparison of systems (``POST /v1/compare``), and
a finished one's report and per-query differences."""

from __future__ import annotations

import asyncio
import shutil
from functools import partial
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from judge.batch import RunSpec
from judge.io import InputError
from judge.server import _bounds, _comparisons, _job_files
from judge.server._app_state import AppState, Intake, State, idempotency_hash, json_error
from judge.server._db import sha256_hex
from judge.server._job_kind import config_of
from judge.server._jobs import new_job_id, option_error
from judge.server._kinds import validate_job
from judge.server._schemas import JUDGE_OPTION_KEYS, CompareRequest

# report.html is self-contained (inline CSS and SVG, no script): forbid every network load.
REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'self'; sandbox"
)
MEDIA_TYPES = {"json": "application/json", "md": "text/markdown; charset=utf-8"}


def report_response(text: str, format: str) -> Response:
    """A finished job's report as served: ``json`` and ``md`` with their media types, ``html``
    under :data:`REPORT_CSP` (no network load) and ``nosniff``."""
    if format in MEDIA_TYPES:
        return Response(text, media_type=MEDIA_TYPES[format])
    return HTMLResponse(
        text, headers={"Content-Security-Policy": REPORT_CSP, "X-Content-Type-Options": "nosniff"}
    )


router = APIRouter(route_class=_bounds.ParsedBodyRoute, tags=["compare"])


@router.post("/v1/compare", status_code=202)
async def submit_compare(request: Request, body: CompareRequest, state: State) -> JSONResponse:
    """Submit a pooled comparison of systems (``judge compare-systems``) as a job.

    JSON body: ``{"systems": {NAME: [records...] | "NDJSON text", ...}, "options": {...}}``;
    each system's results in ``judge score``'s input format, the first system the
    baseline. ``options``: the judging ones (``mode``, ``language``, ``template``, ...;
    unset: the server's defaults) and ``depth``, ``measures``, ``relevance_level``,
    ``qrels`` (human labels judged first: the text of what ``judge compare-systems --qrels``
    reads, TREC qrels or a Quepid/SRW judgment list (``query,docid,rating`` CSV, SRW's
    JSON, RRE ratings) told apart by content, its query texts the systems'), ``qrels_scale``
    (the list's ratings' scale, as ``--qrels-scale``: ``quepid-0-3``, ``quepid-1-10``,
    ``srw-0-1``, ``graded-0-3``, ``binary``; default the scale it states, else detected,
    else 422), ``qrels_level`` (graded
    labels with a binary judge: grade >= L is relevant; default an explicit
    ``relevance_level``, else 422), ``qrels_yes_grade``, ``seed``, ``resamples``,
    ``stability_resamples``, ``confidence``, ``strict``, ``listwise``, ``map``,
    ``max_passage_chars``, ``top_queries``, ``top_passages``. Bad lines are rejected
    naming the system, line and field (the rest runs; ``strict`` refuses with 422).
    ``Idempotency-Key`` returns the same job for the same key. When done,
    ``GET /v1/jobs/{id}/report`` has ``report.json`` (``?format=md|html``)."""
    raw = await request.body()  # already read and validated by FastAPI (cached)
    intake = Intake(new_job_id(), "compare", idempotency_hash(request), sha256_hex(b"compare:" + raw))
    replay = state.replayed(intake.idem_hash, intake.body_hash)
    if replay is not None:
        return replay
    return await state.in_new_job_dir(intake.job_id, partial(_submit_compare, state, body, intake))


def compare_options(
    defaults: dict[str, Any], body: CompareRequest, spec: RunSpec | None = None
) -> dict[str, Any]:
    """A comparison's options: the request's over the server's judging defaults, with the
    systems' names (the first the baseline) and whether human labels came with it; a
    judging option the config refuses is a 422 naming it."""
    given = body.options.model_dump()
    qrels_text = given.pop("qrels")
    options: dict[str, Any] = {k: defaults.get(k) for k in JUDGE_OPTION_KEYS}
    options.update({k: v for k, v in given.items() if v is not None})
    options["systems"] = list(body.systems)
    options["qrels"] = _comparisons.HUMAN_QRELS if qrels_text is not None else None
    try:
        config_of(options, spec)
    except ValueError as exc:
        raise option_error(exc, "body", "options") from None
    return options


def _refusal(state: AppState, job_dir: Path, options: dict[str, Any], err: InputError) -> JSONResponse:
    """What compare-systems refuses outright, as a 422 naming the system or option."""
    rejects = _comparisons.compare_rejects(job_dir)
    where: dict[str, Any] = {"line": err.line}
    if err.field is not None and err.field.startswith("options."):  # the labels' reader named it
        where["field"] = err.field
    elif err.path is not None and Path(err.path).name == _comparisons.HUMAN_QRELS:
        where["field"] = "options.qrels" + (f".{err.field}" if err.field else "")
    elif err.path is not None and Path(err.path).name == _job_files.SAMPLE_LABELS:
        where["field"] = "options.sample_labels" + (
            f".{err.field}" if err.field and "--" not in err.field else ""
        )
    else:
        names = {str(_comparisons.system_path(job_dir, n)): n for n in options["systems"]}
        where["system"] = names.get(str(err.path))
        where["field"] = err.field
    shutil.rmtree(job_dir, ignore_errors=True)
    message, rejects = state.manager.public(job_dir.name, [str(err), rejects[:100]])
    return json_error(422, message, **where, rejects=rejects)


async def _submit_compare(
    state: AppState, body: CompareRequest, intake: Intake, job_dir: Path
) -> JSONResponse:
    options = compare_options(state.config.defaults, body, state.runtime.spec)
    bounds = state.runtime.bounds
    refused = await asyncio.to_thread(_bounds.too_many_system_records, body.systems, bounds)
    if refused is not None:
        shutil.rmtree(job_dir, ignore_errors=True)
        return refused
    await asyncio.to_thread(_comparisons.write_systems, job_dir, body.systems)
    if body.options.qrels is not None:
        (job_dir / _comparisons.HUMAN_QRELS).write_text(body.options.qrels, encoding="utf-8")
    await asyncio.to_thread(_job_files.save_sample_labels, job_dir, options)
    try:
        check = await asyncio.to_thread(validate_job, "compare", job_dir, options, state.runtime)
    except InputError as err:
        return _refusal(state, job_dir, options, err)
    return state.accept_job(job_dir, intake, options, check)


@router.get("/v1/jobs/{job_id}/report", response_model=None)
async def compare_report(
    job_id: str, state: State, format: str = Query(default="json", pattern="^(json|md|html)$")
) -> Response:
    """A finished comparison's ``report.json`` (schema ``judge.systems/1``); ``format=md``
    its ``report.md``, ``format=html`` its self-contained ``report.html`` (served with a
    Content-Security-Policy that forbids every network load). Files are named relative to
    the job's folder (``systems/A.jsonl``, ``human.qrels``), never by a path of the server."""
    job = state.compare_job(job_id)
    job_dir = state.manager.job_dir(job_id)
    text = await asyncio.to_thread(_comparisons.report_text, job_dir, format)
    if text is None:
        return json_error(409, f"job is {job['status']}; the report is written when it is done")
    return report_response(state.manager.public(job_id, text), format)


@router.get("/v1/jobs/{job_id}/differences")
async def compare_differences(job_id: str, state: State) -> Any:
    """The queries where a finished comparison's systems differ most on its primary
    measure, each with every system's value and top passages (verdict, grade, P(yes),
    reason): what the viewer's comparison page shows."""
    job = state.compare_job(job_id)
    data = await asyncio.to_thread(
        _comparisons.read_differences, state.manager.job_dir(job_id), job["options"]
    )
    if data is None:
        return json_error(409, f"job is {job['status']}; the report is written when it is done")
    return state.manager.public(job_id, data)


__all__ = ["REPORT_CSP", "compare_options", "report_response", "router"]
