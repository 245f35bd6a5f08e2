"""People correct the judge, over HTTP: a job's review queue, its human labels, the judge's
agreement with people, calibration from the reviews, and the labels' effect on the job's
records and summary.

The service only serves; the rules live in the label core (:mod:`judge.store`'s label store,
:mod:`judge.batch`'s label application, queue order, agreement and calibration):

* an *item* is one judged passage of a job (a scoring job's output, or a comparison's pooled
  verdicts) with its query, passage text, rank, verdict, P(yes), threshold and reason;
* a label is stored through the label store with the verdict and P(yes) it replaces, under
  the reviewer: with keys, the caller's principal (``request.state.principal``: the key's
  label, ``/`` and the name given at sign-in); without keys, a ``reviewer`` field in the body,
  else ``anonymous``. Its time is the store's clock; its audit flag is the queue's recorded
  draw, never the body's;
* an import (``POST /v1/labels``) keeps each line's reviewer without keys or for an admin
  key (``judge serve --admin-keys``); another key's import naming anyone but the caller is
  refused (403). Each line names the server's collection or is refused (422);
* a job's records and summary are recomputed with the latest human labels applied (the
  judge's figures stay beside them), cached per job until its output or the store changes
  (another process's write); a label saved through this server updates the cached figures
  of its job incrementally (that query's record, then the totals).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from judge.batch import (
    LabelOutcome,
    agreement_items,
    apply_labels,
    comparison_review_queue,
    job_agreement,
    job_review_queue,
    label_changed,
    relabel_record,
    summarize_records,
)
from judge.io import DEFAULT_MAX_PASSAGE_CHARS, InputError, iter_dataset
from judge.judging import DEFAULT_BORDERLINE_MARGIN, QueueItem, borderline_verdicts, threshold_of
from judge.metrics import ScaleError, calibrate_threshold
from judge.server import _bounds, _comparisons, _job_files
from judge.server._job_kind import JobFiles, config_of
from judge.server._kinds import job_kind
from judge.store import (
    DEFAULT_COLLECTION,
    Calibration,
    Label,
    LabelSet,
    LabelStore,
    calibrated_config,
    conflicts_of,
    trec_token,
)


class CalibrateIn(BaseModel):
    """``POST /v1/jobs/{id}/calibrate``: refit the template's threshold on the job's labels."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=100, pattern=r"^[\w.\-]+$")
    folds: _bounds.RequestInt | None = Field(default=None, ge=2, le=20)
    seed: _bounds.Seed = 0
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


