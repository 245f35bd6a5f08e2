"""People correct the judge, over HTTP: a job's review queue, its human labels, the judge's
agreement with people, calibration from the reviews, and the labels' effect on the job's
records and summary.

The service only serves; the rules live in the label core (:mod:`judge.store`'s label store,
:mod:`judge.batch`'s label application, queue order, agreement and calibration):

* an *item* is one judged passage of a job (a scoring job's output, or a comparison's pooled
  verdicts) with its query, passage text, rank, verdict, P(yes), threshold and reason;
* a label is stored through the label store with the verdict and P(yes) it replaces, under
  the reviewer: the caller's name (``request.state.principal``: a name given at sign-in or
  the API key's label), else a ``reviewer`` field in the body, else ``anonymous``;
* a job's records and summary are recomputed with the latest human labels applied (the
  judge's figures stay beside them), cached per job until its output or the store changes.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from judge.batch import (
    LabelOutcome,
    agreement_items,
    apply_labels,
    comparison_review_queue,
    job_agreement,
    job_review_queue,
    label_for_passage,
    summarize_records,
)
from judge.io import DEFAULT_MAX_PASSAGE_CHARS, InputError, iter_dataset
from judge.judging import DEFAULT_BORDERLINE_MARGIN, QueueItem, borderline_verdicts, threshold_of
from judge.metrics import CalibrationError, ScaleError, calibrate_threshold, check_scale, resolve_mapping
from judge.server import _bounds, _engine
from judge.server._app_state import State
from judge.server._jobs import config_of
from judge.server._viewer_routes import index_page
from judge.store import (
    DEFAULT_COLLECTION,
    Calibration,
    Label,
    LabelSet,
    LabelStore,
    calibrated_config,
    labels_to_qrels,
    read_label_file,
    trec_token,
)
from judge.systems import ReportFolder

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


class CalibrateIn(BaseModel):
    """``POST /v1/jobs/{id}/calibrate``: refit the template's threshold on the job's labels."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=100, pattern=r"^[\w.\-]+$")
    folds: int | None = Field(default=None, ge=2, le=20)
    seed: int = 0
    # dry_run: report only; force: store a refit that does not help (not better beyond noise)
    dry_run: bool = False
    force: bool = False


def serve_flags(exc: ScaleError) -> str:
    """A scale error's message naming the server's flags that state the mapping."""
    text = exc.message.replace("labels_level=L", "judge serve --labels-level L").replace(
        "labels_yes_grade=G", "judge serve --labels-yes-grade G"
    )
    return text if "judge serve" in text else f"{text} (judge serve --labels-level / --labels-yes-grade)"


class Conflict(Exception):
    """The job's labels cannot be compared with its verdicts as the server is set up (409)."""


