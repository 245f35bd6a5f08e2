"""The label store: SQLite tables of human labels (see :mod:`judge.store._label_model` for
what a label is and how its fields are checked).

**Time.** ``created`` is the store's clock when the label is written, always; a label
imported from elsewhere keeps the time it carried as ``source_created`` (shown, never used
to decide). The latest label is the one written last (the history row id).

**History.** Every change is a row of ``label_history`` (append-only, a retraction is a row
with a NULL label); ``labels`` holds the latest label of each reviewer for each passage. The
latest label per reviewer counts; when reviewers disagree the item is a *conflict*
(:meth:`LabelStore.conflicts`) and the most recent label among them is the one applied
(:meth:`LabelSet.lookup` reports the conflict alongside it). Rows that an older ``judge``
stored without these checks are moved to ``label_quarantine`` by a migration
(:mod:`judge.store._label_schema`).

**Concurrency.** As the verdict cache: WAL, ``synchronous=NORMAL``, one connection guarded
by a lock (safe to share between threads and the event loop), ``busy_timeout`` for other
processes. Schema versions: ``PRAGMA user_version`` counts the applied
:data:`judge.store._label_schema.LABEL_MIGRATIONS`.
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from judge.io import MIN_INCLUSION, InputError
from judge.store._cache import judge_home
from judge.store._label_model import (
    DEFAULT_COLLECTION,
    Calibration,
    Label,
    LabelConflict,
    LabelSet,
    check_calibration,
    check_label_fields,
    conflicts_of,
)
from judge.store._label_schema import LABEL_COLUMNS, migrate_labels, row_label
from judge.store._sqlite import MAX_SQLITE_INT, SQLiteHolder

MAX_PAGE = 1000
"""The most labels one page of :meth:`LabelStore.page` (``GET /v1/labels``) holds."""

__all__ = ["MAX_PAGE", "LabelPage", "LabelStore", "decode_cursor", "default_labels_path", "encode_cursor"]


def default_labels_path() -> Path:
    """``$JUDGE_HOME/labels.sqlite``, beside the verdict cache."""
    return judge_home() / "labels.sqlite"


@dataclass(frozen=True)
class LabelPage:
    """One page of labels and the opaque cursor of the next (None: this was the last)."""

    labels: list[Label]
    next: str | None


def encode_cursor(history_id: int) -> str:
    """An opaque page cursor (the last history id seen)."""
    return base64.urlsafe_b64encode(f"h{history_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The history id of :func:`encode_cursor`'s cursor; :class:`InputError` on anything else."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        if text[:1] != "h" or not text[1:].isdigit() or len(text) > 20:
            raise ValueError(text)
        history_id = int(text[1:])
        if history_id > MAX_SQLITE_INT:  # no row has it; SQLite could not even compare it
            raise ValueError(text)
        return history_id
    except ValueError:
        raise InputError("not a cursor this server gave", field="cursor") from None


class LabelStore(SQLiteHolder):
    """Human labels in one SQLite file (default :func:`default_labels_path`).

    ``put`` records a label (history row + the reviewer's latest), ``retract`` withdraws a
    reviewer's label; ``latest``/``history``/``conflicts``/``label_set`` read. Thread-safe
    (one connection behind a lock). Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path | None = None) -> None:
        file = Path(path) if path is not None else default_labels_path()
        super().__init__(file, what="label store", migrate=partial(migrate_labels, path=file))

    # --- writing ------------------------------------------------------------------------
    def put(self, label: Label) -> Label:
        """Record ``label`` (checked on its scale; ``created`` 0 means now); returns it with
        its ``history_id`` and time. A None label is a retraction (see :meth:`retract`)."""
        return self.put_many([label])[0]

    def put_many(self, labels: Iterable[Label]) -> list[Label]:
        """Record several labels in one transaction (an import; all or none); returns them as
        stored. Each is checked (:func:`check_label_fields`; :class:`InputError` naming the
        label's 1-based position as ``line`` and the field) and stamped with this store's
        clock as ``created``."""
        now = time.time()
        checked: list[Label] = []
        for number, lab in enumerate(labels, start=1):
            fields = check_label_fields(lab.as_dict(), line=number)
            checked.append(Label(**fields, created=now))
        out: list[Label] = []
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for lab in checked:
                    cur = conn.execute(
                        "INSERT INTO label_history (collection, qid, docno, reviewer, label, scale, query, "
                        "created, comment, judge_verdict, judge_grade, judge_p_yes, template_id, audit, "
                        "source_created, inclusion) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            lab.collection,
                            lab.qid,
                            lab.docno,
                            lab.reviewer,
                            lab.label,
                            lab.scale,
                            lab.query,
                            lab.created,
                            lab.comment,
                            lab.judge_verdict,
                            lab.judge_grade,
                            lab.judge_p_yes,
                            lab.template_id,
                            int(lab.audit),
                            lab.source_created,
                            lab.inclusion,
                        ),
                    )
                    hid = int(cur.lastrowid or 0)
                    if lab.label is None:
                        conn.execute(
                            "DELETE FROM labels "
                            "WHERE collection = ? AND qid = ? AND docno = ? AND reviewer = ?",
                            (lab.collection, lab.qid, lab.docno, lab.reviewer),
                        )
                    else:
                        conn.execute(
                            "INSERT OR REPLACE INTO labels (collection, qid, docno, reviewer, history_id) "
                            "VALUES (?, ?, ?, ?, ?)",
                            (lab.collection, lab.qid, lab.docno, lab.reviewer, hid),
                        )
                    out.append(replace(lab, history_id=hid))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return out

    # --- the review queue's audit draws ----------------------------------------------------
    def record_audit_draws(self, job: str, items: Iterable[tuple[str, str]], *, collection: str) -> None:
        """Remember that the review queue drew these (qid, docno) as audit items (the first
        draw is kept)."""
        rows = [(collection, q, d, job, time.time()) for q, d in items]
        if not rows:
            return
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR IGNORE INTO audit_draws (collection, qid, docno, job, drawn) "
                    "VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    # --- the review queue's sample mode ----------------------------------------------------
    def sample_round(self, job: str, *, collection: str) -> int:
        """How many draws the sample mode recorded over ``job`` (the next draw's round)."""
        with self._lock:
            row = (
                self._connection()
                .execute(
                    "SELECT COUNT(*) FROM sample_rounds WHERE collection = ? AND job = ?", (collection, job)
                )
                .fetchone()
            )
        return int(row[0])

    def record_sample_draws(
        self,
        job: str,
        frame: Iterable[tuple[str, str, float, bool]],
        *,
        design: str,
        collection: str,
        number: int,
        expected: float | None = None,
        seed: int | None = None,
    ) -> tuple[int, int]:
        """Record draw ``number`` (0 first) of the sample mode over ``job``: ``frame`` is every
        pair of the job's population with the probability this draw gave it and whether it
        took it. Each pair's recorded inclusion probability becomes the union over the job's
        draws, ``1 - prod(1 - p_i)`` (two draws at 0.25: 0.4375), for the pairs it took and
        for the others alike (a later draw may take them). Returns (pairs this draw took,
        pairs drawn for the first time). :class:`InputError` (field ``inclusion``) for a
        probability outside [:data:`judge.io.MIN_INCLUSION`, 1]; (field ``job``) when another
        draw over the job was recorded since ``number`` was read, or the job's earlier draws
        were recorded without their population (an older judge)."""
        rows = [(q, d, float(p), bool(hit)) for q, d, p, hit in frame]
        for q, d, p, _ in rows:
            if not (math.isfinite(p) and MIN_INCLUSION <= p <= 1.0):
                raise InputError(
                    f"must be in [{MIN_INCLUSION:g}, 1], got {p!r} for ({q}, {d})", field="inclusion"
                )
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                where = (collection, job)
                done = conn.execute(
                    "SELECT COUNT(*) FROM sample_rounds WHERE collection = ? AND job = ?", where
                ).fetchone()[0]
                if int(done) != number:
                    raise InputError(
                        f"{done} draw(s) over {job!r} are recorded, this one was made as draw {number + 1}: "
                        "draw again",
                        field="job",
                    )
                legacy = conn.execute(
                    "SELECT 1 FROM sample_frames WHERE collection = ? AND job = ? AND legacy = 1 LIMIT 1",
                    where,
                ).fetchone()
                if legacy is not None:
                    raise InputError(
                        f"{job!r} was drawn by an older judge that kept only the drawn pairs: a further draw "
                        "cannot know each pair's union probability; label that sample, or sample a new run",
                        field="job",
                    )
                known = {
                    (str(q), str(d)): (float(p), int(n), str(g))
                    for q, d, p, n, g in conn.execute(
                        "SELECT qid, docno, inclusion, draws, design FROM sample_frames "
                        "WHERE collection = ? AND job = ?",
                        where,
                    )
                }
                taken = new = 0
                written: list[tuple[str, str, str, str, float, int, str]] = []
                for q, d, p, hit in rows:
                    before, draws, designs = known.get((q, d), (0.0, 0, ""))
                    union = before + p - before * p  # 1 - (1 - before)(1 - p)
                    names = (
                        designs
                        if design in designs.split("+")
                        else "+".join(x for x in (designs, design) if x)
                    )
                    taken += hit
                    new += hit and draws == 0
                    written.append((collection, job, q, d, min(1.0, union), draws + int(hit), names))
                conn.executemany(
                    "INSERT OR REPLACE INTO sample_frames "
                    "(collection, job, qid, docno, inclusion, draws, design, legacy) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                    written,
                )
                conn.execute(
                    "INSERT INTO sample_rounds "
                    "(collection, job, round, design, expected, seed, drawn, taken) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (collection, job, number, design, expected, seed, time.time(), taken),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return taken, new

    def sample_draws(
        self, *, collection: str = DEFAULT_COLLECTION, job: str | None = None
    ) -> list[tuple[str, str, float, str]]:
        """``[(qid, docno, inclusion, design)]`` of every pair the sample mode drew over
        ``job`` (None: over any job; a pair drawn over two jobs is listed for each), its
        inclusion the union probability over the job's draws."""
        sql = "SELECT qid, docno, inclusion, design FROM sample_frames WHERE collection = ? AND draws > 0"
        params: list[Any] = [collection]
        if job is not None:
            sql += " AND job = ?"
            params.append(job)
        with self._lock:
            rows = self._connection().execute(sql + " ORDER BY qid, docno, job", params).fetchall()
        return [(str(q), str(d), float(p), str(g)) for q, d, p, g in rows]

    def sample_jobs(self, *, collection: str = DEFAULT_COLLECTION) -> list[str]:
        """The jobs (service job ids, or the outputs ``judge labels sample`` drew from) with a
        recorded draw."""
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    "SELECT DISTINCT job FROM sample_rounds WHERE collection = ? ORDER BY job", (collection,)
                )
                .fetchall()
            )
        return [str(r[0]) for r in rows]

    def audit_drawn(self, qid: str, docno: str, *, collection: str) -> bool:
        """Whether the review queue drew (qid, docno) as an audit item."""
        with self._lock:
            row = (
                self._connection()
                .execute(
                    "SELECT 1 FROM audit_draws WHERE collection = ? AND qid = ? AND docno = ?",
                    (collection, qid, docno),
                )
                .fetchone()
            )
        return row is not None

    def data_version(self) -> int:
        """Changes when another connection (another process) commits to the file; this
        store's own writes leave it as it is (SQLite's ``PRAGMA data_version``)."""
        with self._lock:
            return int(self._connection().execute("PRAGMA data_version").fetchone()[0])

    def retract(
        self, qid: str, docno: str, reviewer: str, *, collection: str = DEFAULT_COLLECTION, comment: str = ""
    ) -> Label:
        """Withdraw ``reviewer``'s label for (qid, docno) (kept in the history)."""
        return self.put(Label(qid, docno, None, reviewer, collection=collection, comment=comment))

    # --- reading ------------------------------------------------------------------------
    def _select(self, sql: str, params: Sequence[Any]) -> list[Label]:
        with self._lock:
            rows = self._connection().execute(sql, tuple(params)).fetchall()
        return [row_label(r) for r in rows]

    @staticmethod
    def _where(
        collection: str | None, qid: str | None, docno: str | None, reviewer: str | None, prefix: str = ""
    ) -> tuple[str, list[Any]]:
        parts: list[str] = []
        params: list[Any] = []
        for name, value in (
            ("collection", collection),
            ("qid", qid),
            ("docno", docno),
            ("reviewer", reviewer),
        ):
            if value is not None:
                parts.append(f"{prefix}{name} = ?")
                params.append(value)
        return (" WHERE " + " AND ".join(parts)) if parts else "", params

    def latest(
        self,
        *,
        collection: str | None = DEFAULT_COLLECTION,
        qid: str | None = None,
        docno: str | None = None,
        reviewer: str | None = None,
    ) -> list[Label]:
        """Each reviewer's latest label (None filters are wildcards), ordered by qid, docno,
        time."""
        where, params = self._where(collection, qid, docno, reviewer, prefix="l.")
        cols = ", ".join(f"h.{c.strip()}" for c in LABEL_COLUMNS.split(","))
        return self._select(
            f"SELECT {cols} FROM labels l JOIN label_history h ON h.id = l.history_id{where} "
            "ORDER BY h.collection, h.qid, h.docno, h.created, h.id",
            params,
        )

    def latest_for(self, qids: Iterable[str], *, collection: str = DEFAULT_COLLECTION) -> list[Label]:
        """Each reviewer's latest label on the given queries only (one indexed look-up per
        query: the cost of a job's labels, not of the store)."""
        wanted = sorted(set(qids))
        cols = ", ".join(f"h.{c.strip()}" for c in LABEL_COLUMNS.split(","))
        out: list[Label] = []
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            out += self._select(
                f"SELECT {cols} FROM labels l JOIN label_history h ON h.id = l.history_id "
                f"WHERE l.collection = ? AND l.qid IN ({','.join('?' * len(chunk))}) ORDER BY h.id",
                [collection, *chunk],
            )
        return out

    def page(
        self, *, collection: str, history: bool = False, after: int = 0, limit: int = MAX_PAGE
    ) -> LabelPage:
        """One page of the collection's labels in write order: each reviewer's latest label
        (``history``: every change), those written after history id ``after``, at most
        ``limit`` (1..:data:`MAX_PAGE`); ``next`` is the cursor of the next page (None at the end)."""
        if not 1 <= limit <= MAX_PAGE:
            raise InputError(f"limit must be in 1..{MAX_PAGE}", field="limit")
        if not 0 <= after <= MAX_SQLITE_INT:
            raise InputError(f"must be a history id in 0..{MAX_SQLITE_INT}", field="cursor")
        if history:
            sql = (
                f"SELECT {LABEL_COLUMNS} FROM label_history "
                "WHERE collection = ? AND id > ? ORDER BY id LIMIT ?"
            )
        else:
            cols = ", ".join(f"h.{c.strip()}" for c in LABEL_COLUMNS.split(","))
            sql = (
                f"SELECT {cols} FROM labels l JOIN label_history h ON h.id = l.history_id "
                "WHERE l.collection = ? AND l.history_id > ? ORDER BY l.history_id LIMIT ?"
            )
        rows = self._select(sql, [collection, after, limit + 1])
        more = len(rows) > limit
        rows = rows[:limit]
        return LabelPage(rows, encode_cursor(rows[-1].history_id) if more and rows else None)

    def history(
        self,
        *,
        collection: str | None = DEFAULT_COLLECTION,
        qid: str | None = None,
        docno: str | None = None,
        reviewer: str | None = None,
    ) -> list[Label]:
        """Every recorded change (retractions included), oldest first."""
        where, params = self._where(collection, qid, docno, reviewer)
        return self._select(f"SELECT {LABEL_COLUMNS} FROM label_history{where} ORDER BY id", params)

    def label_set(self, *, collection: str = DEFAULT_COLLECTION) -> LabelSet:
        """The collection's labels resolved to one per passage (see :class:`LabelSet`)."""
        return LabelSet(self.latest(collection=collection), source="the label store")

    def conflicts(self, *, collection: str | None = DEFAULT_COLLECTION) -> list[LabelConflict]:
        """Passages whose reviewers' latest labels differ (values or scales)."""
        return conflicts_of(self.latest(collection=collection))

    def collections(self) -> list[str]:
        with self._lock:
            rows = self._connection().execute("SELECT DISTINCT collection FROM labels ORDER BY 1").fetchall()
        return [str(r[0]) for r in rows]

    def count(self, *, collection: str | None = DEFAULT_COLLECTION) -> int:
        """Number of current (reviewer, passage) labels."""
        where, params = self._where(collection, None, None, None)
        with self._lock:
            return int(
                self._connection().execute(f"SELECT COUNT(*) FROM labels{where}", params).fetchone()[0]
            )

    # --- named calibrations ---------------------------------------------------------------
    def save_calibration(self, calibration: Calibration) -> Calibration:
        """Store (or replace) a named calibration; :class:`InputError` naming the field when
        one is off (a threshold outside [0, 1], ...), as migration 5 would quarantine it."""
        cal = check_calibration(replace(calibration, created=calibration.created or time.time()))
        with self._lock:
            self._connection().execute(
                "INSERT OR REPLACE INTO calibrations (name, template_id, template_hash, threshold, "
                "previous_threshold, created, report) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    cal.name,
                    cal.template_id,
                    cal.template_hash,
                    cal.threshold,
                    cal.previous_threshold,
                    cal.created,
                    json.dumps(dict(cal.report), ensure_ascii=False, sort_keys=True),
                ),
            )
        return cal

    def calibration(self, name: str) -> Calibration | None:
        """The named calibration, or None."""
        with self._lock:
            row = (
                self._connection()
                .execute(
                    "SELECT name, template_id, template_hash, threshold, previous_threshold, created, report "
                    "FROM calibrations WHERE name = ?",
                    (name,),
                )
                .fetchone()
            )
        if row is None:
            return None
        return Calibration(row[0], row[1], float(row[3]), row[2], row[4], float(row[5]), json.loads(row[6]))

    def calibrations(self) -> list[Calibration]:
        with self._lock:
            names = [r[0] for r in self._connection().execute("SELECT name FROM calibrations ORDER BY name")]
        return [c for c in (self.calibration(n) for n in names) if c is not None]

    def __enter__(self) -> LabelStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
