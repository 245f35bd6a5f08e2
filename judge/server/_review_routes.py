"""The review routes of ``judge serve``: a job's review queue, its human labels, the judge's
agreement with people, calibration from the reviews, and the label store's import and
export. What they serve is computed by :class:`~judge.server._review.Review`; who a reviewer
is and which import keeps reviewers is decided here (see :mod:`judge.server._review`).
"""

from __future__ import annotations

import asyncio
import tempfile
from functools import partial
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from judge.batch import (
    draw_sample,
    label_for_passage,
)
from judge.io import MAX_ID_CHARS, InputError
from judge.metrics import CalibrationError, ScaleError, check_scale, resolve_mapping
from judge.server import _asked_reasons, _bounds
from judge.server._app_state import State, field_error
from judge.server._job_kind import job_spec
from judge.server._kinds import job_kind
from judge.server._review import CalibrateIn, Conflict, Review, conflict_rows, serve_flags
from judge.server._viewer_routes import index_page
from judge.store import (
    MAX_PAGE,
    Label,
    conflicts_of,
    decode_cursor,
    label_type_problem,
    labels_to_qrels,
    read_label_lines,
    sample_label_lines,
)
from judge.store import parse_label as store_parse_label

ANONYMOUS = "anonymous"
#: the most pairs one sample-mode draw may expect (a job has at most max_records x passages)
MAX_SAMPLE = 100_000


class LabelIn(BaseModel):
    """``POST /v1/jobs/{id}/labels``: one human label of one of the job's passages."""

    model_config = ConfigDict(extra="forbid")

    query_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    docno: str | None = Field(default=None, min_length=1, max_length=MAX_ID_CHARS)
    index: _bounds.Index | None = None
    label: int | str
    comment: str | None = Field(default=None, max_length=4000)
    reviewer: str | None = Field(default=None, min_length=1, max_length=200)  # only without keys
    audit: bool | None = None  # ignored: an item is an audit item when the queue drew it
    scale: Literal["binary", "graded"] | None = None  # the label's scale (default: the job's)

    @field_validator("label", mode="before")
    @classmethod
    def _a_label(cls, value: object) -> object:
        """The label rule of every way in (:func:`judge.store.label_type_problem`): ``true``
        is refused here as in an import, not read as 1."""
        problem = label_type_problem(value, words=True)
        if problem is not None:
            raise ValueError(problem)
        return value


class SampleIn(BaseModel):
    """``POST /v1/jobs/{id}/sample``: draw pairs of the job for review with known inclusion
    probabilities (the sample mode, as ``judge labels sample``)."""

    model_config = ConfigDict(extra="forbid")

    n: float = Field(strict=True, gt=0, le=MAX_SAMPLE, allow_inf_nan=False)  # pairs expected (a number)
    design: Literal["uniform", "uncertainty"] = "uniform"
    seed: _bounds.Seed = 0


def keys_on(request: Request) -> bool:
    """Whether the caller was identified by a key (the server runs with keys)."""
    return getattr(request.state, "auth_via", None) in ("bearer", "cookie")


def reviewer_of(request: Request, given: str | None) -> str:
    """Who is labelling: with keys, the authenticated principal (the body's ``reviewer`` is
    not used); without keys, the body's ``reviewer``, else ``anonymous``."""
    principal = getattr(request.state, "principal", None)
    if keys_on(request) and isinstance(principal, str) and principal:
        return principal
    if given is not None and given.strip():
        return given.strip()
    return ANONYMOUS


def parse_label(value: int | str, scale: str, job_scale: str | None = None) -> int:
    """The body's label on ``scale`` (:func:`judge.store.parse_label`, the rule every way a
    label comes in shares); a 422 naming ``label`` otherwise."""
    try:
        return store_parse_label(value, check_scale(scale), check_scale(job_scale) if job_scale else None)
    except InputError as err:
        raise field_error(("body", "label"), err.message) from None


def _check_mapping(review: Review, scale: str, job_scale: str) -> None:
    """A label on another scale than the job's needs the server's stated mapping (else 422)."""
    try:
        resolve_mapping(
            check_scale(scale),
            check_scale(job_scale),
            level=review.level,
            yes_grade=review.yes_grade,
            source_name="labels",
            target_name="the job",
            level_field="labels_level",
            yes_grade_field="labels_yes_grade",
        )
    except ScaleError as exc:
        raise field_error(("body", "scale"), serve_flags(exc)) from None


