"""The review routes of ``judge serve``: a job's review queue, its human labels, the judge's
agreement with people, calibration from the reviews, and the label store's import and
export. What they serve is computed by :class:`~judge.server._review.Review`.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from judge.batch import label_for_passage
from judge.io import InputError
from judge.metrics import CalibrationError, ScaleError, check_scale, resolve_mapping
from judge.server import _bounds
from judge.server._app_state import State, field_error
from judge.server._review import CalibrateIn, Conflict, Review, serve_flags
from judge.server._viewer_routes import index_page
from judge.store import Label, labels_to_qrels, read_label_file, trec_token

ANONYMOUS = "anonymous"
AUDIT_WINDOW = 1000  # queue items searched for a label's audit flag when the client does not say


class LabelIn(BaseModel):
    """``POST /v1/jobs/{id}/labels``: one human label of one of the job's passages."""

    model_config = ConfigDict(extra="forbid")

    query_id: str = Field(min_length=1, max_length=1000)
    docno: str | None = Field(default=None, min_length=1, max_length=1000)
    index: int | None = Field(default=None, ge=0)
    label: int | str
    comment: str | None = Field(default=None, max_length=4000)
    reviewer: str | None = Field(default=None, min_length=1, max_length=200)
    audit: bool | None = None
    scale: Literal["binary", "graded"] | None = None  # the label's scale (default: the job's)


