"""One way to open a SQLite file and bring its schema up to date, for every database of
``judge``: the verdict cache, the label store and the service's job database.

A database's schema version is its ``PRAGMA user_version``: the number of migrations applied.
Migrations are a tuple, appended to and never edited; each is a function of the connection or a
SQL script (statements separated by ``;``). :func:`run_migrations` applies the missing ones in
order, each in its own ``BEGIN IMMEDIATE`` transaction together with its version bump, and
re-reads the version under that lock, so two processes opening an old file at once apply each
migration exactly once (the second waits, then finds it done). A file written by a newer
``judge`` (version above the number of migrations known) is refused with the caller's error.

Every store holds its file the same way (:class:`SQLiteHolder`): one connection behind a lock,
opened and migrated once, closed once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from judge.io import InputError

Migration = Callable[[sqlite3.Connection], None] | str

BUSY_TIMEOUT_S = 30.0

MAX_SQLITE_INT = 2**63 - 1
"""The largest integer SQLite stores (a signed 64-bit integer). An integer from outside (a
request's offset, a page cursor, a seed) is checked against it before it reaches a
statement, where a larger one is an ``OverflowError``."""


def open_sqlite(path: str | Path) -> sqlite3.Connection:
    """A connection to ``path`` (its folder created) in autocommit mode, usable from any
    thread (callers serialise it with their own lock), WAL journal, ``synchronous=NORMAL``
    and a 30 s busy timeout. A path that cannot be a database (a folder, a file that is not
    SQLite, a place that cannot be written) is an :class:`InputError` naming it."""
    file = Path(path)
    if file.is_dir():
        raise InputError("a folder, not a SQLite database file", path=file)
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(file), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
    except (OSError, sqlite3.Error) as exc:
        raise InputError(f"cannot open as a SQLite database: {exc}", path=file) from None
    try:
        _use_wal(conn)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    except sqlite3.DatabaseError as exc:
        conn.close()
        busy = getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        if busy:
            raise
        raise InputError(f"cannot open as a SQLite database: {exc}", path=file) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to the WAL journal. The switch needs the file to itself and SQLite
    answers "database is locked" at once, without waiting out the busy timeout, while
    another connection is opening the same new file; so it is tried again (every 10 ms,
    for at most the busy timeout) until the other opener is through."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(0.01)


def schema_version(conn: sqlite3.Connection) -> int:
    """The file's schema version (``PRAGMA user_version``; 0 for a new file)."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _apply(conn: sqlite3.Connection, migration: Migration) -> None:
    if isinstance(migration, str):
        for statement in migration.split(";"):
            if statement.strip():
                conn.execute(statement)
    else:
        migration(conn)


def run_migrations(
    conn: sqlite3.Connection,
    migrations: Sequence[Migration],
    *,
    newer: Callable[[int, int], Exception],
) -> int:
    """Apply the migrations ``conn`` has not seen; return the version found before.

    ``conn`` must be in autocommit mode (``isolation_level=None``). ``newer(found, known)``
    makes the error raised for a file whose version is above ``len(migrations)``."""
    known = len(migrations)
    found = schema_version(conn)
    if found > known:
        raise newer(found, known)
    for number in range(found + 1, known + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = schema_version(conn)
            if current > known:  # a newer judge migrated it while we waited for the lock
                raise newer(current, known)
            if current < number:  # else another process has just applied it
                _apply(conn, migrations[number - 1])
                conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return found


class SQLiteHolder:
    """One connection to a SQLite file behind a lock: the base of every store of ``judge``.

    Opens ``path`` with :func:`open_sqlite`, runs ``migrate(conn)`` (its result is kept as
    :attr:`schema_found`; without ``migrate`` the file's version is read and nothing is
    changed) and closes the connection again if that fails. Subclasses run their
    statements under ``self._lock`` on ``self._connection()``, which names the store
    (``what``) once :meth:`close` has run. Safe to share between threads and the event loop.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        what: str,
        migrate: Callable[[sqlite3.Connection], int] | None = None,
        row_factory: Any = None,
    ) -> None:
        self.path = Path(path)
        self._what = what
        self._lock = threading.Lock()
        conn = open_sqlite(self.path)
        try:
            if row_factory is not None:
                conn.row_factory = row_factory
            self.schema_found = migrate(conn) if migrate is not None else schema_version(conn)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"{self._what} is closed")
        return self._conn

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
