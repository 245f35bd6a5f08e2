"""Persistence for judging: the SQLite verdict cache and resume helpers for batch output."""

from judge.store._cache import (
    SCHEMA_VERSION,
    CacheStats,
    CacheVersionError,
    SQLiteVerdictStore,
    default_cache_path,
    judge_home,
    migrate,
)
from judge.store._runstate import (
    OutputWriter,
    atomic_write_bytes,
    atomic_write_lines,
    atomic_write_text,
    iter_output,
    recover_output,
    scan_output,
)

__all__ = [
    "SCHEMA_VERSION",
    "CacheStats",
    "CacheVersionError",
    "OutputWriter",
    "SQLiteVerdictStore",
    "atomic_write_bytes",
    "atomic_write_lines",
    "atomic_write_text",
    "default_cache_path",
    "iter_output",
    "judge_home",
    "migrate",
    "recover_output",
    "scan_output",
]
