"""A persistent verdict cache in SQLite (WAL mode), shared by every dataset and run.

Keys come from :func:`judge.judging.verdict_cache_key` (backend, model, the parameters that
change the output, template hash, query and passage), so scoring system B after system A
only judges the passages A did not retrieve, and re-running a dataset makes no LLM call.

Concurrency model: one connection guarded by a lock, called directly from the event loop.
A primary-key read takes ~4 us and a committed ``INSERT OR REPLACE`` ~50 us in WAL mode
with ``synchronous=NORMAL`` (measured on this project's CI machine), far less than a hop
to a worker thread and back (~250 us under load, plus GIL hand-offs that stall the loop),
so a thread would cost the event loop more than it saves. The lock makes the store safe
to share between threads (e.g. sync wrappers). Several *processes* may share a file: WAL
lets readers and the single writer proceed together, and ``busy_timeout`` waits out another
writer's lock. Each ``put`` is its own committed transaction; with WAL and
``synchronous=NORMAL`` a committed verdict survives the process being killed (kill -9);
only an OS crash can lose the last few.

Schema versions: the file's ``PRAGMA user_version`` is the number of :data:`MIGRATIONS`
applied to it. Opening a file runs the missing ones in order, each in its own transaction
that also bumps ``user_version`` (so a crash leaves the file at a whole version), then
checks the result. A file from a newer ``judge`` (a version this code does not know) is
refused with :class:`CacheVersionError` rather than written with an older schema. Version
0 is both a new, empty file and a cache written before versions existed (``verdicts``
table only): migration 1 creates the table if missing, so both reach version 1 with their
rows intact. To change the schema, append a function to :data:`MIGRATIONS`; never edit
one that has shipped.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from judge.io import InputError
from judge.judging import PassageVerdict
from judge.store._sqlite import SQLiteHolder, run_migrations


class CacheVersionError(InputError):
    """The cache file's schema is newer than this version of ``judge`` knows (names the
    file; the CLI reports it like any bad input, exit 2, before any call)."""


def _m001_verdicts(conn: sqlite3.Connection) -> None:
    """The verdicts table (the layout of every cache written before schema versions)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS verdicts "
        "(key TEXT PRIMARY KEY, verdict TEXT NOT NULL, created REAL NOT NULL)"
    )


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_m001_verdicts,)
"""Schema migrations in order; after migration ``i`` (1-based) ``user_version`` is ``i``."""

SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: str | Path = "") -> int:
    """Bring ``conn``'s schema to :data:`SCHEMA_VERSION`; returns the version found.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Each migration runs in
    a ``BEGIN IMMEDIATE`` transaction (one writer at a time; another process migrating
    the same file waits, then finds the work done)."""
    return run_migrations(conn, MIGRATIONS, newer=partial(_newer_cache, path))


def _newer_cache(path: str | Path, found: int, known: int) -> CacheVersionError:
    return CacheVersionError(
        f"verdict cache schema version {found} is newer than this judge supports "
        f"({known}); upgrade judge or use another --cache file",
        path=path,
        field="user_version",
    )


def judge_home() -> Path:
    """``$JUDGE_HOME``, or ``~/.cache/judge`` when unset."""
    env = os.environ.get("JUDGE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "judge"


def default_cache_path() -> Path:
    """Where the verdict cache lives unless ``--cache PATH`` says otherwise."""
    return judge_home() / "cache.sqlite"


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    puts: int = 0


class SQLiteVerdictStore(SQLiteHolder):
    """A :class:`judge.judging.VerdictStore` backed by one SQLite file.

    Use as ``async with SQLiteVerdictStore(path) as store: ...`` or call :meth:`aclose`.
    Only judged verdicts should be stored (``judge_passage`` does so); an unjudged verdict
    passed to :meth:`put` is ignored so that a failure is never cached, and so is a verdict
    decided by a person (``source="human"``).
    """

    def __init__(self, path: str | Path | None = None) -> None:
        file = Path(path) if path is not None else default_cache_path()
        super().__init__(file, what="verdict cache", migrate=partial(migrate, path=file))
        self.stats = CacheStats()

    def get_sync(self, key: str) -> PassageVerdict | None:
        with self._lock:
            row = self._connection().execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.stats.misses += 1
            return None
        try:
            verdict = PassageVerdict.model_validate_json(row[0])
        except ValueError:
            # A row written by an incompatible version: a miss; the next put overwrites it.
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        return verdict

    def put_sync(self, key: str, verdict: PassageVerdict) -> None:
        if not verdict.judged or verdict.source != "judge":
            return  # failures and human labels are never cached as the judge's verdict
        # the review fields stay out of the row, so the rows are those earlier versions wrote
        payload = verdict.model_dump_json(exclude={"source", "reviewer", "replaced"})
        with self._lock:
            self._connection().execute(
                "INSERT OR REPLACE INTO verdicts (key, verdict, created) VALUES (?, ?, ?)",
                (key, payload, time.time()),
            )
        self.stats.puts += 1

    def put_many_sync(self, items: Sequence[tuple[str, PassageVerdict]]) -> None:
        """:meth:`put_sync` for several verdicts, in one transaction (unjudged ones skipped)."""
        rows = [(key, v.model_dump_json(), time.time()) for key, v in items if v.judged]
        if not rows:
            return
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO verdicts (key, verdict, created) VALUES (?, ?, ?)", rows
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        self.stats.puts += len(rows)

    def count_sync(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    # --- the async VerdictStore protocol --------------------------------------------------
    async def get(self, key: str) -> PassageVerdict | None:
        return self.get_sync(key)

    async def put(self, key: str, verdict: PassageVerdict) -> None:
        self.put_sync(key, verdict)

    async def put_many(self, items: Sequence[tuple[str, PassageVerdict]]) -> None:
        self.put_many_sync(items)

    async def count(self) -> int:
        """Number of verdicts stored."""
        return self.count_sync()

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> SQLiteVerdictStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
