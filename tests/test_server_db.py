"""The job database: migrations by ``PRAGMA user_version``, requeueing after a crash, hashed keys."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from judge.server._db import MIGRATIONS, SCHEMA_VERSION, JobDB, SchemaError, sha256_hex


def _insert(db: JobDB, job_id: str) -> None:
    db.insert(
        job_id,
        kind="score",
        options={"mode": "binary"},
        queries_total=2,
        passages_total=5,
        rejected=0,
        idempotency_hash=sha256_hex("idem:" + job_id),
        body_hash="b",
    )


def test_fresh_database_is_migrated_in_wal_mode(tmp_path: Path) -> None:
    db = JobDB(tmp_path / "s.sqlite")
    assert db.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    db.close()
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    again = JobDB(tmp_path / "s.sqlite")  # reopening applies nothing twice
    assert again.schema_version == SCHEMA_VERSION
    again.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaError, match="newer"):
        JobDB(tmp_path / "s.sqlite")


def test_jobs_left_running_are_requeued_and_keys_are_hashed(tmp_path: Path) -> None:
    db = JobDB(tmp_path / "s.sqlite")
    for job_id in ("a", "b", "c"):
        _insert(db, job_id)
    db.update("a", status="running")
    db.update("b", status="done", summary={"queries": 2})
    assert db.requeue_interrupted() == ["a"]
    assert db.get("a")["status"] == "queued"  # type: ignore[index]
    assert db.get("b")["summary"] == {"queries": 2}  # type: ignore[index]
    assert db.count_by_status() == {"queued": 2, "running": 0, "done": 1, "failed": 0, "cancelled": 0}
    assert db.next_queued()["id"] == "a"  # type: ignore[index]  # oldest first
    assert db.next_queued(exclude=["a"])["id"] == "c"  # type: ignore[index]
    found = db.by_idempotency(sha256_hex("idem:c"))
    assert found is not None and found[0]["id"] == "c"
    with pytest.raises(sqlite3.IntegrityError):
        _insert(db, "c")
    with pytest.raises(KeyError):
        db.update("a", bogus=1)
    db.close()
