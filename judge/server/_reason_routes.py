"""Reasons on request on the review page: ``POST /v1/jobs/{id}/reasons`` asks the judge for
the reason of one pooled pair of a finished comparison that has none yet.

A comparison judges verdicts and P(yes) first and asks reasons only for the pairs its report
shows and its review queue's first items (:func:`judge.server._compare_job.run_compare`); a
reviewer who opens any other pair gets its reason here: one explaining call through the
pool's engine, under the explaining config's cache key, kept in the job's ``reasons/`` so a
second open costs no call. Two opens of the same pair at once make one call (one lock per
pair). The pooled verdict and P(yes) never change: a reason is shown only beside the verdict
it explains. Who asked and when come from the server (the caller's principal, the server's
clock), never from the body. A backend that refuses for good answers 502 and one that gave
no reason this time 503, both naming the pair; the page says so and offers to ask again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from judge.backends import BackendError, PermanentError, redact
from judge.io import MAX_ID_CHARS
from judge.judging import PassageVerdict
from judge.server import _asked_reasons, _bounds
from judge.server._app_state import AppState, NotCompare, State, field_error, json_error
from judge.server._failures import upstream_status
from judge.server._job_kind import job_spec
from judge.server._kinds import job_kind
from judge.server._review_routes import reviewer_of
from judge.store import trec_token


class ReasonIn(BaseModel):
    """``POST /v1/jobs/{id}/reasons``: the pooled pair whose reason the reviewer opened."""

    model_config = ConfigDict(extra="forbid")

    query_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    docno: str = Field(min_length=1, max_length=MAX_ID_CHARS)


def pooled_verdict(
    state: AppState, job: Mapping[str, Any], body: ReasonIn
) -> tuple[str, str, PassageVerdict]:
    """The comparison's pooled verdict of the pair (its query id or query token, as the
    queue names it): ``(query id, docno, verdict)``, or a 422 naming the field."""
    records = state.review.data(job).records
    record = next((r for r in records if str(r["id"]) == body.query_id), None) or next(
        (r for r in records if trec_token(r["id"]) == body.query_id), None
    )
    if record is None:
        raise field_error(("body", "query_id"), f"the comparison has no judged query {body.query_id!r}")
    docnos = [str(d) for d in record["docnos"]]
    if body.docno not in docnos:
        raise field_error(("body", "docno"), f"query {body.query_id!r} has no judged passage {body.docno!r}")
    raw = record["verdicts"][docnos.index(body.docno)]
    return str(record["id"]), body.docno, PassageVerdict.model_validate(raw, strict=False)


def _unavailable(qid: str, docno: str, why: str) -> Any:
    """503: the judge gave no reason for the pair this time (nothing was kept; ask again)."""
    return json_error(
        503,
        f"the judge gave no reason for query {qid!r}, passage {docno!r}"
        + (f" ({why})" if why else " (the explaining call failed)")
        + "; ask again",
        query_id=qid,
        docno=docno,
        cause="backend",
        headers={"Retry-After": "30"},
    )


router = APIRouter(route_class=_bounds.ParsedBodyRoute)


@router.post("/v1/jobs/{job_id}/reasons", tags=["review"])
async def ask_reason(job_id: str, body: ReasonIn, request: Request, state: State) -> Any:
    """The judge's reason for one pooled pair of a finished comparison (``query_id`` as the
    queue names it, ``docno``), asked now if nobody asked it yet: one explaining call, kept
    for the next open (``calls``: the calls this request made, 0 when kept). ``asked``: who
    first asked it on the review page and when (the server's principal and clock; null for
    the reasons the job asked itself). The verdict and P(yes) are the pool's, unchanged.
    409: the job is not done, the pair is unjudged, or the job gets no reasons on request
    (``explain``/``probability`` set in its options, or listwise); 502: the LLM upstream
    refused the request for good (``backend``, ``upstream_status``); 503 (``Retry-After``):
    the judge gave no reason this time (both name the pair; nothing failed is kept)."""
    job = state.job(job_id)
    if not job_kind(job["kind"]).pooled:
        raise NotCompare(job_id)
    if job["status"] != "done":
        return json_error(409, f"job is {job['status']}; reasons are asked once the comparison is done")
    qid, docno, verdict = await asyncio.to_thread(pooled_verdict, state, job, body)
    pair = {"query_id": qid, "docno": docno}
    answer: dict[str, Any] = {**pair, "verdict": verdict.verdict, "p_yes": verdict.p_yes}
    if verdict.reason:
        return {**answer, "reason": verdict.reason, "calls": 0, "asked": None}
    if not verdict.judged:
        return json_error(
            409,
            f"query {qid!r}, passage {docno!r} is unjudged ({verdict.error}); "
            f"POST /v1/jobs/{job_id}/retry asks it again",
            **pair,
        )
    rt = state.runtime
    spec = job_spec(job["options"], rt.spec)
    if _asked_reasons.explaining_config(rt.backend, spec, job["options"]) is None:
        return json_error(
            409,
            "this comparison was judged without reasons on request (its options set explain, "
            "probability or listwise); submit it with explain: true for every reason",
            **pair,
        )
    job_dir = state.manager.job_dir(job_id)
    key = (job_id, qid, docno)
    lock = state.reason_locks.get(key)
    if lock is None:
        lock = state.reason_locks[key] = asyncio.Lock()
    async with lock:  # two opens of one pair: the second finds the first's reason
        kept = (await asyncio.to_thread(_asked_reasons.explained, job_dir)).get((qid, docno))
        if kept is not None and kept.verdict == verdict.verdict:
            asked = await asyncio.to_thread(_asked_reasons.asked_by, job_dir, qid, docno)
            return {**answer, "reason": kept.reason, "calls": 0, "asked": asked}
        try:
            explained = await _asked_reasons.explain_one(
                job_dir,
                qid,
                docno,
                rt,
                spec,
                job["options"],
                settings={**rt.settings, "job": job_id},
            )
        except PermanentError as exc:  # refused for good: as every route answers it
            status = upstream_status(exc)
            return json_error(
                502,
                redact(
                    f"the LLM backend {rt.backend.name} refused the reason of query {qid!r}, passage "
                    f"{docno!r} ({f'HTTP {status}' if status is not None else 'a permanent error'}): "
                    f"{type(exc).__name__}: {exc}"
                ),
                **pair,
                backend=rt.backend.name,
                upstream_status=status,
            )
        except BackendError as exc:
            return _unavailable(qid, docno, redact(f"{type(exc).__name__}: {exc}"))
        if explained is None or not explained.judged or not explained.reason:
            return _unavailable(qid, docno, (explained.error if explained is not None else None) or "")
        if explained.verdict != verdict.verdict:
            return json_error(
                502,
                f"the judge explained {explained.verdict!r} for query {qid!r}, passage {docno!r}, "
                f"not the pooled {verdict.verdict!r}; the pooled verdict stands, without a reason",
                **pair,
            )
        calls = 0 if explained.cached else explained.attempts
        when = datetime.now(UTC).isoformat(timespec="seconds")
        asked = await asyncio.to_thread(
            _asked_reasons.record_asked, job_dir, qid, docno, reviewer_of(request, None), when, calls
        )
    return {**answer, "reason": explained.reason, "calls": calls, "asked": asked}


__all__ = ["ReasonIn", "router"]