# ------------------------------------------------------------------------------ routes
router = APIRouter(route_class=_bounds.ParsedBodyRoute)  # JSON bodies checked as on every route


@router.get("/v1/jobs/{job_id}/queue", tags=["review"])
async def queue(
    job_id: str,
    request: Request,
    state: State,
    offset: _bounds.Offset = 0,
    limit: int = Query(default=50, ge=1, le=1000),
) -> dict[str, Any]:
    """The job's (or comparison's) verdicts nobody has labelled yet, in review order:
    the largest expected change of the figures first (the chance a label flips the
    verdict, from P(yes) against the threshold, times how much the flip moves the job's
    mAP; in a comparison, the rank weight, doubled for a passage in one system's list
    and not another's); every fifth item is an ``audit`` item drawn uniformly (the draw
    is recorded: a label on it counts in ``agreement.audit``). Each
    item: query, passage text, rank, verdict, grade, P(yes), threshold, reason,
    template, audit flag. ``signed_in``: the caller's
    name when the server knows it (then labels are stored under it).
    ``reasons_on_request``: a finished comparison whose reasons are asked after its
    verdicts; an item without a reason gets it from ``POST /v1/jobs/{id}/reasons``."""
    review, job = state.review, state.job(job_id)
    items = await asyncio.to_thread(review.queue, job, offset + limit)
    page = items[offset : offset + limit]
    drawn = [(q.qid, q.docno) for q in page if q.audit]
    await asyncio.to_thread(review.store.record_audit_draws, job_id, drawn, collection=review.collection)
    total = await asyncio.to_thread(review.pending, job)
    data = review.data(job)
    on_request = (
        job_kind(job["kind"]).pooled
        and _asked_reasons.explaining_config(
            state.runtime.backend, job_spec(job["options"], state.runtime.spec), job["options"]
        )
        is not None
    )
    kept = (
        await asyncio.to_thread(_asked_reasons.explained, state.manager.job_dir(job_id))
        if on_request
        else None
    )
    return {
        "job": job_id,
        "kind": job["kind"],
        "reasons_on_request": on_request and job["status"] == "done",
        "signed_in": reviewer_of(request, None) if reviewer_of(request, None) != ANONYMOUS else None,
        "scale": data.scale,
        "threshold": data.threshold,
        "total": total,
        "labelled": data.applied,
        "offset": offset,
        "limit": limit,
        "items": [review.item(job, q, kept) for q in page],
    }


@router.post("/v1/jobs/{job_id}/labels", tags=["review"], status_code=201)
async def add_label(job_id: str, body: LabelIn, request: Request, state: State) -> JSONResponse:
    """Label one passage of the job on its scale (binary: ``y``/``n``/0/1; graded:
    0-3; the other scale is refused naming both). Stored in the label store with the
    judge verdict and P(yes) it replaces and the store's clock as its time, under the
    caller's principal (with keys; a body ``reviewer`` is used only on a server without
    keys, else ``anonymous``). Its ``audit`` flag is whether the queue drew the item as an
    audit item (a body ``audit`` is ignored). Answers the stored label and the job's
    refreshed review figures."""
    review, job = state.review, state.job(job_id)
    record, index = await asyncio.to_thread(review.find, job, body.query_id, body.docno, body.index)
    job_scale = str(record.get("mode") or review.data(job).scale)
    scale = body.scale or job_scale
    value = parse_label(body.label, scale, job_scale)
    if scale != job_scale:
        _check_mapping(review, scale, job_scale)
    qid, docno = str(record["id"]), str(record["docnos"][index])
    audit = await asyncio.to_thread(review.store.audit_drawn, qid, docno, collection=review.collection)
    label = label_for_passage(
        record,
        index,
        value,
        reviewer_of(request, body.reviewer),
        scale=scale,  # type: ignore[arg-type]
        comment=body.comment or "",
        audit=audit,
        collection=review.collection,
    )
    try:
        stored = await asyncio.to_thread(review.add, job, label)
    except InputError as err:
        raise field_error(("body", err.field or "label"), err.message) from None
    data = await asyncio.to_thread(review.data, state.job(job_id))
    total = await asyncio.to_thread(review.pending, state.job(job_id))
    return JSONResponse(
        {"label": stored.as_dict(), "review": {**data.review, "queue": total}},
        status_code=201,
    )


