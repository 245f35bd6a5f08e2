"""SQLite verdict cache and the resume helpers (torn-line recovery, atomic rewrite)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from judge.io._errors import InputError
from judge.judging._models import PassageVerdict, TokenUsage
from judge.store import (
    SCHEMA_VERSION,
    CacheVersionError,
    OutputWriter,
    SQLiteVerdictStore,
    atomic_write_lines,
    default_cache_path,
    recover_output,
)
from judge.store._cache import MIGRATIONS


def _verdict(index: int = 0, verdict: str = "yes", grade: int | None = None) -> PassageVerdict:
    return PassageVerdict(
        index=index,
        verdict=verdict,  # type: ignore[arg-type]
        grade=grade,
        reason="理由",
        template_id="binary.zh.v1",
        template_hash="abc",
        backend="fake:rule",
        tokens=TokenUsage(prompt_tokens=10, completion_tokens=3),
        cost=0.5,
    )


async def test_put_get_roundtrip_persists_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "c" / "cache.sqlite"
    async with SQLiteVerdictStore(path) as store:
        assert await store.get("k1") is None
        await store.put("k1", _verdict(grade=None))
        got = await store.get("k1")
        assert got == _verdict()
        assert (store.stats.hits, store.stats.misses, store.stats.puts) == (1, 1, 1)
    async with SQLiteVerdictStore(path) as again:
        assert await again.get("k1") == _verdict()
        assert await again.count() == 1
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


async def test_unjudged_verdicts_are_never_stored(tmp_path: Path) -> None:
    async with SQLiteVerdictStore(tmp_path / "c.sqlite") as store:
        await store.put("k", _verdict(verdict="unjudged"))
        assert await store.get("k") is None
        assert await store.count() == 0


async def test_concurrent_puts_and_gets_from_many_tasks(tmp_path: Path) -> None:
    async with SQLiteVerdictStore(tmp_path / "c.sqlite") as store:
        await asyncio.gather(*(store.put(f"k{i}", _verdict(index=i)) for i in range(200)))
        got = await asyncio.gather(*(store.get(f"k{i}") for i in range(200)))
        assert [g.index if g else None for g in got] == list(range(200))
        assert await store.count() == 200


async def test_two_stores_on_one_file_share_verdicts(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    a = SQLiteVerdictStore(path)
    b = SQLiteVerdictStore(path)
    try:
        await a.put("x", _verdict(verdict="no"))
        got = await b.get("x")
        assert got is not None and got.verdict == "no"
    finally:
        await a.aclose()
        await b.aclose()


def test_default_path_follows_judge_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    assert default_cache_path() == tmp_path / "home" / "cache.sqlite"
    monkeypatch.delenv("JUDGE_HOME")
    assert default_cache_path() == Path.home() / ".cache" / "judge" / "cache.sqlite"


def test_sync_close_works_without_a_loop(tmp_path: Path) -> None:
    store = SQLiteVerdictStore(tmp_path / "c.sqlite")
    store.close()
    store.close()  # idempotent


# --- resume helpers --------------------------------------------------------------------


def test_recover_output_drops_a_torn_last_line(tmp_path: Path) -> None:
    p = tmp_path / "out.jsonl"
    p.write_bytes(b'{"id": "a"}\n{"id": "b"}\n{"id": "c", "verd')
    assert [r["id"] for r in recover_output(p)] == ["a", "b"]
    assert p.read_bytes() == b'{"id": "a"}\n{"id": "b"}\n'
    # A complete last line without its newline is also a torn write (the newline comes last).
    p.write_bytes(b'{"id": "a"}\n{"id": "b"}')
    assert [r["id"] for r in recover_output(p)] == ["a"]
    assert p.read_bytes() == b'{"id": "a"}\n'


def test_recover_output_refuses_garbage_before_the_last_line(tmp_path: Path) -> None:
    p = tmp_path / "out.jsonl"
    p.write_bytes(b'{"id": "a"}\nnot json\n{"id": "c"}\n')
    with pytest.raises(InputError) as info:
        recover_output(p)
    assert info.value.line == 2
    assert p.read_bytes() == b'{"id": "a"}\nnot json\n{"id": "c"}\n'  # untouched


def test_recover_output_of_missing_or_empty_file(tmp_path: Path) -> None:
    assert recover_output(tmp_path / "none.jsonl") == []
    (tmp_path / "e.jsonl").write_bytes(b"")
    assert recover_output(tmp_path / "e.jsonl") == []


def test_output_writer_appends_whole_lines(tmp_path: Path) -> None:
    p = tmp_path / "o.jsonl"
    with OutputWriter(p) as w:
        w.write({"id": "a", "q": "中文"})
    with OutputWriter(p) as w:
        w.write({"id": "b"})
    lines = p.read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["a", "b"]
    assert "中文" in lines[0]


async def test_output_writer_keeps_a_line_whose_writer_task_was_cancelled(tmp_path: Path) -> None:
    # The CI failure this pins: a query finished judging, handed its line to awrite, and a
    # sibling's permanent error cancelled it before the writer thread had started the line.
    gate = threading.Event()

    class SlowWriter(OutputWriter):
        def write(self, record: Mapping[str, Any]) -> None:
            if record["id"] == "first":
                gate.wait(timeout=10)
            super().write(record)

    p = tmp_path / "o.jsonl"
    with SlowWriter(p, fsync=False) as w:
        first = asyncio.create_task(w.awrite({"id": "first"}))
        second = asyncio.create_task(w.awrite({"id": "second"}))
        await asyncio.sleep(0.05)  # both queued; "first" holds the writer thread
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        gate.set()
        await first
    assert [json.loads(line)["id"] for line in p.read_text().splitlines()] == ["first", "second"]


def test_atomic_write_lines_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "o.jsonl"
    p.write_text("old\n")
    atomic_write_lines(p, [{"id": 1}, {"id": 2}])
    assert p.read_text() == '{"id":1}\n{"id":2}\n'
    assert sorted(x.name for x in tmp_path.iterdir()) == ["o.jsonl"]


# --- schema versions and migrations --------------------------------------------------------

# The schema every cache file had before versions existed (judge <= the first release):
# user_version 0, this one table.
V0_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    key TEXT PRIMARY KEY,
    verdict TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def _user_version(path: Path) -> int:
    conn = sqlite3.connect(str(path))
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


async def test_a_version_0_cache_keeps_working_after_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(str(path))
    conn.execute(V0_SCHEMA)
    conn.execute(
        "INSERT INTO verdicts (key, verdict, created) VALUES (?, ?, ?)",
        ("k-old", _verdict(verdict="yes").model_dump_json(), 1.0),
    )
    conn.commit()
    conn.close()
    assert _user_version(path) == 0
    async with SQLiteVerdictStore(path) as store:
        assert store.schema_found == 0
        got = await store.get("k-old")
        assert got is not None and got.verdict == "yes" and got.reason == "理由"
        await store.put("k-new", _verdict(verdict="no"))
        assert await store.count() == 2
    assert _user_version(path) == SCHEMA_VERSION == len(MIGRATIONS)
    async with SQLiteVerdictStore(path) as again:  # already current: nothing to migrate
        assert again.schema_found == SCHEMA_VERSION
        assert (await again.get("k-new")) is not None


def test_a_new_file_is_created_at_the_current_version(tmp_path: Path) -> None:
    store = SQLiteVerdictStore(tmp_path / "new.sqlite")
    store.close()
    assert store.schema_found == 0
    assert _user_version(tmp_path / "new.sqlite") == SCHEMA_VERSION


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    conn = sqlite3.connect(str(path))
    conn.execute(V0_SCHEMA)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(CacheVersionError, match=r"future\.sqlite.*version 2 is newer.*supports \(1\)"):
        SQLiteVerdictStore(path)
    assert _user_version(path) == SCHEMA_VERSION + 1


def test_migrations_run_in_order_each_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import judge.store._cache as cache

    applied: list[int] = []

    def second(conn: sqlite3.Connection) -> None:
        applied.append(2)
        conn.execute("ALTER TABLE verdicts ADD COLUMN note TEXT")

    def third(conn: sqlite3.Connection) -> None:
        applied.append(3)
        assert int(conn.execute("PRAGMA user_version").fetchone()[0]) == 2  # 2 was recorded first
        raise sqlite3.OperationalError("boom")

    path = tmp_path / "m.sqlite"
    SQLiteVerdictStore(path).close()  # version 1
    monkeypatch.setattr(cache, "MIGRATIONS", (*cache.MIGRATIONS, second, third))
    monkeypatch.setattr(cache, "SCHEMA_VERSION", 3)
    with pytest.raises(sqlite3.OperationalError, match="boom"):
        SQLiteVerdictStore(path)
    # The failed migration rolled back; the one before it stays applied and recorded.
    assert applied == [2, 3] and _user_version(path) == 2
    conn = sqlite3.connect(str(path))
    cols = [row[1] for row in conn.execute("PRAGMA table_info(verdicts)")]
    conn.close()
    assert cols == ["key", "verdict", "created", "note"]
