"""Human relevance labels: a SQLite label store beside the verdict cache, and label files.

**Identity.** A label is about one passage of one query, named as TREC qrels and every
``judge`` export name it: the query id ``qid`` (the record's ``id``, whitespace made ``_``)
and the passage's ``docno`` (its id, else ``h`` + the first 16 hex digits of the SHA-256 of
its text, the passage identity ``--export-qrels`` and compare-systems use). The pair
lives in a ``collection`` (default ``"default"``): the scope in which a qid means one query.
A label applies wherever its (collection, qid, docno) appears, in any job, run or pool that
reads that collection, so a passage reviewed in one job is reviewed for every later job on
the same data. Query ids are only unique within a data set, so a label also keeps the query
text when it is known and :meth:`LabelSet.lookup` refuses to apply it to a record whose query
text differs (two data sets that both call a query ``q1`` never share labels by accident).
We chose qid + docno over the verdict cache's key (backend, template, query and passage text)
because a human label does not depend on which judge ran, and because qrels, the one
exchange format of the field, carry exactly qid + docno: an export re-imports unchanged.

**Values.** A label is an integer on a scale: ``binary`` (0/1) or ``graded`` (0-3), checked
with :func:`judge.metrics.check_label`. It is put on a job's scale only through
:func:`judge.metrics.resolve_mapping` (a graded label on a binary job needs a stated level).

**History.** Every change is a row of ``label_history`` (append-only, a retraction is a row
with a NULL label); ``labels`` holds the latest label of each reviewer for each passage. The
latest label per reviewer counts; when reviewers disagree the item is a *conflict*
(:meth:`LabelStore.conflicts`) and the most recent label among them is the one applied
(:meth:`LabelSet.lookup` reports the conflict alongside it).

**Concurrency.** As the verdict cache: WAL, ``synchronous=NORMAL``, one connection guarded
by a lock (safe to share between threads and the event loop), ``busy_timeout`` for other
processes. Schema versions: ``PRAGMA user_version`` counts the applied :data:`LABEL_MIGRATIONS`.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

from judge.io import MAX_JSON_DEPTH, InputError, deep_field, json_problem, read_qrels
from judge.metrics import Scale, ScaleError, ScaleMapping, check_label, check_scale, resolve_mapping
from judge.metrics import scale_of_labels as _scale_of_labels
from judge.store._cache import CacheVersionError, judge_home
from judge.store._sqlite import SQLiteHolder, run_migrations

DEFAULT_COLLECTION = "default"
LabelFormat = Literal["qrels", "jsonl"]
LABEL_FORMATS: tuple[LabelFormat, ...] = ("qrels", "jsonl")

__all__ = [
    "DEFAULT_COLLECTION",
    "LABEL_FORMATS",
    "LABEL_SCHEMA_VERSION",
    "Calibration",
    "Label",
    "LabelConflict",
    "LabelFormat",
    "LabelSet",
    "LabelStore",
    "ResolvedLabel",
    "calibrated_config",
    "default_labels_path",
    "labels_to_jsonl",
    "labels_to_qrels",
    "read_label_file",
    "trec_token",
]


def trec_token(value: object) -> str:
    """A query id or docno as one TREC token (whitespace replaced by ``_``), as exports do."""
    return "_".join(str(value).split()) or "_"


def default_labels_path() -> Path:
    """``$JUDGE_HOME/labels.sqlite``, beside the verdict cache."""
    return judge_home() / "labels.sqlite"


@dataclass(frozen=True)
class Label:
    """One reviewer's label for one passage of one query (one row of the store or a file).

    ``label`` is None for a retraction (history only). ``judge_*``: the judge verdict the
    label replaced, when the reviewer saw one (``judge_verdict`` ``yes``/``no``/``unjudged``,
    its grade, P(yes) and template id). ``audit``: the item was an audit item of the review
    queue (drawn uniformly), so agreement can be reported on an unbiased subset.
    ``history_id``: the row id in ``label_history`` (0 for labels not from a store)."""

    qid: str
    docno: str
    label: int | None
    reviewer: str
    scale: Scale = "binary"
    collection: str = DEFAULT_COLLECTION
    query: str | None = None
    created: float = 0.0
    comment: str = ""
    judge_verdict: str | None = None
    judge_grade: int | None = None
    judge_p_yes: float | None = None
    template_id: str | None = None
    audit: bool = False
    history_id: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.qid, self.docno)

    def as_dict(self) -> dict[str, Any]:
        """The JSONL export object (every field)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "<memory>", line: int | None = None) -> Label:
        """A label from a JSONL export object; :class:`InputError` names the bad field."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(
                f"unknown label field(s) {', '.join(unknown)}", path=where, line=line, field=unknown[0]
            )
        for name in ("qid", "docno", "reviewer"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise InputError("must be a non-empty string", path=where, line=line, field=name)
        try:
            scale = check_scale(str(data.get("scale", "binary")))
            value = data.get("label")
            if value is not None:
                check_label(value, scale)
        except ScaleError as exc:
            raise InputError(exc.message, path=where, line=line, field=exc.field) from None
        out = cls(**{k: v for k, v in data.items() if k in known})
        return replace(out, qid=trec_token(out.qid), docno=trec_token(out.docno), scale=scale)


@dataclass(frozen=True)
class ResolvedLabel:
    """The label that counts for one passage: the most recent among the reviewers' latest
    labels, on the store's scale of that label. ``reviewers``: every reviewer's latest label;
    ``conflict``: they disagree."""

    label: Label
    reviewers: Mapping[str, int]
    conflict: bool

    @property
    def value(self) -> int:
        assert self.label.label is not None
        return self.label.label


@dataclass(frozen=True)
class LabelConflict:
    """Reviewers whose latest labels for one passage differ (on one scale: see
    :meth:`LabelStore.conflicts`)."""

    collection: str
    qid: str
    docno: str
    labels: Mapping[str, int]
    scales: Mapping[str, Scale]


@dataclass(frozen=True)
class Calibration:
    """A named P(yes) threshold refitted from human labels for one template
    (:func:`judge.metrics.calibrate_threshold` computes it; the store keeps it)."""

    name: str
    template_id: str
    threshold: float
    template_hash: str | None = None
    previous_threshold: float | None = None
    created: float = 0.0
    report: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "report": dict(self.report)}


class LabelSet:
    """Labels resolved to one per (qid, docno) (the latest among reviewers' latest labels),
    from a store or a file. :meth:`lookup` is what overrides use."""

    def __init__(self, labels: Iterable[Label], *, source: str = "labels") -> None:
        self.source = source
        latest: dict[tuple[str, str], dict[str, Label]] = {}
        for lab in labels:
            if lab.label is None:
                latest.get(lab.key, {}).pop(lab.reviewer, None)
                continue
            per = latest.setdefault(lab.key, {})
            old = per.get(lab.reviewer)
            if old is None or (lab.created, lab.history_id) >= (old.created, old.history_id):
                per[lab.reviewer] = lab
        self._items: dict[tuple[str, str], ResolvedLabel] = {}
        for key, per in latest.items():
            if not per:
                continue
            newest = max(per.values(), key=lambda x: (x.created, x.history_id))
            values = {r: int(x.label) for r, x in per.items() if x.label is not None}
            scales = {x.scale for x in per.values()}
            conflict = len(set(values.values())) > 1 or len(scales) > 1
            self._items[key] = ResolvedLabel(newest, values, conflict)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[ResolvedLabel]:
        return iter(self._items.values())

    def lookup(self, qid: object, docno: str, query: str | None = None) -> ResolvedLabel | None:
        """The label for (qid, docno), or None; None too when the label keeps a query text
        and ``query`` is given and differs (another data set's query with the same id)."""
        hit = self._items.get((trec_token(qid), docno))
        if hit is None:
            return None
        if query is not None and hit.label.query is not None and hit.label.query != query:
            return None
        return hit

    def scales(self) -> set[Scale]:
        return {r.label.scale for r in self._items.values()}

    def mapping_to(
        self,
        target: Scale,
        *,
        level: int | None = None,
        yes_grade: int | None = None,
        target_name: str = "the job",
        level_field: str = "labels_level",
        yes_grade_field: str = "labels_yes_grade",
    ) -> dict[Scale, ScaleMapping]:
        """The stated mapping from each scale present to ``target`` (:class:`ScaleError`
        naming both scales when one is missing: ``labels_level`` / ``labels_yes_grade``)."""
        return {
            s: resolve_mapping(
                s,
                target,
                level=level,
                yes_grade=yes_grade,
                source_name=f"labels from {self.source}",
                target_name=target_name,
                level_field=level_field,
                yes_grade_field=yes_grade_field,
            )
            for s in sorted(self.scales())
        }

    def qrels(self, scale: Scale | None = None, *, level: int | None = None) -> dict[str, dict[str, int]]:
        """``{qid: {docno: label}}`` of the resolved labels, on ``scale`` when given (graded
        to binary needs ``level``; binary labels on a graded export stay 0/1)."""
        out: dict[str, dict[str, int]] = {}
        mappings = (
            self.mapping_to(scale, level=level, yes_grade=1, target_name="the export", level_field="level")
            if scale is not None
            else {}
        )
        for r in sorted(self._items.values(), key=lambda x: x.label.key):
            value = r.value
            if scale is not None:
                value = mappings[r.label.scale].apply(value)
            out.setdefault(r.label.qid, {})[r.label.docno] = value
        return out


# ---------------------------------------------------------------------------- the store
def _m001_labels(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS label_history ("
        "id INTEGER PRIMARY KEY AUTOINCREMENT, collection TEXT NOT NULL, qid TEXT NOT NULL, "
        "docno TEXT NOT NULL, reviewer TEXT NOT NULL, label INTEGER, scale TEXT NOT NULL, "
        "query TEXT, created REAL NOT NULL, comment TEXT NOT NULL DEFAULT '', "
        "judge_verdict TEXT, judge_grade INTEGER, judge_p_yes REAL, template_id TEXT, "
        "audit INTEGER NOT NULL DEFAULT 0)"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS labels (collection TEXT NOT NULL, qid TEXT NOT NULL, "
        "docno TEXT NOT NULL, reviewer TEXT NOT NULL, history_id INTEGER NOT NULL, "
        "PRIMARY KEY (collection, qid, docno, reviewer))"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS label_history_item ON label_history (collection, qid, docno)")


def _m002_calibrations(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS calibrations (name TEXT PRIMARY KEY, template_id TEXT NOT NULL, "
        "template_hash TEXT, threshold REAL NOT NULL, previous_threshold REAL, created REAL NOT NULL, "
        "report TEXT NOT NULL)"
    )


LABEL_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_m001_labels, _m002_calibrations)
"""Label-store schema migrations in order; after migration ``i`` ``user_version`` is ``i``.
Append to change the schema; never edit one that has shipped."""

LABEL_SCHEMA_VERSION = len(LABEL_MIGRATIONS)

_COLUMNS = (
    "id, collection, qid, docno, reviewer, label, scale, query, created, comment, "
    "judge_verdict, judge_grade, judge_p_yes, template_id, audit"
)


def _migrate(conn: sqlite3.Connection, path: Path) -> int:
    def newer(found: int, known: int) -> CacheVersionError:
        return CacheVersionError(
            f"label store schema version {found} is newer than this judge supports "
            f"({known}); upgrade judge or use another label store",
            path=path,
            field="user_version",
        )

    return run_migrations(conn, LABEL_MIGRATIONS, newer=newer)


def _row_label(row: Sequence[Any]) -> Label:
    return Label(
        history_id=int(row[0]),
        collection=row[1],
        qid=row[2],
        docno=row[3],
        reviewer=row[4],
        label=None if row[5] is None else int(row[5]),
        scale=check_scale(row[6]),
        query=row[7],
        created=float(row[8]),
        comment=row[9] or "",
        judge_verdict=row[10],
        judge_grade=None if row[11] is None else int(row[11]),
        judge_p_yes=None if row[12] is None else float(row[12]),
        template_id=row[13],
        audit=bool(row[14]),
    )


class LabelStore(SQLiteHolder):
    """Human labels in one SQLite file (default :func:`default_labels_path`).

    ``put`` records a label (history row + the reviewer's latest), ``retract`` withdraws a
    reviewer's label; ``latest``/``history``/``conflicts``/``label_set`` read. Thread-safe
    (one connection behind a lock). Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path | None = None) -> None:
        file = Path(path) if path is not None else default_labels_path()
        super().__init__(file, what="label store", migrate=partial(_migrate, path=file))

    # --- writing ------------------------------------------------------------------------
    def put(self, label: Label) -> Label:
        """Record ``label`` (checked on its scale; ``created`` 0 means now); returns it with
        its ``history_id`` and time. A None label is a retraction (see :meth:`retract`)."""
        return self.put_many([label])[0]

    def put_many(self, labels: Iterable[Label]) -> list[Label]:
        """Record several labels in one transaction (an import); returns them as stored."""
        now = time.time()
        checked: list[Label] = []
        for lab in labels:
            if not lab.reviewer:
                raise ScaleError("a label needs a reviewer", field="reviewer")
            scale = check_scale(lab.scale)
            if lab.label is not None:
                check_label(lab.label, scale)
            if lab.judge_p_yes is not None and not math.isfinite(lab.judge_p_yes):
                raise ScaleError("judge_p_yes must be a finite number", field="judge_p_yes")
            checked.append(
                replace(lab, qid=trec_token(lab.qid), docno=trec_token(lab.docno), created=lab.created or now)
            )
        out: list[Label] = []
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for lab in checked:
                    cur = conn.execute(
                        "INSERT INTO label_history (collection, qid, docno, reviewer, label, scale, query, "
                        "created, comment, judge_verdict, judge_grade, judge_p_yes, template_id, audit) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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

    def retract(
        self, qid: str, docno: str, reviewer: str, *, collection: str = DEFAULT_COLLECTION, comment: str = ""
    ) -> Label:
        """Withdraw ``reviewer``'s label for (qid, docno) (kept in the history)."""
        return self.put(Label(qid, docno, None, reviewer, collection=collection, comment=comment))

    # --- reading ------------------------------------------------------------------------
    def _select(self, sql: str, params: Sequence[Any]) -> list[Label]:
        with self._lock:
            rows = self._connection().execute(sql, tuple(params)).fetchall()
        return [_row_label(r) for r in rows]

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
        cols = ", ".join(f"h.{c.strip()}" for c in _COLUMNS.split(","))
        return self._select(
            f"SELECT {cols} FROM labels l JOIN label_history h ON h.id = l.history_id{where} "
            "ORDER BY h.collection, h.qid, h.docno, h.created, h.id",
            params,
        )

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
        return self._select(f"SELECT {_COLUMNS} FROM label_history{where} ORDER BY id", params)

    def label_set(self, *, collection: str = DEFAULT_COLLECTION) -> LabelSet:
        """The collection's labels resolved to one per passage (see :class:`LabelSet`)."""
        return LabelSet(self.latest(collection=collection), source="the label store")

    def conflicts(self, *, collection: str | None = DEFAULT_COLLECTION) -> list[LabelConflict]:
        """Passages whose reviewers' latest labels differ (values or scales)."""
        groups: dict[tuple[str, str, str], list[Label]] = {}
        for lab in self.latest(collection=collection):
            groups.setdefault((lab.collection, lab.qid, lab.docno), []).append(lab)
        out: list[LabelConflict] = []
        for (coll, qid, docno), labs in groups.items():
            values = {x.reviewer: int(x.label) for x in labs if x.label is not None}
            scales = {x.reviewer: x.scale for x in labs}
            if len(set(values.values())) > 1 or len(set(scales.values())) > 1:
                out.append(LabelConflict(coll, qid, docno, values, scales))
        return out

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
        """Store (or replace) a named calibration."""
        cal = replace(calibration, created=calibration.created or time.time())
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


# ---------------------------------------------------------------------------- label files
def read_label_file(
    path: str | Path,
    *,
    reviewer: str | None = None,
    scale: Scale | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> list[Label]:
    """Labels from a TREC qrels file or a JSONL labels export (``.jsonl``/``.json`` or a
    first non-blank character ``{``).

    qrels: each line is a label by ``reviewer`` (required) on ``scale`` (default: binary
    when every grade is 0/1, else graded); negative grades are skipped. JSONL: each object
    as :meth:`Label.as_dict` writes it (``reviewer``/``scale`` given here override the
    file's). Bad input raises :class:`InputError` naming file, line and field."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such labels file", path=p)
    text_head = p.read_text(encoding="utf-8", errors="replace")[:4096].lstrip()
    if p.suffix in (".jsonl", ".json") or text_head.startswith("{"):
        return _read_jsonl_labels(p, reviewer=reviewer, scale=scale, collection=collection)
    if reviewer is None or not reviewer:
        raise InputError("a qrels file needs a reviewer name (--reviewer NAME)", path=p, field="reviewer")
    qrels = read_qrels(p).to_dict()
    values = [g for docs in qrels.values() for g in docs.values() if g >= 0]
    use: Scale = scale if scale is not None else _scale_of_labels(values)
    out: list[Label] = []
    for qid, docs in qrels.items():
        for docno, grade in docs.items():
            if grade < 0:
                continue
            try:
                check_label(grade, use, field="grade")
            except ScaleError as exc:
                raise InputError(f"{exc.message} (qid {qid}, docno {docno})", path=p, field="grade") from None
            out.append(Label(qid, docno, grade, reviewer, scale=use, collection=collection))
    return out


def _read_jsonl_labels(p: Path, *, reviewer: str | None, scale: Scale | None, collection: str) -> list[Label]:
    """Each line checked as a dataset line is (:func:`judge.io.json_problem`): invalid UTF-8,
    a lone surrogate escape or nesting deeper than :data:`judge.io.MAX_JSON_DEPTH` is an
    :class:`InputError` naming its line, never a crash."""
    out: list[Label] = []
    with p.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"invalid UTF-8 at byte {exc.start}", path=p, line=number) from None
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"not JSON: {exc.msg}", path=p, line=number) from None
            except RecursionError:
                raise InputError(
                    f"nested deeper than {MAX_JSON_DEPTH} levels", path=p, line=number, field=deep_field(line)
                ) from None
            if not isinstance(data, dict):
                raise InputError("each line must be a JSON object", path=p, line=number)
            problem = json_problem(data, line)
            if problem is not None:
                raise InputError(problem[1], path=p, line=number, field=problem[0] or None)
            data.setdefault("collection", collection)
            if reviewer:
                data["reviewer"] = reviewer
            if scale is not None:
                data["scale"] = scale
            out.append(Label.from_dict(data, where=str(p), line=number))
    return out


def labels_to_qrels(
    labels: LabelSet, path: str | Path, *, scale: Scale | None = None, level: int | None = None
) -> int:
    """Write the resolved labels as TREC qrels; returns the number of lines."""
    qrels = labels.qrels(scale, level=level)
    with Path(path).open("w", encoding="utf-8") as fh:
        for qid, docs in qrels.items():
            for docno, value in docs.items():
                fh.write(f"{qid} 0 {docno} {value}\n")
    return sum(len(d) for d in qrels.values())


def labels_to_jsonl(labels: Iterable[Label], path: str | Path) -> int:
    """Write labels (every reviewer's, with their provenance) as JSONL; returns the count."""
    n = 0
    with Path(path).open("w", encoding="utf-8") as fh:
        for lab in labels:
            fh.write(json.dumps(lab.as_dict(), ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def calibrated_config(
    config: Any, name: str | None, *, path: str | Path | None = None, field: str = "calibration"
) -> Any:
    """``config`` (a :class:`judge.judging.JudgeConfig`) with the P(yes) threshold of the
    named calibration in the label store at ``path``; ``config`` itself when ``name`` is
    None. :class:`InputError` (naming ``field``) when the calibration is missing, was fitted
    on another template (id or file hash), or the config already states a threshold."""
    from judge.judging import template_for

    if not name:
        return config
    if config.p_yes_threshold is not None:
        raise InputError("give a calibration or a P(yes) threshold, not both", field=field)
    with LabelStore(path) as store:
        cal = store.calibration(name)
    if cal is None:
        raise InputError(f"no calibration named {name!r} in the label store", field=field)
    if config.language == "auto" and not config.template:
        # A threshold holds for one template: the calibration's template judges every query.
        from judge.judging import load_template

        fitted = load_template(cal.template_id)
        config = replace(config, language=fitted.language, template=cal.template_id)
    template = template_for(config)
    if cal.template_id != template.id or (cal.template_hash and cal.template_hash != template.hash):
        raise InputError(
            f"calibration {name!r} is for template {cal.template_id} ({(cal.template_hash or '')[:12]}), "
            f"this run uses {template.id} ({template.hash[:12]})",
            field=field,
        )
    return replace(config, p_yes_threshold=cal.threshold)
