"""One writer per job database: an exclusive ``flock`` on a lock file beside it.

``judge serve`` takes the lock before it opens the database and keeps it for its whole
life, so a second server on the same ``--db`` is refused at start (its message names the
holder's pid and host, read from the record the holder wrote into the lock file) and no job
is ever run by two processes. The kernel drops the lock when its holder dies, even by
``kill -9``: the next start takes it over and resumes the jobs the dead server left
``running``. The lock file stays (removing it would let two processes lock two different
files); it must live on a local filesystem, where ``flock`` is reliable. The lock itself is
:class:`judge.io.WriterLock`, the one ``judge search`` and ``judge experiment`` take on their
outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge.io import LockBusy, WriterLock, holder_text


class DatabaseBusy(RuntimeError):
    """Another live process holds the job database."""

    def __init__(self, db_path: Path, holder: dict[str, Any]) -> None:
        self.db_path = db_path
        self.holder = holder
        super().__init__(
            f"the job database {db_path} is in use by another judge serve ({holder_text(holder)}); "
            "stop that server or start this one with another --db"
        )


def lock_path_for(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


class DatabaseLock(WriterLock):
    """The exclusive lock of one job database (``acquire`` is idempotent; ``release`` too)."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        super().__init__(lock_path_for(self.db_path))

    def acquire(self) -> None:
        """Take the lock and write the holder record, or raise :class:`DatabaseBusy`."""
        try:
            super().acquire()
        except LockBusy as busy:
            raise DatabaseBusy(self.db_path, busy.holder) from None


__all__ = ["DatabaseBusy", "DatabaseLock", "lock_path_for"]
