"""One writer per job database: an exclusive ``flock`` on a lock file beside it.

``judge serve`` takes the lock before it opens the database and keeps it for its whole
life, so a second server on the same ``--db`` is refused at start (its message names the
holder's pid and host, read from the record the holder wrote into the lock file) and no job
is ever run by two processes. The kernel drops the lock when its holder dies, even by
``kill -9``: the next start takes it over and resumes the jobs the dead server left
``running``. The lock file stays (removing it would let two processes lock two different
files); it must live on a local filesystem, where ``flock`` is reliable.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any


class DatabaseBusy(RuntimeError):
    """Another live process holds the job database."""

    def __init__(self, db_path: Path, holder: dict[str, Any]) -> None:
        self.db_path = db_path
        self.holder = holder
        pid = holder.get("pid", "?")
        host = holder.get("host", "?")
        since = holder.get("since")
        when = f", since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(since))}" if since else ""
        super().__init__(
            f"the job database {db_path} is in use by another judge serve (pid {pid} on host {host}{when}); "
            "stop that server or start this one with another --db"
        )


def lock_path_for(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


class DatabaseLock:
    """The exclusive lock of one job database (``acquire`` is idempotent; ``release`` too)."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        self.path = lock_path_for(self.db_path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock and write the holder record, or raise :class:`DatabaseBusy`."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise DatabaseBusy(self.db_path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": round(time.time(), 3)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no stale holder record for the next reader
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __del__(self) -> None:  # an app that was built but never served
        with contextlib.suppress(Exception):
            self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 4096, 0)
        record = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (OSError, ValueError):
        record = {}
    return record if isinstance(record, dict) else {}


__all__ = ["DatabaseBusy", "DatabaseLock", "lock_path_for"]
