"""The one SQLite migration runner shared by the verdict cache, label store and job database."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from judge.store import SQLiteHolder, open_sqlite, run_migrations, schema_version


class Newer(Exception):
    pass


def _newer(found: int, known: int) -> Exception:
    return Newer(f"{found} > {known}")


def test_migrations_apply_in_order_once(tmp_path: Path) -> None:
    calls: list[int] = []

    def m2(conn: sqlite3.Connection) -> None:
        calls.append(2)
        conn.execute("ALTER TABLE t ADD COLUMN b INTEGER")

    migrations = ("CREATE TABLE t (a INTEGER); CREATE INDEX t_a ON t (a)", m2)
    conn = open_sqlite(tmp_path / "sub" / "db.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert run_migrations(conn, migrations, newer=_newer) == 0
    assert schema_version(conn) == 2 and calls == [2]
    assert run_migrations(conn, migrations, newer=_newer) == 2  # nothing left to do
    assert calls == [2]
    conn.execute("INSERT INTO t (a, b) VALUES (1, 2)")
    # an old file (version 1) gets only the second migration
    conn.execute("PRAGMA user_version = 1")
    conn.execute("ALTER TABLE t DROP COLUMN b")
    assert run_migrations(conn, migrations, newer=_newer) == 1
    assert calls == [2, 2] and schema_version(conn) == 2
    conn.close()


def test_a_failed_migration_rolls_back_its_version(tmp_path: Path) -> None:
    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE u (x INTEGER)")
        raise RuntimeError("boom")

    conn = open_sqlite(tmp_path / "db.sqlite")
    with pytest.raises(RuntimeError):
        run_migrations(conn, ("CREATE TABLE t (a INTEGER)", broken), newer=_newer)
    assert schema_version(conn) == 1  # the first one stays, the second left nothing behind
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'u'").fetchone() is None
    conn.close()


def test_a_newer_file_is_refused_with_the_callers_error(tmp_path: Path) -> None:
    conn = open_sqlite(tmp_path / "db.sqlite")
    conn.execute("PRAGMA user_version = 5")
    with pytest.raises(Newer, match="5 > 1"):
        run_migrations(conn, ("CREATE TABLE t (a INTEGER)",), newer=_newer)
    conn.close()


def test_two_openers_at_once_apply_each_migration_once(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    applied: list[str] = []
    lock = threading.Lock()

    def m1(conn: sqlite3.Connection) -> None:
        with lock:
            applied.append(threading.current_thread().name)
        conn.execute("CREATE TABLE t (a INTEGER)")  # a second run would fail: table exists

    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def opener() -> None:
        try:
            conn = open_sqlite(path)
            start.wait(timeout=30)
            run_migrations(conn, (m1,), newer=_newer)
            conn.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener, name=f"t{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == [] and len(applied) == 1


def test_openers_of_one_new_file_at_once_all_get_a_wal_connection(tmp_path: Path) -> None:
    """SQLite refuses the switch to WAL at once ("database is locked", no busy wait) while
    another connection opens or migrates the same new file: every opener must still
    succeed."""
    errors: list[BaseException] = []
    modes: list[str] = []
    for trial in range(20):
        path = tmp_path / f"new{trial}.sqlite"
        start = threading.Barrier(8)

        def opener(path: Path = path, start: threading.Barrier = start) -> None:
            try:
                start.wait(timeout=60)
                conn = open_sqlite(path)
                run_migrations(conn, ("CREATE TABLE t (a INTEGER)",), newer=_newer)
                modes.append(conn.execute("PRAGMA journal_mode").fetchone()[0])
                conn.close()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=opener) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert errors == []
    assert modes == ["wal"] * 160


def test_a_holder_opens_migrates_and_closes_once(tmp_path: Path) -> None:
    path = tmp_path / "new" / "h.sqlite"

    def migrate(conn: sqlite3.Connection) -> int:
        return run_migrations(conn, ("CREATE TABLE t (a INTEGER)",), newer=_newer)

    holder = SQLiteHolder(path, what="test store", migrate=migrate, row_factory=sqlite3.Row)
    assert holder.path == path and holder.schema_found == 0
    with holder._lock:
        row = holder._connection().execute("SELECT COUNT(*) AS n FROM t").fetchone()
    assert row["n"] == 0  # the row factory was set
    holder.close()
    holder.close()  # idempotent
    with pytest.raises(RuntimeError, match="test store is closed"):
        holder._connection()
    again = SQLiteHolder(path, what="test store", migrate=migrate)
    assert again.schema_found == 1
    again.close()
    # without migrate: the version is read and the file left as it is
    plain = SQLiteHolder(path, what="plain")
    assert plain.schema_found == 1 and schema_version(plain._connection()) == 1
    plain.close()


def test_a_holder_whose_migration_fails_closes_its_connection(tmp_path: Path) -> None:
    opened: list[sqlite3.Connection] = []

    def migrate(conn: sqlite3.Connection) -> int:
        opened.append(conn)
        raise Newer("9 > 1")

    with pytest.raises(Newer, match="9 > 1"):
        SQLiteHolder(tmp_path / "h.sqlite", what="test store", migrate=migrate)
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened[0].execute("SELECT 1")
