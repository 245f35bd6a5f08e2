"""The label store's schema: its migrations in order (the third moves label rows an older
judge stored unchecked to ``label_quarantine``, the fifth calibration rows to
``calibration_quarantine``), the columns a label row has, and a row read back
as a :class:`judge.store.Label`."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from judge.metrics import ScaleError, check_label, check_scale
from judge.store._cache import CacheVersionError
from judge.store._label_model import Label, calibration_problems, field_problems, is_time
from judge.store._sqlite import run_migrations

__all__ = ["LABEL_COLUMNS", "LABEL_MIGRATIONS", "LABEL_SCHEMA_VERSION", "migrate_labels", "row_label"]


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


class _BadText(bytes):
    """A TEXT value whose bytes are not UTF-8 (SQLite stores what it is given): read as its
    bytes, so the row can be quarantined instead of every read of the table raising."""


def _text_or_bytes(raw: bytes) -> str | _BadText:
    """The migration's ``text_factory``: UTF-8 text as a string, anything else kept as bytes."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return _BadText(raw)


def _bad_text(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, problem) of the first cell of ``row`` whose bytes are not UTF-8, or None."""
    for name, value in row.items():
        if isinstance(value, _BadText):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as exc:
                return name, f"text that is not UTF-8 (byte 0x{value[exc.start]:02x} at {exc.start})"
    return None


def _shown(row: Mapping[str, Any]) -> str:
    """A quarantined row as JSON: numbers, text and NULL as they are, anything else its repr."""
    return json.dumps({k: v if isinstance(v, int | str) or v is None else repr(v) for k, v in row.items()})


def _scan(
    conn: sqlite3.Connection,
    table: str,
    key: str,
    columns: Sequence[str],
    problem_of: Callable[[Mapping[str, Any]], tuple[str, str] | None],
) -> list[tuple[int, str, str, str]]:
    """(``key``, the row as JSON, field, problem) of every row of ``table`` in which
    ``problem_of`` finds a problem; text that is not UTF-8 is read as its bytes."""
    bad: list[tuple[int, str, str, str]] = []
    conn.text_factory = _text_or_bytes
    try:
        for found, *values in conn.execute(f"SELECT {key}, {', '.join(columns)} FROM {table}"):
            row = dict(zip(columns, values, strict=True))
            problem = problem_of(row)
            if problem is not None:
                bad.append((int(found), _shown(row), problem[0], problem[1]))
    finally:
        conn.text_factory = str
    return bad


def _stored_row_problem(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, problem) of a history row an older judge wrote unchecked, or None."""
    bad_text = _bad_text(row)
    if bad_text is not None:
        return bad_text
    created = row["created"]
    if not is_time(created):
        return "created", f"not a finite time: {created!r}"
    if row["audit"] not in (0, 1):
        return "audit", f"not 0/1: {row['audit']!r}"
    data = {k: row[k] for k in row if k not in ("id", "created", "audit")}
    data["audit"] = bool(row["audit"])
    label = row["label"]
    for name, problem in field_problems(data):
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
    P(yes) off [0, 1], text whose bytes are not UTF-8, ...) move to ``label_quarantine``
    with the reason (each reviewer's latest is then the latest good row); ``source_created``
    (the time an import carried); the queue's audit draws; indexes for paging and for one
    job's labels."""
    conn.execute(
        "CREATE TABLE label_quarantine (id INTEGER PRIMARY KEY, row TEXT NOT NULL, field TEXT NOT NULL, "
        "problem TEXT NOT NULL, quarantined REAL NOT NULL)"
    )
    conn.execute("ALTER TABLE label_history ADD COLUMN source_created REAL")
    bad = _scan(conn, "label_history", "id", _QUARANTINE_COLUMNS, _stored_row_problem)
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


def _m004_sample_draws(conn: sqlite3.Connection) -> None:
    """The review queue's sample mode: each pair it drew with its inclusion probability and
    design (``sample_draws``), and the probability a label of a drawn pair carries
    (``label_history.inclusion``; NULL: not drawn with a known probability, so never in a
    prediction-powered estimate)."""
    conn.execute(
        "CREATE TABLE sample_draws (collection TEXT NOT NULL, qid TEXT NOT NULL, docno TEXT NOT NULL, "
        "job TEXT NOT NULL, inclusion REAL NOT NULL, design TEXT NOT NULL, drawn REAL NOT NULL, "
        "PRIMARY KEY (collection, qid, docno))"
    )
    conn.execute("ALTER TABLE label_history ADD COLUMN inclusion REAL")


_CALIBRATION_COLUMNS = (
    "name",
    "template_id",
    "template_hash",
    "threshold",
    "previous_threshold",
    "created",
    "report",
)


def _stored_calibration_problem(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, problem) of a calibration row an older judge (or another writer) stored
    unchecked, or None: what :meth:`judge.store.LabelStore.save_calibration` refuses now,
    text that is not UTF-8, a report that is not JSON."""
    bad_text = _bad_text(row)
    if bad_text is not None:
        return bad_text
    data = dict(row)
    try:
        data["report"] = json.loads(row["report"])
    except (TypeError, ValueError) as exc:
        return "report", f"not JSON ({exc})"
    return next(((name, problem) for name, problem in calibration_problems(data) if problem), None)


def _m005_checked_calibrations(conn: sqlite3.Connection) -> None:
    """Migration 3 for ``calibrations``: a row whose text is not UTF-8 (every list of the
    calibrations raised), whose threshold is not a number in [0, 1], whose time is not a
    finite time or whose report is not a JSON object moves to ``calibration_quarantine``
    (the row as it was, the field, the problem) instead of failing the run that selects it."""
    conn.execute(
        "CREATE TABLE calibration_quarantine (row TEXT NOT NULL, field TEXT NOT NULL, "
        "problem TEXT NOT NULL, quarantined REAL NOT NULL)"
    )
    bad = _scan(conn, "calibrations", "rowid", _CALIBRATION_COLUMNS, _stored_calibration_problem)
    now = time.time()
    for rowid, shown, field_name, problem_text in bad:
        conn.execute(
            "INSERT INTO calibration_quarantine (row, field, problem, quarantined) VALUES (?, ?, ?, ?)",
            (shown, field_name, problem_text, now),
        )
        conn.execute("DELETE FROM calibrations WHERE rowid = ?", (rowid,))


def _m006_sample_frames(conn: sqlite3.Connection) -> None:
    """The sample mode's draws per job, several draws over one job each with its union
    probability: ``sample_rounds`` (one row a draw: its job, round, design, expected size, seed,
    time and how many pairs it took) and ``sample_frames`` (every pair of a sampled job's
    population: ``inclusion``, the probability that some draw so far took it, 1 - prod(1 - p_i);
    ``draws``, how many did). Rows of ``sample_draws`` (one draw a pair, keyed by pair, not job)
    move over as drawn pairs of a ``legacy`` frame: their population's other pairs were never
    recorded, so a further draw over such a job is refused rather than given a wrong union."""
    conn.execute(
        "CREATE TABLE sample_rounds (collection TEXT NOT NULL, job TEXT NOT NULL, round INTEGER NOT NULL, "
        "design TEXT NOT NULL, expected REAL, seed INTEGER, drawn REAL NOT NULL, taken INTEGER NOT NULL, "
        "PRIMARY KEY (collection, job, round))"
    )
    conn.execute(
        "CREATE TABLE sample_frames (collection TEXT NOT NULL, job TEXT NOT NULL, qid TEXT NOT NULL, "
        "docno TEXT NOT NULL, inclusion REAL NOT NULL, draws INTEGER NOT NULL, design TEXT NOT NULL, "
        "legacy INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (collection, job, qid, docno))"
    )
    conn.execute(
        "INSERT INTO sample_frames (collection, job, qid, docno, inclusion, draws, design, legacy) "
        "SELECT collection, job, qid, docno, inclusion, 1, design, 1 FROM sample_draws"
    )
    conn.execute(
        "INSERT INTO sample_rounds (collection, job, round, design, expected, seed, drawn, taken) "
        "SELECT collection, job, 0, MIN(design), NULL, NULL, MIN(drawn), COUNT(*) FROM sample_draws "
        "GROUP BY collection, job"
    )
    conn.execute("DROP TABLE sample_draws")


LABEL_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _m001_labels,
    _m002_calibrations,
    _m003_checked,
    _m004_sample_draws,
    _m005_checked_calibrations,
    _m006_sample_frames,
)
"""Label-store schema migrations in order; after migration ``i`` ``user_version`` is ``i``.
Append to change the schema; never edit one that has shipped."""

LABEL_SCHEMA_VERSION = len(LABEL_MIGRATIONS)

LABEL_COLUMNS = (
    "id, collection, qid, docno, reviewer, label, scale, query, created, comment, "
    "judge_verdict, judge_grade, judge_p_yes, template_id, audit, source_created, inclusion"
)


def migrate_labels(conn: sqlite3.Connection, path: Path) -> int:
    def newer(found: int, known: int) -> CacheVersionError:
        return CacheVersionError(
            f"label store schema version {found} is newer than this judge supports "
            f"({known}); upgrade judge or use another label store",
            path=path,
            field="user_version",
        )

    return run_migrations(conn, LABEL_MIGRATIONS, newer=newer)


def row_label(row: Sequence[Any]) -> Label:
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
        inclusion=None if row[16] is None else float(row[16]),
    )