@router.post("/v1/jobs/{job_id}/sample", tags=["review"])
async def draw_job_sample(job_id: str, body: SampleIn, state: State) -> Any:
    """The review queue's **sample mode**: draw about ``n`` of the finished job's judged
    pairs, each independently with a known inclusion probability (``design``: ``uniform``,
    or ``uncertainty``, proportional to sqrt(P(yes)(1 - P(yes))) as in active statistical
    inference; ``seed``), by the draw of ``judge labels sample``. The draws are recorded in
    the label store (the job is this one, the time the store's clock; a pair drawn before
    draws again independently, and each pair's recorded probability is its union over the
    job's draws, 1 - prod(1 - p_i)), so the label of a drawn pair enters a prediction-powered
    estimate through the job's sample file (``GET /v1/labels?format=sample&job=ID``); a label
    on a pair never drawn does not. Answers the draw and the job's drawn pairs as
    ``GET /v1/jobs/{id}/sample`` lists them. 409 while the job is not done (its pairs are
    the population)."""
    review, job = state.review, state.job(job_id)
    if job["status"] != "done":
        return JSONResponse(
            {"detail": f"job {job_id} is {job['status']}: draw a sample when it is done"}, status_code=409
        )
    data = await asyncio.to_thread(review.data, job)
    try:
        draw = await asyncio.to_thread(
            partial(
                draw_sample,
                review.store,
                job_id,
                data.records,
                expected=body.n,
                design=body.design,
                seed=body.seed,
                collection=review.collection,
            )
        )
    except InputError as err:
        if err.field == "job":
            return JSONResponse({"detail": err.message}, status_code=409)
        raise field_error(("body", (err.field or "n").lstrip("-")), err.message) from None
    listed = await asyncio.to_thread(_drawn, review, job)
    drew = {
        "design": body.design,
        "seed": body.seed,
        "n": body.n,
        "draw": draw.number + 1,
        "drawn": draw.taken,
        "new": draw.added,
    }
    return drew | listed


@router.get("/v1/jobs/{job_id}/sample", tags=["review"])
async def list_sample(job_id: str, state: State) -> Any:
    """The job's pairs the sample mode drew (``POST /v1/jobs/{id}/sample``), for the review
    screen: each with its query, passage text, rank index, the judge's verdict and P(yes),
    the recorded ``inclusion`` probability (the union over the job's draws) and design, and
    the current ``label`` (null until someone labels it; label it with ``POST
    /v1/jobs/{id}/labels``). ``unlabelled`` counts the drawn pairs still waiting: label every
    one (the job's sample file names them, and an estimate from it has no interval unless
    ``allow_unlabelled``)."""
    review, job = state.review, state.job(job_id)
    return await asyncio.to_thread(_drawn, review, job)


@router.get("/v1/jobs/{job_id}/agreement", tags=["review"])
async def agreement(job_id: str, state: State) -> Any:
    """Agreement of the judge with people on the job's labelled items: Cohen's kappa with
    a bootstrap interval, accuracy, confusion matrix (rows people, columns judge) and ROC
    AUC of P(yes), overall, per template and on the audit items; kappa between
    reviewers; the conflicts; and the note that the queue's picks are a biased sample."""
    job = state.job(job_id)
    try:
        return await asyncio.to_thread(state.review.agreement, job)
    except Conflict as exc:
        return JSONResponse({"detail": str(exc)}, status_code=409)


@router.post("/v1/jobs/{job_id}/calibrate", tags=["review"], status_code=201)
async def calibrate(job_id: str, state: State, body: CalibrateIn | None = None) -> JSONResponse:
    """Refit the template's P(yes) threshold on the job's labelled items: Cohen's kappa
    before and after on each held-out fold (stratified k-fold, seeded), the mean gain and
    its noise band (``report.kappa_gain_band``, +- 2 corrected standard errors). Stored as a
    named calibration (201, ``stored: true``) only when the gain is above noise
    (``helps``) or ``force``; otherwise 200 with ``stored: false`` and ``verdict`` saying why
    (``dry_run`` reports only). Never changes the shipped default. Refused (422) with fewer
    than 30 labels or one class."""
    job = state.job(job_id)
    try:
        cal = await asyncio.to_thread(state.review.calibrate, job, body or CalibrateIn())
    except CalibrationError as exc:
        raise field_error(("body", exc.field), exc.message) from None
    except Conflict as exc:
        return JSONResponse({"detail": str(exc)}, status_code=409)
    return JSONResponse(cal, status_code=201 if cal["stored"] else 200)


