"""Human relevance labels: a SQLite label store beside the verdict cache, and label files.

**Identity.** A label is about one passage of one query: the query id ``qid`` (the record's
``id`` exactly as given, whitespace included) and the passage's ``docno`` (its id as given,
else ``h`` + the first 16 hex digits of the SHA-256 of its text, the passage identity
``--export-qrels`` and compare-systems use). Ids are bounded and checked as a job's lines
check them (:func:`judge.io.id_problem`). In TREC qrels, which cannot hold whitespace, an id
is written with :func:`qrels_escape` (percent-encoding) and read back with
:func:`qrels_unescape`. The pair
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

**Checks.** Every way in (the review route, ``POST /v1/labels``, ``judge labels import``,
``--labels FILE``) checks each field with :func:`check_label_fields`: types, ranges,
finiteness, string bounds, no control characters in names and ids. A bad line is an
:class:`InputError` naming line and field, and :meth:`LabelStore.put_many` stores all of an
import or none of it.

**Time.** ``created`` is the store's clock when the label is written, always; a label
imported from elsewhere keeps the time it carried as ``source_created`` (shown, never used
to decide). The latest label is the one written last (the history row id).

**History.** Every change is a row of ``label_history`` (append-only, a retraction is a row
with a NULL label); ``labels`` holds the latest label of each reviewer for each passage. The
latest label per reviewer counts; when reviewers disagree the item is a *conflict*
(:meth:`LabelStore.conflicts`) and the most recent label among them is the one applied
(:meth:`LabelSet.lookup` reports the conflict alongside it). Rows that an older ``judge``
stored without these checks are moved to ``label_quarantine`` by a migration.

**Concurrency.** As the verdict cache: WAL, ``synchronous=NORMAL``, one connection guarded
by a lock (safe to share between threads and the event loop), ``busy_timeout`` for other
processes. Schema versions: ``PRAGMA user_version`` counts the applied :data:`LABEL_MIGRATIONS`.
"""

from __future__ import annotations

import base64
import json
import math
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

from judge.io import MAX_JSON_DEPTH, InputError, deep_field, id_problem, json_problem
from judge.metrics import Scale, ScaleError, ScaleMapping, check_label, check_scale, resolve_mapping
from judge.metrics import scale_of_labels as _scale_of_labels
from judge.store._cache import CacheVersionError, judge_home
from judge.store._sqlite import SQLiteHolder, run_migrations

DEFAULT_COLLECTION = "default"
MAX_NAME_CHARS = 200  # a reviewer, collection or template id
MAX_COMMENT_CHARS = 4000
MAX_QUERY_CHARS = 100_000
MAX_PAGE = 1000
"""The most labels one page of :meth:`LabelStore.page` (``GET /v1/labels``) holds."""
MAX_TIME = 1e11  # seconds since 1970 (year 5138): a larger time is not a time
LabelFormat = Literal["qrels", "jsonl"]
LABEL_FORMATS: tuple[LabelFormat, ...] = ("qrels", "jsonl")

__all__ = [
    "DEFAULT_COLLECTION",
    "LABEL_FORMATS",
    "LABEL_SCHEMA_VERSION",
    "MAX_PAGE",
    "Calibration",
    "Label",
    "LabelConflict",
    "LabelFormat",
    "LabelPage",
    "LabelSet",
    "LabelStore",
    "ResolvedLabel",
    "calibrated_config",
    "check_label_fields",
    "conflicts_of",
    "decode_cursor",
    "default_labels_path",
    "encode_cursor",
    "labels_to_jsonl",
    "labels_to_qrels",
    "qrels_escape",
    "qrels_unescape",
    "read_label_file",
    "read_label_lines",
    "trec_token",
]


def trec_token(value: object) -> str:
    """A query id or docno as one TREC token (whitespace replaced by ``_``), as exports do."""
    return "_".join(str(value).split()) or "_"


def qrels_escape(value: str) -> str:
    """An id as one TREC qrels token that :func:`qrels_unescape` reads back exactly: every
    whitespace, control character and ``%`` percent-encoded (its UTF-8 bytes as ``%XX``),
    everything else kept (``doc 1`` -> ``doc%201``, ``50%`` -> ``50%25``)."""
    return "".join(
        urllib.parse.quote(ch, safe="")
        if ch == "%" or ch.isspace() or ch < " " or "\x7f" <= ch <= "\x9f"
        else ch
        for ch in value
    )