def reviewer_of(request: Request, given: str | None) -> str:
    """Who is labelling: the signed-in principal (a name given at sign-in or the key's label;
    ``anonymous`` when auth is off counts as none), else the body's ``reviewer``, else anonymous."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, str) and principal.strip() and principal.strip() != ANONYMOUS:
        return principal.strip()
    if given is not None and given.strip():
        return given.strip()
    return ANONYMOUS


def parse_label(value: int | str, scale: str, job_scale: str | None = None) -> int:
    """A label as given (``y``/``n``/``yes``/``no``/0/1 on the binary scale, 0-3 on the
    graded one) as an integer on ``scale``; a label of the other scale is refused naming both
    (``job_scale``: the job's, when the label states its own)."""
    text = str(value).strip().lower()
    job = job_scale or scale
    if scale == "binary":
        if text in ("y", "yes", "1"):
            return 1
        if text in ("n", "no", "0"):
            return 0
        if text in ("2", "3"):
            raise field_error(
                ("body", "label"),
                f"label {value!r} is a graded (0-3) label but the job is {job} (y/n, 0/1); "
                'send "scale": "graded" with it (mapped at the server\'s --labels-level)',
            )
        raise field_error(("body", "label"), f"label {value!r} is not on the binary scale (y/n, 0/1)")
    if text in ("y", "yes", "n", "no"):
        raise field_error(
            ("body", "label"),
            f"label {value!r} is a binary (y/n) label but the {'label' if job_scale else 'job'} is graded "
            "(0-3); give a grade",
        )
    if text in ("0", "1", "2", "3"):
        return int(text)
    raise field_error(("body", "label"), f"label {value!r} is not on the graded scale (0-3)")


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


def _drawn_for_audit(review: Review, job: Mapping[str, Any], record: Mapping[str, Any], index: int) -> bool:
    """Whether the queue drew this passage uniformly among those a reviewer is shown."""
    items = review.queue(job, AUDIT_WINDOW)
    docno = str(record["docnos"][index])
    return any(q.audit for q in items if q.docno == docno and q.qid == trec_token(record["id"]))


# ------------------------------------------------------------------------------ routes
router = APIRouter(route_class=_bounds.ParsedBodyRoute)  # JSON bodies checked as on every route


@router.get("/v1/jobs/{job_id}/queue", tags=["review"])
async def queue(
    job_id: str,
    request: Request,
    state: State,
    offset: int = Query(default=0, ge=0),
    limit: int = Query(default=50, ge=1, le=1000),
) -> dict[str, Any]:
    """The job's (or comparison's) verdicts nobody has labelled yet, in review order:
    the largest expected change of the figures first (the chance a label flips the
    verdict, from P(yes) against the threshold, times how much the flip moves the job's
    mAP; in a comparison, the rank weight, doubled for a passage in one system's list
    and not another's); every fifth item is an ``audit`` item drawn uniformly. Each
    item: query, passage text, rank, verdict, grade, P(yes), threshold, reason,
    template, audit flag. ``signed_in``: the caller's
    name when the server knows it (then labels are stored under it)."""
    review, job = state.review, state.job(job_id)
    items = await asyncio.to_thread(review.queue, job, offset + limit)
    page = items[offset : offset + limit]
    total = await asyncio.to_thread(review.pending, job)
    data = review.data(job)
    return {
        "job": job_id,
        "kind": job["kind"],
        "signed_in": reviewer_of(request, None) if reviewer_of(request, None) != ANONYMOUS else None,
        "scale": data.scale,
        "threshold": data.threshold,
        "total": total,
        "labelled": data.applied,
        "offset": offset,
        "limit": limit,
        "items": [review.item(job, q) for q in page],
    }


@router.post("/v1/jobs/{job_id}/labels", tags=["review"], status_code=201)
async def add_label(job_id: str, body: LabelIn, request: Request, state: State) -> JSONResponse:
    """Label one passage of the job on its scale (binary: ``y``/``n``/0/1; graded:
    0-3; the other scale is refused naming both). Stored in the label store with the
    judge verdict and P(yes) it replaces, under the caller's name (the signed-in name or
    the key's label), else the body's ``reviewer``, else ``anonymous``. Answers the
    stored label and the job's refreshed review figures."""
    review, job = state.review, state.job(job_id)
    record, index = await asyncio.to_thread(review.find, job, body.query_id, body.docno, body.index)
    job_scale = str(record.get("mode") or review.data(job).scale)
    scale = body.scale or job_scale
    value = parse_label(body.label, scale, job_scale)
    if scale != job_scale:
        _check_mapping(review, scale, job_scale)
    audit = body.audit
    if audit is None:
        audit = await asyncio.to_thread(_drawn_for_audit, review, job, record, index)
    label = label_for_passage(
        record,
        index,
        value,
        reviewer_of(request, body.reviewer),
        scale=scale,  # type: ignore[arg-type]
        comment=body.comment or "",
        audit=bool(audit),
        collection=review.collection,
    )
    stored = await asyncio.to_thread(review.add, label)
    data = await asyncio.to_thread(review.data, state.job(job_id))
    total = await asyncio.to_thread(review.pending, state.job(job_id))
    return JSONResponse(
        {"label": stored.as_dict(), "review": {**data.review, "queue": total}},
        status_code=201,
    )


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
    """Refit the template's P(yes) threshold on the job's labelled items (kappa before
    and after on held-out folds) and store it as a named calibration; never changes the
    shipped default. Refused (422) with fewer than 30 labels or one class."""
    job = state.job(job_id)
    try:
        cal = await asyncio.to_thread(state.review.calibrate, job, body or CalibrateIn())
    except CalibrationError as exc:
        raise field_error(("body", exc.field), exc.message) from None
    except Conflict as exc:
        return JSONResponse({"detail": str(exc)}, status_code=409)
    return JSONResponse(cal, status_code=201)


@router.get("/v1/labels", tags=["review"], response_model=None)
async def export_labels(
    state: State,
    format: str = Query(default="json", pattern="^(json|qrels)$"),
    history: bool = False,
) -> Response:
    """Every human label: ``format=qrels`` the resolved label of each passage as TREC
    qrels (``qid 0 docno label``); ``format=json`` every reviewer's latest label with its
    provenance (``history=true``: every change) and the conflicts."""
    review = state.review
    if format == "qrels":
        text = await asyncio.to_thread(_qrels_text, review)
        return PlainTextResponse(text, headers={"Content-Disposition": 'inline; filename="labels.qrels"'})
    rows = review.store.history if history else review.store.latest
    labels = await asyncio.to_thread(rows, collection=review.collection)
    return JSONResponse(
        {
            "labels": [x.as_dict() for x in labels],
            "conflicts": review.conflicts(None),
            "count": len(labels),
        }
    )


@router.post("/v1/labels", tags=["review"])
async def import_labels(
    request: Request,
    state: State,
    reviewer: str | None = Query(default=None, min_length=1, max_length=200),
    scale: str | None = Query(default=None, pattern="^(binary|graded)$"),
) -> dict[str, Any]:
    """Import labels: TREC qrels text (each line a label by ``reviewer``, the caller
    when signed in; ``scale`` default: binary when every grade is 0/1) or the JSONL that
    ``format=json`` lists one object a line."""
    raw = await request.body()
    review = state.review
    who = reviewer_of(request, reviewer)
    try:
        labels = await asyncio.to_thread(_read_labels, raw, who, scale, review.collection)
    except InputError as err:
        raise field_error(
            ("body", err.field) if err.field else ("body",),
            f"line {err.line}: {err.message}" if err.line else err.message,
        ) from None
    stored = await asyncio.to_thread(review.store.put_many, labels)
    review.bump()
    return {"imported": len(stored)}


@router.get("/jobs/{job_id}/review", include_in_schema=False)
async def review_page(job_id: str) -> FileResponse:
    return index_page()


def _qrels_text(review: Review) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "labels.qrels"
        labels_to_qrels(review.store.label_set(collection=review.collection), path)
        return path.read_text(encoding="utf-8")


def _read_labels(raw: bytes, reviewer: str, scale: str | None, collection: str) -> list[Label]:
    """The body as a labels file: its bytes as sent, so that every check of
    :func:`judge.store.read_label_file` (invalid UTF-8 included) names the bad line."""
    suffix = ".jsonl" if raw.lstrip().startswith(b"{") else ".qrels"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("labels" + suffix)
        path.write_bytes(raw)
        return read_label_file(path, reviewer=reviewer, scale=scale, collection=collection)  # type: ignore[arg-type]


__all__ = ["LabelIn", "parse_label", "reviewer_of", "router"]