def _fail(loc: tuple[str, ...], message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": loc, "msg": message, "type": "value_error"}])


# ------------------------------------------------------------------------------ items
def read_records(path: Path) -> list[dict[str, Any]]:
    lines, _ = _job_files.complete_lines(path)
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
    counts: list[tuple[int, int]]  # per record: passages decided by people, of which changed
    by_qid: dict[str, int]  # record index of each query id
    k: list[int]
    mappings: dict[str, Any]  # the scale mappings by record mode (for one record's update)
    border: list[int] | None = None  # per record: borderline verdicts
    aps: list[float | None] | None = None  # per labelled record: its AP
    passages: int = 0  # passages of the job's records
    stale: bool = False  # the summary is computed from the labelled records when next shown


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
        admin_keys: frozenset[str] = frozenset(),
    ) -> None:
        self.store = store
        self.admin_keys = admin_keys  # key labels whose imports keep each line's reviewer
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
        self._write = threading.Lock()  # one label write (and its cache update) at a time

    @classmethod
    def open(
        cls,
        path: Path,
        job_dir: Callable[[str], Path],
        *,
        level: int | None = None,
        yes_grade: int | None = None,
        admin_keys: frozenset[str] = frozenset(),
    ) -> Review:
        return cls(LabelStore(path), job_dir, level=level, yes_grade=yes_grade, admin_keys=admin_keys)

    def close(self) -> None:
        self.store.close()

    def labels_for_queries(self, query_ids: Any) -> tuple[LabelSet, int | None, int | None]:
        """Every reviewer's latest label of these query ids (this server's collection), with
        the server's stated mapping (``--labels-level``, ``--labels-yes-grade``): what a
        scoring job's worked examples are taken from."""
        latest = self.store.latest_for({str(q) for q in query_ids}, collection=self.collection)
        return LabelSet(latest, source="the label store"), self.level, self.yes_grade

    def bump(self) -> None:
        """The store changed through this server: cached views are stale."""
        with self._lock:
            self.revision += 1

    # --- reading a job -------------------------------------------------------------------
    def _store_stamp(self) -> Any:
        """What the store's state is known by: this server's writes, and another process's
        (a ``judge labels import`` changes the store's data version)."""
        return (self.revision, self.store.data_version())

    def data(self, job: Mapping[str, Any]) -> JobData:
        """The job's records, labelled records, summary and review figures (cached)."""
        files = job_kind(job["kind"]).files(self.job_dir(job["id"]))
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
        keys = {(str(r["id"]), str(d)) for r in records for d in r["docnos"]}
        latest = [
            x
            for x in self.store.latest_for({str(r["id"]) for r in records}, collection=self.collection)
            if x.key in keys
        ]
        labels = LabelSet(latest, source="the label store")
        error: str | None = None
        mappings: dict[str, Any] = {}
        try:
            outcome = apply_labels(records, labels, k=k, level=self.level, yes_grade=self.yes_grade)
            mappings = {
                m: labels.mapping_to(
                    m,  # type: ignore[arg-type]
                    level=self.level,
                    yes_grade=self.yes_grade,
                    target_name=f"the {m} job",
                )
                for m in {str(r.get("mode", "binary")) for r in records}
            }
        except ScaleError as exc:  # labels on another scale and no stated mapping
            error = serve_flags(exc)
            outcome = LabelOutcome(list(records), 0, 0, 0, 0, {})
        counts = [_human_counts(r) for r in outcome.records]
        by_qid = {str(r["id"]): i for i, r in enumerate(records)}
        data = JobData(
            records, outcome.records, scale, threshold, 0, None, {}, latest, counts, by_qid, k, mappings
        )
        return self._figures(job, data, error, outcome.mapping if outcome.applied else None)

    def _figures(self, job: Mapping[str, Any], data: JobData, error: str | None, mapping: Any) -> JobData:
        """``data`` with its totals, summary and review block computed from its labelled
        records and per-record counts."""
        records, labelled, threshold = data.records, data.labelled, data.threshold
        applied = sum(a for a, _ in data.counts)
        outcome = LabelOutcome(
            labelled, applied, sum(c for _, c in data.counts), sum(1 for a, _ in data.counts if a), 0, {}
        )
        scale = data.scale
        latest = data.labels
        stored = job.get("summary")
        summary: dict[str, Any] | None = None
        margin = float((stored or {}).get("borderline_margin") or DEFAULT_BORDERLINE_MARGIN)
        border = (
            data.border
            if data.border is not None
            else [_borderline([r], threshold, margin) for r in labelled]
        )
        borderline = sum(border)
        judge_map = ((stored or {}).get("judge") or {}).get("map") if job["kind"] == "score" else None
        labelled_map = judge_map
        stale = False
        if stored is not None and job["kind"] == "score":
            summary = dict(stored)
            if outcome.applied:  # the summary of the labelled records: computed when shown
                aps = data.aps if data.aps is not None else [r.get("ap") for r in labelled]
                labelled_map, stale = _map_of(aps), True
        review = {
            "scale": scale,
            "threshold": threshold,
            "human": outcome.applied,
            "changed": outcome.changed,
            "queries": outcome.queries,
            "borderline": borderline,
            "map": labelled_map if summary is not None else None,
            "map_judge": judge_map,
            "mapping": mapping if outcome.applied else None,
            "labels": len(latest),
            "error": error,
            "queue": (data.passages or sum(len(r["docnos"]) for r in records)) - outcome.applied,
        }
        return replace(
            data,
            labelled=labelled if outcome.applied else list(records),
            applied=outcome.applied,
            summary=summary,
            review=review,
            border=border,
            stale=stale,
            aps=[r.get("ap") for r in labelled] if data.aps is None else data.aps,
            passages=data.passages or sum(len(r["docnos"]) for r in records),
        )

    def summary(self, job: Mapping[str, Any], data: JobData) -> dict[str, Any] | None:
        """The job's summary with the labels applied (computed once after each change)."""
        if not data.stale or data.summary is None:
            return data.summary
        stored = job.get("summary") or {}
        summary = {
            **data.summary,
            **summarize_records(data.labelled, data.k),
            "judge_only": stored.get("judge"),
            "borderline": data.review["borderline"],
        }
        with self._lock:
            for key, (stamp, cached) in list(self._cache.items()):
                if cached is data:
                    self._cache[key] = (stamp, replace(data, summary=summary, stale=False))
        return summary

    def add(self, job: Mapping[str, Any], label: Label) -> Label:
        """Store one label of ``job`` and update the job's cached figures: that query's
        record, then the totals (the whole job is recomputed only when the cache is not
        current, e.g. after another process wrote to the store)."""
        files = job_kind(job["kind"]).files(self.job_dir(job["id"]))
        with self._write:
            before = self._store_stamp()
            stored = self.store.put(label)
            with self._lock:
                self.revision += 1
                hit = self._cache.get(job["id"])
            key = (_stamp(files.records), before, job["status"], job["finished"])
            if hit is None or hit[0] != key or job["kind"] != "score":
                return stored
            data = self._updated(job, hit[1], stored)
            if data is not None:
                with self._lock:
                    self._cache[job["id"]] = ((key[0], self._store_stamp(), key[2], key[3]), data)
        return stored

    def _updated(self, job: Mapping[str, Any], data: JobData, stored: Label) -> JobData | None:
        """``data`` with ``stored`` applied to its query's record only (None: recompute)."""
        index = data.by_qid.get(stored.qid)
        if index is None or data.review.get("error"):
            return None
        labels = [x for x in data.labels if not (x.key == stored.key and x.reviewer == stored.reviewer)]
        labels.append(stored)
        here = LabelSet([x for x in labels if x.qid == stored.qid], source="the label store")
        record = data.records[index]
        mode = str(record.get("mode", "binary"))
        try:
            mapping = dict(data.mappings.get(mode) or {})
            if not here.scales() <= set(mapping):
                mapping.update(
                    here.mapping_to(
                        mode,  # type: ignore[arg-type]
                        level=self.level,
                        yes_grade=self.yes_grade,
                        target_name=f"the {mode} job",
                    )
                )
            new, _, _ = relabel_record(record, here, mapping, data.k)
        except ScaleError:
            return None
        applied, changed = _human_counts(new)
        labelled = list(data.labelled)
        labelled[index] = new
        counts = list(data.counts)
        counts[index] = (applied, changed)
        border = list(data.border or [])
        if border:
            stored_summary = job.get("summary") or {}
            margin = float(stored_summary.get("borderline_margin") or DEFAULT_BORDERLINE_MARGIN)
            border[index] = _borderline([new], data.threshold, margin)
        mappings = {**data.mappings, mode: mapping}
        aps = list(data.aps) if data.aps is not None else [r.get("ap") for r in labelled]
        aps[index] = new.get("ap")
        fresh = replace(
            data,
            aps=aps,
            labelled=labelled,
            counts=counts,
            labels=labels,
            mappings=mappings,
            border=border or None,
            summary=dict(job["summary"]) if job.get("summary") is not None else None,
        )
        return self._figures(job, fresh, None, data.review.get("mapping") or _mapping_dict(mapping))

    def texts(self, job: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        files = job_kind(job["kind"]).files(self.job_dir(job["id"]))
        key = _stamp(files.dataset)
        with self._lock:
            hit = self._texts.get(job["id"])
            if hit is not None and hit[0] == key:
                return hit[1]
        texts = passage_texts(files.dataset, job["options"], pool=job_kind(job["kind"]).pooled)
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
        summary = self.summary(job, data)
        if summary is not None:
            out["summary"] = summary
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
        records = data.records
        if any(v.get("source") == "human" for r in records for v in r.get("verdicts") or []):
            # a job with ``examples`` decided its labelled passages at its start: the queue
            # leaves out what the store labels now, so one whose label was retracted is back
            records = apply_labels(records, LabelSet([])).records
        return job_review_queue(records, labels, limit=limit)

    def pending(self, job: Mapping[str, Any]) -> int:
        """How many of the job's passages nobody has labelled (the queue's full length)."""
        data = self.data(job)
        if job["kind"] != "compare":
            return int(data.review["queue"])
        labels = LabelSet(data.labels, source="the label store")
        ranked: set[tuple[str, str]] | None = None
        if job["kind"] == "compare":
            ranked = {(q, d) for lists in self._rankings(job).values() for q, ds in lists.items() for d in ds}
        keys: set[tuple[str, str]] = set()
        for r in data.records:
            qid = str(r["id"])
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
            hit = _comparisons.system_rankings(self.job_dir(job["id"]), job["options"])
            with self._lock:
                self._ranks[job["id"]] = hit
                while len(self._ranks) > 16:
                    self._ranks.pop(next(iter(self._ranks)))
        return hit

    def item(
        self, job: Mapping[str, Any], q: QueueItem, reasons: Mapping[Any, Any] | None = None
    ) -> dict[str, Any]:
        """One queue item as the review page shows it; ``reasons``: a comparison's reasons
        asked after its verdicts (:func:`judge.server._asked_reasons.explained`), shown beside the
        verdict they explain."""
        c = q.candidate
        data = self.data(job)
        texts = self.texts(job)
        extra = dict(c.extra)
        kept = (reasons or {}).get((c.qid, c.docno))
        if not extra.get("reason") and kept is not None and kept.verdict == c.verdict:
            extra["reason"] = kept.reason
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
            "text": _text_of(texts, c.qid, c.docno),
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
        index_of = data.by_qid.get(query_id)
        record = None if index_of is None else data.records[index_of]
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

    def conflicts(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Items whose reviewers' latest labels differ (of one job, or among ``labels``)."""
        return conflict_rows(conflicts_of(self.data(job).labels))

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


def conflict_rows(found: Sequence[Any]) -> list[dict[str, Any]]:
    """The JSON of label conflicts (:class:`judge.store.LabelConflict`)."""
    return [
        {
            "query_id": c.qid,
            "docno": c.docno,
            "labels": [
                {"reviewer": r, "label": v, "scale": c.scales.get(r)} for r, v in sorted(c.labels.items())
            ],
        }
        for c in found
    ]


def _text_of(texts: Mapping[str, Mapping[str, str]], qid: str, docno: str) -> str | None:
    """A passage's text (a comparison's pool keys queries by their TREC token)."""
    found = texts.get(qid)
    if found is None:
        found = next((v for k, v in texts.items() if trec_token(k) == qid), {})
    return found.get(docno)


def _human_counts(record: Mapping[str, Any]) -> tuple[int, int]:
    """(passages of ``record`` decided by people, of which the label changed the verdict). A
    label that decided a passage the judge was never asked (a job with ``examples``: the
    judge side is ``unjudged`` with no attempt) changes nothing, as
    :func:`judge.batch.relabel_record` counts it."""
    applied = changed = 0
    for v in record.get("verdicts") or []:
        if v.get("source") != "human":
            continue
        applied += 1
        changed += label_changed(v)
    return applied, changed


def _map_of(aps: Sequence[float | None]) -> float | None:
    """The mean AP over the records where it is defined (as the summary's ``map``)."""
    xs = [float(x) for x in aps if x is not None]
    return round(math.fsum(xs) / len(xs), 6) if xs else None


def _mapping_dict(mapping: Mapping[Any, Any]) -> dict[str, Any]:
    return {str(s): m.as_dict() for s, m in mapping.items()}


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


__all__ = ["CalibrateIn", "Conflict", "Review", "serve_flags"]