def reviewer_of(request: Request, given: str | None) -> str:
    """Who is labelling: the signed-in principal (a name given at sign-in or the key's label;
    ``anonymous`` when auth is off counts as none), else the body's ``reviewer``, else anonymous."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, str) and principal.strip() and principal.strip() != ANONYMOUS:
        return principal.strip()
    if given is not None and given.strip():
        return given.strip()
    return ANONYMOUS


def _fail(loc: tuple[str, ...], message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": loc, "msg": message, "type": "value_error"}])


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
            raise _fail(
                ("body", "label"),
                f"label {value!r} is a graded (0-3) label but the job is {job} (y/n, 0/1); "
                'send "scale": "graded" with it (mapped at the server\'s --labels-level)',
            )
        raise _fail(("body", "label"), f"label {value!r} is not on the binary scale (y/n, 0/1)")
    if text in ("y", "yes", "n", "no"):
        raise _fail(
            ("body", "label"),
            f"label {value!r} is a binary (y/n) label but the {'label' if job_scale else 'job'} is graded "
            "(0-3); give a grade",
        )
    if text in ("0", "1", "2", "3"):
        return int(text)
    raise _fail(("body", "label"), f"label {value!r} is not on the graded scale (0-3)")


# ------------------------------------------------------------------------------ items
@dataclass(frozen=True)
class JobFiles:
    """Where a job's judged records and their input (the passages' texts) are."""

    records: Path
    dataset: Path


def job_files(job_dir: Path, kind: str) -> JobFiles:
    if kind == "compare":
        folder = ReportFolder(job_dir)
        return JobFiles(folder.pool_judged, folder.pool_input)
    return JobFiles(job_dir / _engine.OUTPUT_NAME, job_dir / _engine.INPUT_NAME)


def read_records(path: Path) -> list[dict[str, Any]]:
    lines, _ = _engine.complete_lines(path)
    return [json.loads(x) for x in lines if x.strip()]


def passage_texts(path: Path, options: Mapping[str, Any], *, pool: bool) -> dict[str, dict[str, str]]:
    """``{query id: {docno: text}}`` of a job's saved input (a pool's input has no field map)."""
    out: dict[str, dict[str, str]] = {}
    if not path.exists():
        return out
    for item in iter_dataset(
        path,
        field_map={} if pool else (options.get("map") or {}),
        max_passage_chars=int(options.get("max_passage_chars") or DEFAULT_MAX_PASSAGE_CHARS),
    ):
        if isinstance(item, InputError):
            continue
        out[item.id] = {p.docno: p.text for p in item.passages}
    return out


def scale_of(job: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    for rec in records:
        if rec.get("mode"):
            return str(rec["mode"])
    return str(job["options"].get("mode") or "binary")


def _stamp(*paths: Path) -> tuple[tuple[int, int], ...]:
    """A cheap fingerprint of files (size, mtime): what a cached view depends on."""
    out = []
    for path in paths:
        try:
            st = path.stat()
        except FileNotFoundError:
            out.append((-1, 0))
        else:
            out.append((st.st_size, st.st_mtime_ns))
    return tuple(out)


@dataclass
class JobData:
    """One job's records as the judge left them, the same with the human labels applied,
    the recomputed summary and what the review needs (kept until a file it came from changes)."""

    records: list[dict[str, Any]]
    labelled: list[dict[str, Any]]
    scale: str
    threshold: float | None
    applied: int
    summary: dict[str, Any] | None
    review: dict[str, Any]
    labels: list[Label]  # every reviewer's latest label on the job's passages


class Review:
    """The label store of one server and the job views that depend on it."""

    def __init__(
        self,
        store: LabelStore,
        job_dir: Callable[[str], Path],
        *,
        collection: str = DEFAULT_COLLECTION,
        level: int | None = None,
        yes_grade: int | None = None,
    ) -> None:
        self.store = store
        self.job_dir = job_dir
        self.collection = collection
        # the stated mapping for labels on another scale than a job's (``judge serve
        # --labels-level/--labels-yes-grade``); without it such labels are an error naming both
        self.level = level
        self.yes_grade = yes_grade
        self.revision = 0  # bumped by every write through this server
        self._cache: dict[str, tuple[Any, JobData]] = {}
        self._texts: dict[str, tuple[Any, dict[str, dict[str, str]]]] = {}
        self._ranks: dict[str, dict[str, dict[str, list[str]]]] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        path: Path,
        job_dir: Callable[[str], Path],
        *,
        level: int | None = None,
        yes_grade: int | None = None,
    ) -> Review:
        return cls(LabelStore(path), job_dir, level=level, yes_grade=yes_grade)

    def close(self) -> None:
        self.store.close()

    def bump(self) -> None:
        """The store changed through this server: cached views are stale."""
        with self._lock:
            self.revision += 1

    # --- reading a job -------------------------------------------------------------------
    def _store_stamp(self) -> Any:
        """What the store's state is known by: this server's writes, and the files (a
        ``judge labels import`` by another process changes them)."""
        path = self.store.path
        return (self.revision, _stamp(path, path.with_name(path.name + "-wal")))

    def data(self, job: Mapping[str, Any]) -> JobData:
        """The job's records, labelled records, summary and review figures (cached)."""
        files = job_files(self.job_dir(job["id"]), job["kind"])
        key = (_stamp(files.records), self._store_stamp(), job["status"], job["finished"])
        with self._lock:
            hit = self._cache.get(job["id"])
            if hit is not None and hit[0] == key:
                return hit[1]
        data = self._compute(job, files)
        with self._lock:
            self._cache[job["id"]] = (key, data)
            while len(self._cache) > 64:
                self._cache.pop(next(iter(self._cache)))
        return data

    def _compute(self, job: Mapping[str, Any], files: JobFiles) -> JobData:
        records = read_records(files.records)
        scale = scale_of(job, records)
        threshold = threshold_of(records[0]) if records else None  # the one its verdicts were decided at
        k = _k_of(job, records)
        keys = {(trec_token(r["id"]), str(d)) for r in records for d in r["docnos"]}
        latest = [x for x in self.store.latest(collection=self.collection) if x.key in keys]
        error: str | None = None
        try:
            outcome = apply_labels(
                records,
                LabelSet(latest, source="the label store"),
                k=k,
                level=self.level,
                yes_grade=self.yes_grade,
            )
        except ScaleError as exc:  # labels on another scale and no stated mapping
            error = serve_flags(exc)
            outcome = LabelOutcome(records, 0, 0, 0, 0, {})
        labelled = outcome.records if outcome.applied else records
        stored = job.get("summary")
        summary: dict[str, Any] | None = None
        margin = float((stored or {}).get("borderline_margin") or DEFAULT_BORDERLINE_MARGIN)
        borderline = _borderline(labelled, threshold, margin)
        if stored is not None and job["kind"] == "score":
            summary = dict(stored)
            if outcome.applied:
                summary.update(summarize_records(labelled, k))
                summary["judge_only"] = stored.get("judge")
                summary["borderline"] = borderline
        judge_map = ((stored or {}).get("judge") or {}).get("map") if job["kind"] == "score" else None
        review = {
            "scale": scale,
            "threshold": threshold,
            "human": outcome.applied,
            "changed": outcome.changed,
            "queries": outcome.queries,
            "borderline": borderline,
            "map": ((summary or {}).get("judge") or {}).get("map"),
            "map_judge": judge_map,
            "mapping": outcome.mapping if outcome.applied else None,
            "labels": len(latest),
            "error": error,
        }
        return JobData(records, labelled, scale, threshold, outcome.applied, summary, review, latest)

    def texts(self, job: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        files = job_files(self.job_dir(job["id"]), job["kind"])
        key = _stamp(files.dataset)
        with self._lock:
            hit = self._texts.get(job["id"])
            if hit is not None and hit[0] == key:
                return hit[1]
        texts = passage_texts(files.dataset, job["options"], pool=job["kind"] == "compare")
        with self._lock:
            self._texts[job["id"]] = (key, texts)
            while len(self._texts) > 16:
                self._texts.pop(next(iter(self._texts)))
        return texts

    def with_calibration(self, options: dict[str, Any], json_body: bool) -> dict[str, Any]:
        """A job's options with its named ``calibration``'s P(yes) threshold (checked against
        the job's template); 422 naming ``options.calibration`` when it does not fit."""
        name = options.get("calibration")
        if not name:
            return options
        loc = ("body", "options", "calibration") if json_body else ("query", "calibration")
        try:
            config = calibrated_config(config_of(options), str(name), path=self.store.path)
        except InputError as err:
            raise _fail(loc, err.message) from None
        except ValueError as exc:  # the job's other options do not make a config
            raise _fail(loc, str(exc)) from None
        return {**options, "p_yes_threshold": config.p_yes_threshold}

    # --- what other routes show ----------------------------------------------------------
    def view(self, job: Mapping[str, Any], view: dict[str, Any]) -> dict[str, Any]:
        """``GET /v1/jobs/{id}``: the summary with the human labels applied (the judge's own
        figures under ``summary.judge_only``) and a ``review`` block."""
        if job["summary"] is None and job["status"] != "done":
            return view
        data = self.data(job)
        out = dict(view)
        if data.summary is not None:
            out["summary"] = data.summary
        out["review"] = data.review
        return out

    def lines(self, job: Mapping[str, Any], lines: list[bytes]) -> list[bytes]:
        """A job's result lines with the human labels applied (unchanged without labels)."""
        data = self.data(job)
        if not data.applied:
            return lines
        by_id = {str(r["id"]): r for r in data.labelled}
        out = []
        for line in lines:
            rec = json.loads(line)
            new = by_id.get(str(rec["id"]))
            out.append(line if new is None else json.dumps(new, ensure_ascii=False).encode("utf-8"))
        return out

    def detail(self, job: Mapping[str, Any], detail: dict[str, Any]) -> dict[str, Any]:
        """One query's detail with the human labels applied to its record and passages."""
        data = self.data(job)
        qid = str(detail["record"]["id"])
        new = next((r for r in data.labelled if str(r["id"]) == qid), None)
        if new is None or not data.applied:
            return detail
        passages = [dict(p, verdict=v) for p, v in zip(detail["passages"], new["verdicts"], strict=True)]
        return {**detail, "record": new, "passages": passages}

    def export_records(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self.data(job).labelled

    # --- the queue -----------------------------------------------------------------------
    def queue(self, job: Mapping[str, Any], limit: int | None = None) -> list[QueueItem]:
        """The first ``limit`` items of the job's review queue (all: None)."""
        data = self.data(job)
        labels = LabelSet(data.labels, source="the label store")
        if job["kind"] == "compare":
            return comparison_review_queue(data.records, self._rankings(job), labels, limit=limit)
        return job_review_queue(data.records, labels, limit=limit)

    def pending(self, job: Mapping[str, Any]) -> int:
        """How many of the job's passages nobody has labelled (the queue's full length)."""
        data = self.data(job)
        labels = LabelSet(data.labels, source="the label store")
        ranked: set[tuple[str, str]] | None = None
        if job["kind"] == "compare":
            ranked = {(q, d) for lists in self._rankings(job).values() for q, ds in lists.items() for d in ds}
        keys: set[tuple[str, str]] = set()
        for r in data.records:
            qid = trec_token(r["id"])
            query = r.get("query") if isinstance(r.get("query"), str) else None
            for d in r["docnos"]:
                key = (qid, str(d))
                if (ranked is None or key in ranked) and labels.lookup(qid, str(d), query) is None:
                    keys.add(key)
        return len(keys)

    def _rankings(self, job: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
        """Each system's ranking of a comparison (its inputs never change: kept per job)."""
        with self._lock:
            hit = self._ranks.get(job["id"])
        if hit is None:
            hit = _engine.system_rankings(self.job_dir(job["id"]), job["options"])
            with self._lock:
                self._ranks[job["id"]] = hit
                while len(self._ranks) > 16:
                    self._ranks.pop(next(iter(self._ranks)))
        return hit

    def item(self, job: Mapping[str, Any], q: QueueItem) -> dict[str, Any]:
        c = q.candidate
        data = self.data(job)
        texts = self.texts(job)
        extra = dict(c.extra)
        rank = min(c.ranks.values()) if c.ranks else None
        return {
            "key": f"{c.qid}\t{c.docno}",
            "position": q.position,
            "query_id": c.qid,
            "query": c.query,
            "docno": c.docno,
            "index": extra.get("index"),
            "rank": rank,
            "ranks": dict(c.ranks) if job["kind"] == "compare" else None,
            "systems": sorted(c.ranks) if job["kind"] == "compare" else None,
            "text": texts.get(c.qid, {}).get(c.docno),
            "verdict": c.verdict,
            "grade": extra.get("grade"),
            "p_yes": c.p_yes,
            "threshold": data.threshold,
            "reason": extra.get("reason", ""),
            "template_id": c.template_id,
            "audit": q.audit,
            "distance": round(q.distance, 6),
            "weight": round(q.weight, 6),
            "priority": round(q.priority, 6),
        }

    # --- labels --------------------------------------------------------------------------
    def find(
        self, job: Mapping[str, Any], query_id: str, docno: str | None, index: int | None
    ) -> tuple[dict[str, Any], int]:
        """The record and passage index a label names (422 naming the field if none)."""
        data = self.data(job)
        qid = trec_token(query_id)
        record = next((r for r in data.records if trec_token(r["id"]) == qid), None)
        if record is None:
            raise _fail(("body", "query_id"), f"job has no finished query {query_id!r}")
        docnos = [str(d) for d in record["docnos"]]
        if docno is not None:
            if docno not in docnos:
                raise _fail(("body", "docno"), f"query {query_id!r} has no passage {docno!r}")
            return record, docnos.index(docno)
        if index is None or index >= len(docnos):
            raise _fail(("body", "docno"), "give the passage's docno (or its 0-based index)")
        return record, index

    def add(self, label: Label) -> Label:
        stored = self.store.put(label)
        self.bump()
        return stored

    def conflicts(self, job: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """Items whose reviewers' latest labels differ (of one job, or of the store)."""
        found = self.store.conflicts(collection=self.collection)
        keys: set[tuple[str, str]] | None = None
        if job is not None:
            keys = {(trec_token(r["id"]), str(d)) for r in self.data(job).records for d in r["docnos"]}
        out = []
        for c in found:
            if keys is not None and (c.qid, c.docno) not in keys:
                continue
            out.append(
                {
                    "query_id": c.qid,
                    "docno": c.docno,
                    "labels": [
                        {"reviewer": r, "label": v, "scale": c.scales.get(r)}
                        for r, v in sorted(c.labels.items())
                    ],
                }
            )
        return out

    def agreement(self, job: Mapping[str, Any]) -> dict[str, Any]:
        data = self.data(job)
        try:
            report = job_agreement(data.records, data.labels, level=self.level, resamples=1000, seed=0)
        except ScaleError as exc:
            raise Conflict(serve_flags(exc)) from None
        out = report.as_dict()
        out["scale"] = data.scale
        out["conflicts"] = self.conflicts(job)
        out["human"] = data.applied
        return out

    def calibrate(self, job: Mapping[str, Any], body: CalibrateIn) -> dict[str, Any]:
        data = self.data(job)
        try:
            items, _ = agreement_items(data.records, data.labels, level=self.level)
        except ScaleError as exc:
            raise Conflict(serve_flags(exc)) from None
        with_p = [i for i in items if i.p_yes is not None]
        conv = (data.records[0].get("conventions") or {}) if data.records else {}
        template = str(conv.get("template_id") or "")
        current = data.threshold if data.threshold is not None else 0.5
        result = calibrate_threshold(
            [float(i.p_yes or 0.0) for i in with_p],
            [i.human for i in with_p],
            current_threshold=current,
            folds=body.folds or 5,
            seed=body.seed,
        )
        name = body.name or f"{template}@{job['id']}"
        cal = Calibration(
            name=name,
            template_id=template,
            threshold=result.threshold,
            template_hash=conv.get("template_hash"),
            previous_threshold=current,
            report={**result.as_dict(), "job": job["id"], "labels": len(with_p)},
        )
        # Stored (so a job can select it) only when the refit helps beyond noise, or forced.
        stored = not body.dry_run and (result.helps or body.force)
        if stored:
            cal = self.store.save_calibration(cal)
            self.bump()
        return {**cal.as_dict(), "stored": stored, "helps": result.helps, "verdict": result.verdict}


def _k_of(job: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> list[int]:
    k = job["options"].get("k")
    if k:
        return [int(c) for c in k]
    if records:
        return [int(c) for c in (records[0].get("ndcg") or {})] or [5, 10]
    return [5, 10]


def _borderline(records: Sequence[Mapping[str, Any]], threshold: float | None, margin: float) -> int:
    """Verdicts within ``margin`` of the threshold (people's labels never are: P(yes) 1/0)."""
    if threshold is None or not records:
        return 0
    gt = int((records[0].get("conventions") or {}).get("grade_threshold", 2))
    return len(borderline_verdicts(records, threshold, margin, gt))


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
        raise _fail(("body", "scale"), serve_flags(exc)) from None


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
        raise _fail(("body", exc.field), exc.message) from None
    except Conflict as exc:
        return JSONResponse({"detail": str(exc)}, status_code=409)
    return JSONResponse(cal, status_code=201 if cal["stored"] else 200)


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
        raise _fail(
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


__all__ = ["CalibrateIn", "LabelIn", "Review", "parse_label", "reviewer_of", "router"]