@router.get("/v1/labels", tags=["review"], response_model=None)
async def export_labels(
    state: State,
    format: str = Query(default="json", pattern="^(json|qrels|sample)$"),
    job: str | None = Query(default=None, min_length=1, max_length=200),
    history: bool = False,
    collection: str | None = Query(default=None, min_length=1, max_length=200),
    limit: int = Query(default=MAX_PAGE, ge=1, le=MAX_PAGE),
    cursor: str | None = Query(default=None, max_length=40),
) -> Response:
    """The human labels of a collection (default and only one: the server's, listed under
    ``collections``; another is refused, 422). ``format=qrels``: the resolved label of each
    passage as TREC qrels (``qid 0 docno label``, ids percent-encoded where they hold
    whitespace, ``%`` or control characters). ``format=sample&job=ID``: the sample file of
    job ``ID`` (required): every pair the sample mode drew over that job with its latest
    label (``-1``: left unlabelled; the header ``X-Unlabelled`` counts them) and its union
    inclusion probability (``qid 0 docno label inclusion``, what that job's ``sample_labels``
    option and ``--sample-labels`` read); a label on a pair never drawn is not there, so it
    never enters an estimate. ``format=json``: one page, in write order, of
    every reviewer's latest label with its provenance (``history=true``: every change), at
    most ``limit`` (<= 1000) labels; ``next`` is the ``cursor`` of the next page (null at
    the end); ``conflicts`` are those among the page's passages."""
    review = state.review
    if collection is not None and collection != review.collection:
        raise field_error(
            ("query", "collection"), f"no collection {collection!r}; this server has {review.collection!r}"
        )
    if job is not None and format != "sample":
        raise field_error(("query", "job"), "job is only used with format=sample")
    if format == "qrels":
        text = await asyncio.to_thread(_qrels_text, review)
        return PlainTextResponse(text, headers={"Content-Disposition": 'inline; filename="labels.qrels"'})
    if format == "sample":
        if job is None:
            raise field_error(("query", "job"), "format=sample is one job's sample file: give job=ID")
        state.job(job)  # 404 for a job this server does not know
        try:
            export = await asyncio.to_thread(
                partial(sample_label_lines, review.store, job=job, collection=review.collection)
            )
        except InputError as err:
            raise field_error(("query", "job"), err.message) from None
        if not export.lines[1:]:
            raise field_error(
                ("query", "job"), f"no sample drawn over job {job} (POST /v1/jobs/{job}/sample)"
            )
        return PlainTextResponse(
            export.text(),
            headers={
                "Content-Disposition": f'inline; filename="sample-{job}.qrels"',
                "X-Unlabelled": str(len(export.unlabelled)),
            },
        )
    try:
        after = decode_cursor(cursor) if cursor else 0
    except InputError as err:
        raise field_error(("query", "cursor"), err.message) from None
    page = await asyncio.to_thread(
        review.store.page, collection=review.collection, history=history, after=after, limit=limit
    )
    latest = await asyncio.to_thread(
        review.store.latest_for, {x.qid for x in page.labels}, collection=review.collection
    )
    keys = {x.key for x in page.labels}
    return JSONResponse(
        {
            "collection": review.collection,
            "collections": [review.collection],
            "labels": [x.as_dict() for x in page.labels],
            "conflicts": conflict_rows(conflicts_of(x for x in latest if x.key in keys)),
            "count": len(page.labels),
            "next": page.next,
        }
    )