def qrels_unescape(token: str) -> str:
    """The id a :func:`qrels_escape` token stands for (``%XX`` sequences decoded)."""
    return urllib.parse.unquote(token, errors="strict") if "%" in token else token


def default_labels_path() -> Path:
    """``$JUDGE_HOME/labels.sqlite``, beside the verdict cache."""
    return judge_home() / "labels.sqlite"


@dataclass(frozen=True)
class Label:
    """One reviewer's label for one passage of one query (one row of the store or a file).

    ``label`` is None for a retraction (history only). ``judge_*``: the judge verdict the
    label replaced, when the reviewer saw one (``judge_verdict`` ``yes``/``no``/``unjudged``,
    its grade, P(yes) and template id). ``audit``: the item was an audit item of the review
    queue (drawn uniformly, as the store's ``audit_draws`` recorded), so agreement can be
    reported on an unbiased subset. ``history_id``: the row id in ``label_history`` (0 for
    labels not from a store). ``created``: when the store wrote it (its clock);
    ``source_created``: the time an imported label carried (shown, never deciding)."""

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
    source_created: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.qid, self.docno)

    def as_dict(self) -> dict[str, Any]:
        """The JSONL export object (every field)."""
        return {name: getattr(self, name) for name in _LABEL_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "<memory>", line: int | None = None) -> Label:
        """A label from a JSONL export object; :class:`InputError` names the bad field.
        The object's ``created`` (or ``source_created``) becomes ``source_created``: the
        store writes its own time."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(
                f"unknown label field(s) {', '.join(unknown)}", path=where, line=line, field=unknown[0]
            )
        values = dict(data)
        values.pop("history_id", None)
        carried = values.pop("created", None)
        if values.get("source_created") is None and carried is not None:
            values["source_created"] = carried
            if not _is_time(carried):
                raise InputError(
                    "must be a finite time in seconds since 1970", path=where, line=line, field="created"
                )
        fields = check_label_fields(values, where=where, line=line)
        return cls(**fields)


def _is_time(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= MAX_TIME
    )


def _text_problem(value: object, limit: int, *, multiline: bool = False, empty: bool = False) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if not empty and not value.strip():
        return "must not be empty"
    if len(value) > limit:
        return f"{len(value)} characters; at most {limit}"
    allowed = "\n\r\t" if multiline else ""
    bad = next((ch for ch in value if (ch < " " or "\x7f" <= ch <= "\x9f") and ch not in allowed), None)
    if bad is not None:
        return f"control character U+{ord(bad):04X}"
    return None


def _number_problem(value: object, low: float, high: float) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number, got {type(value).__name__}"
    if not math.isfinite(value) or not low <= value <= high:
        return f"must be a finite number in [{low:g}, {high:g}], got {value!r}"
    return None


def _field_problems(data: Mapping[str, Any]) -> Iterator[tuple[str, str | None]]:
    """(field, problem) for each field of a label object, in a fixed order."""
    for name in ("qid", "docno"):
        value = data.get(name)
        yield (
            name,
            (
                f"must be a string, got {type(value).__name__}"
                if not isinstance(value, str)
                else id_problem(value)
            ),
        )
    yield "reviewer", _text_problem(data.get("reviewer"), MAX_NAME_CHARS)
    yield "collection", _text_problem(data.get("collection", DEFAULT_COLLECTION), MAX_NAME_CHARS)
    query = data.get("query")
    yield "query", None if query is None else _text_problem(query, MAX_QUERY_CHARS, multiline=True)
    yield "comment", _text_problem(data.get("comment", ""), MAX_COMMENT_CHARS, multiline=True, empty=True)
    verdict = data.get("judge_verdict")
    yield (
        "judge_verdict",
        (None if verdict is None or verdict in ("yes", "no", "unjudged") else "must be yes, no or unjudged"),
    )
    grade = data.get("judge_grade")
    yield (
        "judge_grade",
        (
            None
            if grade is None or (isinstance(grade, int) and not isinstance(grade, bool) and 0 <= grade <= 3)
            else "must be an integer grade 0..3"
        ),
    )
    p_yes = data.get("judge_p_yes")
    yield "judge_p_yes", None if p_yes is None else _number_problem(p_yes, 0.0, 1.0)
    template = data.get("template_id")
    yield "template_id", None if template is None else _text_problem(template, MAX_NAME_CHARS)
    audit = data.get("audit", False)
    yield "audit", None if isinstance(audit, bool) else f"must be true or false, got {audit!r}"
    source = data.get("source_created")
    yield (
        "source_created",
        (None if source is None or _is_time(source) else "must be a finite time in seconds since 1970"),
    )


def check_label_fields(
    data: Mapping[str, Any], *, where: str | None = None, line: int | None = None
) -> dict[str, Any]:
    """The fields of one label (a :class:`Label`'s, without ``created``/``history_id``)
    checked: ids as a job's lines take them, names and comment bounded strings without
    control characters, ``label`` on ``scale``, ``judge_p_yes`` finite in [0, 1],
    ``audit`` a boolean, ``source_created`` a finite time. :class:`InputError` naming the
    first bad field (and ``where``/``line``)."""
    for name, problem in _field_problems(data):
        if problem is not None:
            raise InputError(problem, path=where, line=line, field=name)
    try:
        scale = (
            check_scale(data.get("scale", "binary")) if isinstance(data.get("scale", "binary"), str) else None
        )
        if scale is None:
            raise ScaleError("must be binary or graded", field="scale")
        value = data.get("label")
        if value is not None:
            check_label(value, scale)
    except ScaleError as exc:
        raise InputError(exc.message, path=where, line=line, field=exc.field) from None
    allowed = set(Label.__dataclass_fields__) - {"created", "history_id"}
    out = {k: v for k, v in data.items() if k in allowed}
    out["scale"] = scale
    return out


_LABEL_FIELDS = tuple(Label.__dataclass_fields__)


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


def conflicts_of(latest: Iterable[Label]) -> list[LabelConflict]:
    """The conflicts among reviewers' latest labels (``latest``: one per reviewer and passage)."""
    groups: dict[tuple[str, str, str], list[Label]] = {}
    for lab in latest:
        groups.setdefault((lab.collection, lab.qid, lab.docno), []).append(lab)
    out: list[LabelConflict] = []
    for (coll, qid, docno), labs in groups.items():
        values = {x.reviewer: int(x.label) for x in labs if x.label is not None}
        scales = {x.reviewer: x.scale for x in labs}
        if len(set(values.values())) > 1 or len(set(scales.values())) > 1:
            out.append(LabelConflict(coll, qid, docno, values, scales))
    return out


class LabelSet:
    """Labels resolved to one per (qid, docno) (the latest among reviewers' latest labels),
    from a store or a file. :meth:`lookup` is what overrides use."""

    def __init__(self, labels: Iterable[Label], *, source: str = "labels") -> None:
        self.source = source
        # The order of writing decides (the store's history id; a file's line order), never
        # a time a label carries.
        latest: dict[tuple[str, str], dict[str, tuple[tuple[int, int], Label]]] = {}
        for seq, lab in enumerate(labels):
            if lab.label is None:
                latest.get(lab.key, {}).pop(lab.reviewer, None)
                continue
            per = latest.setdefault(lab.key, {})
            order = (lab.history_id, seq)
            old = per.get(lab.reviewer)
            if old is None or order >= old[0]:
                per[lab.reviewer] = (order, lab)
        self._items: dict[tuple[str, str], ResolvedLabel] = {}
        for key, ordered in latest.items():
            if not ordered:
                continue
            kept = {r: x for r, (_, x) in ordered.items()}
            newest = max(ordered.values(), key=lambda x: x[0])[1]
            values = {r: int(x.label) for r, x in kept.items() if x.label is not None}
            scales = {x.scale for x in kept.values()}
            conflict = len(set(values.values())) > 1 or len(scales) > 1
            self._items[key] = ResolvedLabel(newest, values, conflict)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[ResolvedLabel]:
        return iter(self._items.values())

    def lookup(self, qid: object, docno: str, query: str | None = None) -> ResolvedLabel | None:
        """The label for (qid, docno), or None; None too when the label keeps a query text
        and ``query`` is given and differs (another data set's query with the same id)."""
        hit = self._items.get((str(qid), docno))
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


_QUARANTINE_COLUMNS = (
    "id",
    "collection",
    "qid",
    "docno",
    "reviewer",
    "label",
    "scale",
    "query",
    "created",
    "comment",
    "judge_verdict",
    "judge_grade",
    "judge_p_yes",
    "template_id",
    "audit",
)


def _stored_row_problem(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, problem) of a history row an older judge wrote unchecked, or None."""
    created = row["created"]
    if not _is_time(created):
        return "created", f"not a finite time: {created!r}"
    if row["audit"] not in (0, 1):
        return "audit", f"not 0/1: {row['audit']!r}"
    data = {k: row[k] for k in row if k not in ("id", "created", "audit")}
    data["audit"] = bool(row["audit"])
    label = row["label"]
    for name, problem in _field_problems(data):
        if problem is not None:
            return name, problem
    try:
        scale = check_scale(row["scale"])
        if label is not None:
            check_label(label, scale)
    except (ScaleError, TypeError) as exc:
        return "label", str(exc)
    return None


def _m003_checked(conn: sqlite3.Connection) -> None:
    """Labels written by an older judge without checks (a text or infinite ``created``, a
    P(yes) off [0, 1], ...) move to ``label_quarantine`` with the reason (each reviewer's
    latest is then the latest good row); ``source_created`` (the time an import carried);
    the queue's audit draws; indexes for paging and for one job's labels."""
    conn.execute(
        "CREATE TABLE label_quarantine (id INTEGER PRIMARY KEY, row TEXT NOT NULL, field TEXT NOT NULL, "
        "problem TEXT NOT NULL, quarantined REAL NOT NULL)"
    )
    conn.execute("ALTER TABLE label_history ADD COLUMN source_created REAL")
    names = ", ".join(_QUARANTINE_COLUMNS)
    bad: list[tuple[int, str, str, str]] = []
    for values in conn.execute(f"SELECT {names} FROM label_history"):
        row = dict(zip(_QUARANTINE_COLUMNS, values, strict=True))
        problem = _stored_row_problem(row)
        if problem is not None:
            shown = json.dumps(
                {k: v if isinstance(v, int | str) or v is None else repr(v) for k, v in row.items()}
            )
            bad.append((int(row["id"]), shown, problem[0], problem[1]))
    now = time.time()
    for hid, shown, field_name, problem_text in bad:
        conn.execute(
            "INSERT INTO label_quarantine (id, row, field, problem, quarantined) VALUES (?, ?, ?, ?, ?)",
            (hid, shown, field_name, problem_text, now),
        )
        conn.execute("DELETE FROM label_history WHERE id = ?", (hid,))
    if bad:  # each reviewer's latest is the latest row left
        conn.execute("DELETE FROM labels")
        conn.execute(
            "INSERT INTO labels (collection, qid, docno, reviewer, history_id) "
            "SELECT collection, qid, docno, reviewer, MAX(id) FROM label_history GROUP BY 1, 2, 3, 4"
        )
        conn.execute(
            "DELETE FROM labels WHERE history_id IN (SELECT id FROM label_history WHERE label IS NULL)"
        )
    conn.execute(
        "CREATE TABLE audit_draws (collection TEXT NOT NULL, qid TEXT NOT NULL, docno TEXT NOT NULL, "
        "job TEXT NOT NULL, drawn REAL NOT NULL, PRIMARY KEY (collection, qid, docno))"
    )
    conn.execute("CREATE INDEX label_history_page ON label_history (collection, id)")
    conn.execute("CREATE INDEX labels_page ON labels (collection, history_id)")


LABEL_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _m001_labels,
    _m002_calibrations,
    _m003_checked,
)
"""Label-store schema migrations in order; after migration ``i`` ``user_version`` is ``i``.
Append to change the schema; never edit one that has shipped."""

LABEL_SCHEMA_VERSION = len(LABEL_MIGRATIONS)

_COLUMNS = (
    "id, collection, qid, docno, reviewer, label, scale, query, created, comment, "
    "judge_verdict, judge_grade, judge_p_yes, template_id, audit, source_created"
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
        source_created=None if row[15] is None else float(row[15]),
    )


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
        return int(text[1:])
    except ValueError:
        raise InputError("not a cursor this server gave", field="cursor") from None


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
                        "source_created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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

    def latest_for(self, qids: Iterable[str], *, collection: str = DEFAULT_COLLECTION) -> list[Label]:
        """Each reviewer's latest label on the given queries only (one indexed look-up per
        query: the cost of a job's labels, not of the store)."""
        wanted = sorted(set(qids))
        cols = ", ".join(f"h.{c.strip()}" for c in _COLUMNS.split(","))
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
        if history:
            sql = f"SELECT {_COLUMNS} FROM label_history WHERE collection = ? AND id > ? ORDER BY id LIMIT ?"
        else:
            cols = ", ".join(f"h.{c.strip()}" for c in _COLUMNS.split(","))
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
        return self._select(f"SELECT {_COLUMNS} FROM label_history{where} ORDER BY id", params)

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
    """The labels of :func:`read_label_lines`, without their line numbers."""
    return [lab for _, lab in read_label_lines(path, reviewer=reviewer, scale=scale, collection=collection)]


def read_label_lines(
    path: str | Path,
    *,
    reviewer: str | None = None,
    scale: Scale | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> list[tuple[int, Label]]:
    """Labels from a TREC qrels file or a JSONL labels export (``.jsonl``/``.json`` or a
    first non-blank character ``{``).

    qrels: each line is a label by ``reviewer`` (required) on ``scale`` (default: binary
    when every grade is 0/1, else graded), ids unescaped (:func:`qrels_unescape`); negative
    grades are skipped. JSONL: each object as :meth:`Label.as_dict` writes it; each line
    keeps its own ``reviewer`` and ``collection`` (``reviewer``/``collection`` given here
    fill lines without one; ``scale`` given here overrides). Bad input raises
    :class:`InputError` naming file, line and field; nothing is returned then."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such labels file", path=p)
    with p.open("rb") as fh:
        head = fh.read(4096).lstrip()
    if p.suffix in (".jsonl", ".json") or head.startswith(b"{"):
        return _read_jsonl_labels(p, reviewer=reviewer, scale=scale, collection=collection)
    if reviewer is None or not reviewer:
        raise InputError("a qrels file needs a reviewer name (--reviewer NAME)", path=p, field="reviewer")
    rows = _read_qrels_lines(p)
    use: Scale = scale if scale is not None else _scale_of_labels([g for *_, g in rows if g >= 0])
    out: list[tuple[int, Label]] = []
    for number, qid, docno, grade in rows:
        if grade < 0:
            continue
        fields = check_label_fields(
            {
                "qid": qid,
                "docno": docno,
                "label": grade,
                "reviewer": reviewer,
                "scale": use,
                "collection": collection,
            },
            where=str(p),
            line=number,
        )
        out.append((number, Label(**fields)))
    return out


def _read_qrels_lines(p: Path) -> list[tuple[int, str, str, int]]:
    """(line, qid, docno, grade) of each line of a qrels file (``qid iter docno grade``),
    ids unescaped (:func:`qrels_unescape`); strict UTF-8, :class:`InputError` naming the line."""
    out: list[tuple[int, str, str, int]] = []
    with p.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"invalid UTF-8 at byte {exc.start}", path=p, line=number) from None
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 4:
                raise InputError(
                    f"expected 4 columns (qid iter docno grade), got {len(parts)}", path=p, line=number
                )
            try:
                grade = int(parts[3])
            except ValueError:
                raise InputError(
                    f"not an integer: {parts[3][:40]!r}", path=p, line=number, field="grade"
                ) from None
            ids: list[str] = []
            for name, token in (("qid", parts[0]), ("docno", parts[2])):
                try:
                    ids.append(qrels_unescape(token))
                except UnicodeDecodeError:
                    raise InputError(
                        "a %XX escape that is not UTF-8", path=p, line=number, field=name
                    ) from None
            out.append((number, ids[0], ids[1], grade))
    if not out:
        raise InputError("empty file: no data lines", path=p, line=1)
    return out


def _read_jsonl_labels(
    p: Path, *, reviewer: str | None, scale: Scale | None, collection: str
) -> list[tuple[int, Label]]:
    """Each line checked as a dataset line is (:func:`judge.io.json_problem`): invalid UTF-8,
    a lone surrogate escape or nesting deeper than :data:`judge.io.MAX_JSON_DEPTH` is an
    :class:`InputError` naming its line, never a crash."""
    out: list[tuple[int, Label]] = []
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
            if reviewer and "reviewer" not in data:
                data["reviewer"] = reviewer
            if scale is not None:
                data["scale"] = scale
            out.append((number, Label.from_dict(data, where=str(p), line=number)))
    return out


def labels_to_qrels(
    labels: LabelSet, path: str | Path, *, scale: Scale | None = None, level: int | None = None
) -> int:
    """Write the resolved labels as TREC qrels (ids by :func:`qrels_escape`); returns the
    number of lines."""
    qrels = labels.qrels(scale, level=level)
    with Path(path).open("w", encoding="utf-8") as fh:
        for qid, docs in qrels.items():
            for docno, value in docs.items():
                fh.write(f"{qrels_escape(qid)} 0 {qrels_escape(docno)} {value}\n")
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
