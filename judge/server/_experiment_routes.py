"""``/v1/experiments`` and ``/v1/search-configs``: search experiments as durable jobs.

A request names a search configuration the server registered (``judge serve
--search-config NAME=FILE``) and the knob values of a grid (or trials over ranges); it never
gives a path, a URL or an index location. The experiment runs as a job of kind
``experiment`` (:mod:`judge.server._experiment_job`): progress over server-sent events,
cancel, resume after a restart with nothing judged twice, and, when done, the same
``report.json`` ``judge experiment`` writes.
"""

from __future__ import annotations

import asyncio
import math
import shutil
from functools import partial
from pathlib import Path
from typing import Annotated, Any, cast

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from judge.io import EXCHANGE_SCALES, InputError
from judge.server import _bounds, _job_files
from judge.server._app_state import AppState, Intake, NotFound, State, idempotency_hash, json_error
from judge.server._compare_routes import report_response
from judge.server._comparisons import HUMAN_QRELS, systems_options
from judge.server._db import sha256_hex
from judge.server._experiment_job import write_queries
from judge.server._job_kind import config_of
from judge.server._job_routes import events as job_events
from judge.server._jobs import new_job_id, option_error
from judge.server._kinds import job_kind, validate_job
from judge.server._schemas import JUDGE_OPTION_KEYS, CompareOptions
from judge.server._search_configs import NAME_PATTERN
from judge.systems import pair_view, pool_judgment_list

router = APIRouter(route_class=_bounds.ParsedBodyRoute, tags=["experiments"])

#: the most configurations one grid may expand to
MAX_GRID_POINTS = 100

Knob = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z_][\w.\-]*$")]
KnobValue = (
    Annotated[bool, Field(strict=True)]
    | Annotated[int, Field(strict=True)]
    | Annotated[float, Field(allow_inf_nan=False)]
    | Annotated[str, Field(min_length=1, max_length=200)]
)


class KnobRange(BaseModel):
    """A knob's range for trials (``judge experiment --grid k1=LOW:HIGH``)."""

    model_config = ConfigDict(extra="forbid")

    low: Annotated[float, Field(allow_inf_nan=False)]
    high: Annotated[float, Field(allow_inf_nan=False)]