@router.post("/v1/labels", tags=["review"])
async def import_labels(
    request: Request,
    state: State,
    reviewer: str | None = Query(default=None, min_length=1, max_length=200),
    scale: str | None = Query(default=None, pattern="^(binary|graded)$"),
) -> Any:
    """Import labels, all or none: TREC qrels text (each line a label by ``reviewer``;
    ids percent-decoded; ``scale`` default: binary when every grade is 0/1) or the JSONL
    that ``format=json`` lists, one object a line. Every line is checked as a label (422
    naming the line and field); each line's ``collection`` must be the server's (422).
    Each line's ``reviewer`` is kept on a server without keys and for an admin key
    (``judge serve --admin-keys``); another key may import only its own labels (lines
    without a reviewer, or naming its principal; else 403). A line's ``created`` is kept as
    ``source_created``; the store's clock is the label's time."""
    raw = await request.body()
    review = state.review
    caller = reviewer_of(request, None)
    admin = not keys_on(request) or getattr(request.state, "key_label", None) in review.admin_keys
    default = reviewer if (admin and reviewer) else (reviewer if not keys_on(request) else caller)
    if keys_on(request) and not admin and reviewer is not None and reviewer != caller:
        return JSONResponse(
            {"detail": f"reviewer {reviewer!r}: this key imports only its own labels ({caller!r})"},
            status_code=403,
        )
    try:
        lines = await asyncio.to_thread(_read_labels, raw, default or ANONYMOUS, scale, review.collection)
    except InputError as err:
        raise field_error(
            ("body", err.field) if err.field else ("body",),
            f"line {err.line}: {err.message}" if err.line else err.message,
        ) from None
    for number, lab in lines:
        if lab.collection != review.collection:
            raise field_error(
                ("body", "collection"),
                f"line {number}: no collection {lab.collection!r}; this server has {review.collection!r}",
            )
        if not admin and lab.reviewer != caller:
            return JSONResponse(
                {
                    "detail": f"line {number}: reviewer {lab.reviewer!r}: this key imports only its own "
                    f"labels ({caller!r}); an admin key (judge serve --admin-keys) keeps each line's reviewer"
                },
                status_code=403,
            )
    try:
        stored = await asyncio.to_thread(review.store.put_many, [lab for _, lab in lines])
    except InputError as err:
        raise field_error(("body", err.field or "label"), err.message) from None
    review.bump()
    return {"imported": len(stored)}


@router.get("/jobs/{job_id}/review", include_in_schema=False)
async def review_page(job_id: str) -> FileResponse:
    return index_page()


def _drawn(review: Review, job: Any) -> dict[str, Any]:
    """The job's drawn pairs (the store's draws on the job's passages) with their labels."""
    data = review.data(job)
    texts = review.texts(job)
    labels = {lab.key: lab for lab in data.labels if lab.label is not None}  # the latest wins
    items: list[dict[str, Any]] = []
    for qid, docno, inclusion, design in review.store.sample_draws(
        collection=review.collection, job=job["id"]
    ):
        at = data.by_qid.get(qid)
        record = None if at is None else data.records[at]
        docnos = [] if record is None else [str(d) for d in record["docnos"]]
        if record is None or docno not in docnos:
            continue
        index = docnos.index(docno)
        verdict = record["verdicts"][index]
        lab = labels.get((qid, docno))
        items.append(
            {
                "key": f"{qid}\t{docno}",
                "query_id": qid,
                "query": record.get("query"),
                "docno": docno,
                "index": index,
                "rank": index + 1,
                "text": texts.get(qid, {}).get(docno),
                "verdict": verdict.get("verdict"),
                "grade": verdict.get("grade"),
                "p_yes": verdict.get("p_yes"),
                "threshold": data.threshold,
                "reason": verdict.get("reason", ""),
                "template_id": verdict.get("template_id"),
                "inclusion": inclusion,
                "design": design,
                "label": None if lab is None else lab.label,
            }
        )
    return {
        "job": job["id"],
        "items": items,
        "count": len(items),
        "unlabelled": sum(1 for it in items if it["label"] is None),
    }


def _qrels_text(review: Review) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "labels.qrels"
        labels_to_qrels(review.store.label_set(collection=review.collection), path)
        return path.read_text(encoding="utf-8")


def _read_labels(raw: bytes, reviewer: str, scale: str | None, collection: str) -> list[tuple[int, Label]]:
    """The body as a labels file: its bytes as sent, so that every check of
    :func:`judge.store.read_label_file` (invalid UTF-8 included) names the bad line."""
    suffix = ".jsonl" if raw.lstrip().startswith(b"{") else ".qrels"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("labels" + suffix)
        path.write_bytes(raw)
        return read_label_lines(path, reviewer=reviewer, scale=scale, collection=collection)  # type: ignore[arg-type]


__all__ = ["LabelIn", "SampleIn", "parse_label", "reviewer_of", "router"]
