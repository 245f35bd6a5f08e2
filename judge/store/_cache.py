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
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from judge.judging._models import PassageVerdict

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    key TEXT PRIMARY KEY,
    verdict TEXT NOT NULL,
    created REAL NOT NULL
)
"""


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


class SQLiteVerdictStore:
    """A :class:`judge.judging.VerdictStore` backed by one SQLite file.

    Use as ``async with SQLiteVerdictStore(path) as store: ...`` or call :meth:`aclose`.
    Only judged verdicts should be stored (``judge_passage`` does so); an unjudged verdict
    passed to :meth:`put` is ignored so that a failure is never cached.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute(_SCHEMA)
        except sqlite3.Error:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("verdict cache is closed")
        return self._conn

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
        if not verdict.judged:
            return
        payload = verdict.model_dump_json()
        with self._lock:
            self._connection().execute(
                "INSERT OR REPLACE INTO verdicts (key, verdict, created) VALUES (?, ?, ?)",
                (key, payload, time.time()),
            )
        self.stats.puts += 1

    def count_sync(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    # --- the async VerdictStore protocol --------------------------------------------------
    async def get(self, key: str) -> PassageVerdict | None:
        return self.get_sync(key)

    async def put(self, key: str, verdict: PassageVerdict) -> None:
        self.put_sync(key, verdict)

    async def count(self) -> int:
        """Number of verdicts stored."""
        return self.count_sync()

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> SQLiteVerdictStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