class QueryIn(BaseModel):
    """One query of the query set (``judge search``'s ``{"id", "query"}``)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    query: str = Field(min_length=1, max_length=100_000)


class ExperimentRequest(BaseModel):
    """``POST /v1/experiments``: a query set, a registered configuration's name, a grid of
    its knobs (or ``trials`` over ranges) and the comparison options."""

    model_config = ConfigDict(extra="forbid")

    queries: list[QueryIn] | str = Field(min_length=1, max_length=64 * 1024 * 1024)
    config: str = Field(min_length=1, max_length=100)
    grid: dict[Knob, list[KnobValue] | KnobRange] = Field(default_factory=dict, max_length=10)
    trials: _bounds.RequestInt | None = Field(default=None, ge=2, le=1000)
    options: CompareOptions = Field(default_factory=CompareOptions)

    @field_validator("config")
    @classmethod
    def _name(cls, value: str) -> str:
        import re

        if not re.match(NAME_PATTERN, value):
            raise ValueError(
                "the name of a search configuration the server registered (GET /v1/search-configs); "
                "a request never gives a path, a URL or an index location"
            )
        return value

    @field_validator("grid")
    @classmethod
    def _values(cls, value: dict[str, list[Any] | KnobRange]) -> dict[str, list[Any] | KnobRange]:
        for name, spec in value.items():
            if isinstance(spec, list) and not 1 <= len(spec) <= MAX_GRID_POINTS:
                raise ValueError(f"knob {name!r}: give 1..{MAX_GRID_POINTS} values")
        return value


def space_refusal(body: ExperimentRequest) -> JSONResponse | None:
    """A grid that cannot run as asked (422 naming the field): a range without trials, or more
    than :data:`MAX_GRID_POINTS` configurations."""
    ranges = [n for n, s in body.grid.items() if isinstance(s, KnobRange)]
    if ranges and body.trials is None:
        return json_error(
            422, f"knob {ranges[0]!r}: a range {{low, high}} needs trials", field=f"grid.{ranges[0]}"
        )
    if body.trials is None:
        points = math.prod(len(s) for s in body.grid.values() if isinstance(s, list))
        if points > MAX_GRID_POINTS:
            return json_error(422, f"the grid has {points} points; at most {MAX_GRID_POINTS}", field="grid")
    return None


def experiment_options(defaults: dict[str, Any], body: ExperimentRequest) -> dict[str, Any]:
    """The experiment's options: the comparison options over the server's judging defaults,
    the configuration's name, the grid and trials (``stability_resamples`` 0 unless given,
    as on the command line: a sweep compares many configurations)."""
    given = body.options.model_dump()
    given.pop("qrels")
    if "stability_resamples" not in body.options.model_fields_set:
        given["stability_resamples"] = 0
    options: dict[str, Any] = {k: defaults.get(k) for k in JUDGE_OPTION_KEYS}
    options.update({k: v for k, v in given.items() if v is not None})
    options["qrels"] = HUMAN_QRELS if body.options.qrels is not None else None
    options["config"] = body.config
    options["grid"] = {
        name: spec.model_dump() if isinstance(spec, KnobRange) else list(spec)
        for name, spec in body.grid.items()
    }
    options["trials"] = body.trials
    return options


@router.get("/v1/search-configs")
async def search_configs(state: State) -> dict[str, Any]:
    """The search configurations experiments may run: names, engines, depths and knobs
    (never a path, URL, index location or secret)."""
    found = state.runtime.search_configs
    return {"configs": [found[name].public() for name in sorted(found)]}


@router.post("/v1/experiments", status_code=202)
async def submit_experiment(request: Request, body: ExperimentRequest, state: State) -> JSONResponse:
    """Run ``judge experiment`` as a job: ``{"queries": NDJSON text | [{"id", "query"}],
    "config": NAME, "grid": {"k1": [0.6, 1.2], "b": [0.3, 0.75]}, "options": {...}}`` (or
    ``"trials": N`` with ranges ``{"k1": {"low": 0.6, "high": 1.5}}``). ``options``: a
    comparison's (``depth``, ``measures``, ``qrels`` as text: TREC qrels or a Quepid/SRW
    judgment list keyed by the query set's texts, as ``judge experiment --qrels`` reads it,
    with ``qrels_scale``; ``examples``, ``sample_labels``, the judging ones). 202 with the
    job's view (its ``id``); a name the server did not register, a path, a URL, a knob the
    configuration lacks, a point outside its index or labels the run cannot read is a 422
    naming the field, with nothing run."""
    raw = await request.body()
    intake = Intake(new_job_id(), "experiment", idempotency_hash(request), sha256_hex(b"experiment:" + raw))
    replay = state.replayed(intake.idem_hash, intake.body_hash)
    if replay is not None:
        return replay
    if (refused := space_refusal(body)) is not None:
        return refused
    if body.config not in state.runtime.search_configs:
        return json_error(
            422,
            f"no registered search configuration {body.config!r} (GET /v1/search-configs)",
            field="config",
        )
    return await state.in_new_job_dir(intake.job_id, partial(_submit, state, body, intake))


async def _submit(state: AppState, body: ExperimentRequest, intake: Intake, job_dir: Path) -> JSONResponse:
    options = experiment_options(state.config.defaults, body)
    try:
        config_of(options, state.runtime.spec)
    except ValueError as exc:
        raise option_error(exc, "body", "options") from None
    if isinstance(body.queries, list) and len(body.queries) > state.runtime.bounds.max_records:
        shutil.rmtree(job_dir, ignore_errors=True)
        return json_error(
            422,
            f"more than {state.runtime.bounds.max_records} queries (judge serve --max-records)",
            field="queries",
        )
    await asyncio.to_thread(
        write_queries,
        job_dir,
        [q.model_dump() for q in body.queries] if isinstance(body.queries, list) else body.queries,
    )
    if body.options.qrels is not None:
        (job_dir / HUMAN_QRELS).write_text(body.options.qrels, encoding="utf-8")
    await asyncio.to_thread(_job_files.save_sample_labels, job_dir, options)
    try:
        check = await asyncio.to_thread(validate_job, "experiment", job_dir, options, state.runtime)
    except InputError as err:
        shutil.rmtree(job_dir, ignore_errors=True)
        return json_error(422, state.manager.public(intake.job_id, str(err)), field=err.field, line=err.line)
    answer = state.accept_job(job_dir, intake, options, check)
    if answer.status_code == 202:
        answer.headers["Location"] = f"/v1/experiments/{intake.job_id}"
    return answer


def experiment_job(state: AppState, job_id: str) -> dict[str, Any]:
    """The experiment's row, or the app's 404 (a job of another kind is not an experiment)."""
    job = state.job(job_id)
    if job["kind"] != "experiment":
        raise NotFound(job_id)
    return job


@router.get("/v1/experiments")
async def list_experiments(
    state: State,
    status: str | None = Query(default=None, pattern="^(queued|running|done|failed|cancelled)$"),
    limit: int = Query(default=50, ge=1, le=1000),
    offset: _bounds.Offset = 0,
) -> dict[str, Any]:
    """The experiments, newest first (each as ``GET /v1/experiments/{id}`` shows it)."""
    found = state.db.list_jobs(status=status, kind="experiment", limit=limit, offset=offset)
    views = [state.manager.view(j) for j in found]
    return {"experiments": views, "offset": offset, "limit": limit}


@router.get("/v1/experiments/{job_id}")
async def get_experiment(job_id: str, state: State) -> dict[str, Any]:
    """Status, counters and, once done, the answer: best, its value against the baseline,
    every configuration's objective, the pool and the judge's calls."""
    return state.manager.view(experiment_job(state, job_id))


@router.get("/v1/experiments/{job_id}/events")
async def experiment_events(job_id: str, request: Request, state: State) -> StreamingResponse:
    """Progress as server-sent events (``event: progress``; ``event: end`` when it ends)."""
    experiment_job(state, job_id)
    return await job_events(job_id, request, state)


@router.post("/v1/experiments/{job_id}/cancel")
async def cancel_experiment(job_id: str, state: State) -> JSONResponse:
    """Cancel a queued or running experiment (its runs and judged pairs are kept)."""
    job = experiment_job(state, job_id)
    if state.manager.is_terminal(job):
        return json_error(409, f"experiment is {job['status']}; nothing to cancel")
    done = await state.manager.cancel(job_id)
    assert done is not None
    return JSONResponse(state.manager.view(done))


@router.get("/v1/experiments/{job_id}/report", response_model=None)
async def experiment_report(
    job_id: str, state: State, format: str = Query(default="json", pattern="^(json|md|html)$")
) -> Response:
    """The finished experiment's ``report.json`` (the one ``judge experiment`` writes, with
    its ``experiment`` section); ``format=md`` its ``report.md``, ``format=html`` its
    ``report.html`` (served with a Content-Security-Policy that forbids every network load)."""
    job = experiment_job(state, job_id)
    job_dir = state.manager.job_dir(job_id)
    text = await asyncio.to_thread(job_kind(job["kind"]).report, job_dir, format)
    if text is None or job["status"] != "done":
        return json_error(409, f"experiment is {job['status']}; the report is written when it is done")
    return report_response(state.manager.public(job_id, text), format)


@router.get("/v1/experiments/{job_id}/pair")
async def experiment_pair(
    job_id: str,
    state: State,
    a: str = Query(min_length=1, max_length=200),
    b: str = Query(min_length=1, max_length=200),
) -> Any:
    """Two configurations of a finished experiment side by side, query by query
    (:func:`judge.systems.pair_view`): each one's results with their verdicts (or labels),
    P(yes) and reasons, the passages only one returned marked (``only``), the per-query
    value of the objective and the difference ``b - a``; largest disagreement first."""
    job = experiment_job(state, job_id)
    if job["status"] != "done":
        return json_error(409, f"experiment is {job['status']}; configurations are compared when it is done")
    job_dir = state.manager.job_dir(job_id)
    options = systems_options(job_dir, job["options"])
    try:
        return state.manager.public(job_id, await asyncio.to_thread(pair_view, job_dir, a, b, options))
    except InputError as err:
        return json_error(422, state.manager.public(job_id, err.message), field=err.field)


JUDGMENT_MEDIA = {
    "trec": "text/plain; charset=utf-8",
    "csv": "text/csv; charset=utf-8",
    "srw": "application/json",
    "rre": "application/json",
}


@router.get("/v1/experiments/{job_id}/judgments", response_model=None)
async def experiment_judgments(
    job_id: str,
    state: State,
    format: str = Query(default="csv", pattern="^(trec|csv|srw|rre)$"),
    scale: str | None = Query(default=None, pattern="^(" + "|".join(EXCHANGE_SCALES) + ")$"),
) -> Response:
    """The finished experiment's judged pool as a judgment list (what ``judge export`` writes):
    one row per pooled pair with the query's text and the engine's document id, ready for
    Quepid (``csv``, ``rre``) or OpenSearch's Search Relevance Workbench (``srw``, ``csv``);
    ``trec`` as qrels. ``scale`` writes the grades on a stated mapping (``srw-0-1``,
    ``quepid-1-10``, ...). SRW's list says which ratings were the judge's and which people's."""
    job = experiment_job(state, job_id)
    if job["status"] != "done":
        return json_error(409, f"experiment is {job['status']}; its judgments are listed when it is done")
    job_dir = state.manager.job_dir(job_id)
    try:
        listing = await asyncio.to_thread(
            pool_judgment_list, job_dir, cast(Any, format), scale=scale, name=f"experiment {job_id}"
        )
    except InputError as err:
        return json_error(
            422, state.manager.public(job_id, str(err)), field=(err.field or "format").lstrip("-")
        )
    return Response(
        listing.text,
        media_type=JUDGMENT_MEDIA[format],
        headers={
            "Content-Disposition": f'attachment; filename="experiment-{job_id}.{_SUFFIX[format]}"',
            "X-Content-Type-Options": "nosniff",
        },
    )


_SUFFIX = {"trec": "qrels", "csv": "csv", "srw": "json", "rre": "json"}


@router.get("/v1/experiments/{job_id}/heatmap.png", response_model=None)
async def experiment_heatmap(job_id: str, state: State) -> Response:
    """The heat map of a finished two-knob grid (404: the grid did not vary two knobs)."""
    job = experiment_job(state, job_id)
    path = state.manager.job_dir(job_id) / "heatmap.png"
    if job["status"] != "done" or not path.is_file():
        return json_error(404, "no heat map: the experiment is not done, or its grid does not vary two knobs")
    data = await asyncio.to_thread(path.read_bytes)
    return Response(data, media_type="image/png", headers={"X-Content-Type-Options": "nosniff"})


__all__ = ["ExperimentRequest", "router"]
