"""The service's job database: one SQLite file (WAL), migrated by ``PRAGMA user_version``.

A job row holds its kind, status, options, counters, summary, timestamps and the SHA-256
of its ``Idempotency-Key`` (never the key itself). A job's records live in its directory
(see :mod:`judge.server._job_kind`); the row is the index and the progress. The ``sessions``
table holds the viewer's sign-in sessions (see :mod:`judge.server._sessions`).

Each migration is a script run once, in order, in one transaction with the version bump,
so an old database is brought up to date at start and a newer one is refused.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from judge.store import SQLiteHolder, run_migrations

JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"done", "failed", "cancelled"})
STATUSES: tuple[str, ...] = ("queued", "running", "done", "failed", "cancelled")

MIGRATIONS: tuple[str, ...] = (
    # 1: jobs
    """
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        phase TEXT NOT NULL DEFAULT 'score',
        options TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        started REAL,
        finished REAL,
        queries_total INTEGER NOT NULL DEFAULT 0,
        passages_total INTEGER NOT NULL DEFAULT 0,
        queries_done INTEGER NOT NULL DEFAULT 0,
        passages_done INTEGER NOT NULL DEFAULT 0,
        unjudged INTEGER NOT NULL DEFAULT 0,
        rejected INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        error TEXT,
        summary TEXT,
        idempotency_hash TEXT UNIQUE,
        body_hash TEXT
    );
    CREATE INDEX jobs_status_created ON jobs (status, created);
    """,
    # 2: viewer sessions (see judge.server._sessions): the token's SHA-256, never the token
    """
    CREATE TABLE sessions (
        token_hash TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        key_label TEXT NOT NULL,
        keyring TEXT NOT NULL,
        created REAL NOT NULL,
        expires REAL NOT NULL
    );
    CREATE INDEX sessions_expires ON sessions (expires);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

_COLUMNS = (
    "id",
    "kind",
    "status",
    "phase",
    "options",
    "created",
    "updated",
    "started",
    "finished",
    "queries_total",
    "passages_total",
    "queries_done",
    "passages_done",
    "unjudged",
    "rejected",
    "attempts",
    "error",
    "summary",
)


class SchemaError(RuntimeError):
    """The database was written by a newer version of ``judge``."""


class QueueFull(RuntimeError):
    """As many jobs as the queue holds are waiting already."""


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the migrations this database has not seen; return the schema version."""

    def newer(found: int, known: int) -> SchemaError:
        return SchemaError(f"job database schema {found} is newer than this judge's ({known}); upgrade judge")

    run_migrations(conn, MIGRATIONS, newer=newer)
    return SCHEMA_VERSION


class JobDB(SQLiteHolder):
    """Jobs in SQLite: a single connection behind a lock, called from the event loop
    (every statement is a primary-key or indexed lookup, microseconds in WAL mode)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, what="job database", migrate=migrate, row_factory=sqlite3.Row)
        self.schema_version = SCHEMA_VERSION

    @staticmethod
    def _row(row: sqlite3.Row | None) -> dict[str, Any] | None:
        if row is None:
            return None
        job = {k: row[k] for k in _COLUMNS}
        job["options"] = json.loads(job["options"])
        job["summary"] = json.loads(job["summary"]) if job["summary"] else None
        return job

    def insert(
        self,
        job_id: str,
        *,
        kind: str,
        options: Mapping[str, Any],
        queries_total: int,
        passages_total: int,
        rejected: int,
        idempotency_hash: str | None,
        body_hash: str | None,
        max_queued: int | None = None,
    ) -> dict[str, Any]:
        """Insert a queued job; with ``max_queued``, only if fewer jobs are queued, checked and
        inserted in one ``BEGIN IMMEDIATE`` transaction (else :class:`QueueFull`), so
        concurrent submissions never overfill the queue."""
        now = time.time()
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                if max_queued is not None:
                    queued = conn.execute("SELECT COUNT(*) FROM jobs WHERE status = 'queued'").fetchone()[0]
                    if int(queued) >= max_queued:
                        raise QueueFull(f"{queued} jobs queued")
                conn.execute(
                    "INSERT INTO jobs (id, kind, status, options, created, updated, queries_total,"
                    " passages_total, rejected, idempotency_hash, body_hash)"
                    " VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        job_id,
                        kind,
                        json.dumps(dict(options), ensure_ascii=False),
                        now,
                        now,
                        queries_total,
                        passages_total,
                        rejected,
                        idempotency_hash,
                        body_hash,
                    ),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        job = self.get(job_id)
        assert job is not None
        return job

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._connection().execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._row(row)

    def by_idempotency(self, key_hash: str) -> tuple[dict[str, Any], str | None] | None:
        """The job created with this (hashed) key, and the hash of the body it came with."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT * FROM jobs WHERE idempotency_hash = ?", (key_hash,))
                .fetchone()
            )
        job = self._row(row)
        return None if job is None or row is None else (job, row["body_hash"])

    def list_jobs(
        self, *, status: str | None = None, kind: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        sql = "SELECT * FROM jobs"
        where: list[str] = []
        args: list[Any] = []
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created DESC, id LIMIT ? OFFSET ?"
        args += [limit, offset]
        with self._lock:
            rows = self._connection().execute(sql, args).fetchall()
        return [j for j in (self._row(r) for r in rows) if j is not None]

    def count_by_status(self) -> dict[str, int]:
        with self._lock:
            rows = self._connection().execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        counts = dict.fromkeys(STATUSES, 0)
        counts.update({str(r[0]): int(r[1]) for r in rows})
        return counts

    def count_by_kind(self) -> dict[tuple[str, str], int]:
        """Jobs by (kind, status), every status of every kind present (0 where none)."""
        with self._lock:
            rows = (
                self._connection()
                .execute("SELECT kind, status, COUNT(*) FROM jobs GROUP BY kind, status")
                .fetchall()
            )
        kinds = {str(r[0]) for r in rows}
        counts = {(k, s): 0 for k in kinds for s in STATUSES}
        counts.update({(str(r[0]), str(r[1])): int(r[2]) for r in rows})
        return counts

    def next_queued(self, exclude: Iterable[str] = ()) -> dict[str, Any] | None:
        skip = list(exclude)
        sql = "SELECT * FROM jobs WHERE status = 'queued'"
        if skip:
            sql += " AND id NOT IN (" + ",".join("?" * len(skip)) + ")"
        sql += " ORDER BY created, id LIMIT 1"
        with self._lock:
            row = self._connection().execute(sql, skip).fetchone()
        return self._row(row)

    def update(self, job_id: str, **fields: Any) -> None:
        if not fields:
            return
        for key in fields:
            if key not in _COLUMNS or key == "id":
                raise KeyError(key)
        values = [
            json.dumps(v, ensure_ascii=False) if k in ("summary", "options") and v is not None else v
            for k, v in fields.items()
        ]
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._lock:
            self._connection().execute(
                f"UPDATE jobs SET {sets}, updated = ? WHERE id = ?", [*values, time.time(), job_id]
            )

    def requeue_interrupted(self) -> list[str]:
        """Jobs left ``running`` by a process that died: back to ``queued`` (they resume)."""
        with self._lock:
            rows = self._connection().execute("SELECT id FROM jobs WHERE status = 'running'").fetchall()
            ids = [str(r[0]) for r in rows]
            self._connection().execute(
                "UPDATE jobs SET status = 'queued', updated = ? WHERE status = 'running'", (time.time(),)
            )
        return ids
