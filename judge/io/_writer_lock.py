"""One writer per output: an exclusive ``flock`` on a lock file beside what is written.

The holder writes its pid, host and start time into the lock file, so a second writer is
refused with a message naming who holds it (:class:`OutputBusy`, an :class:`InputError`:
exit 2 on the command line, before any work). The kernel drops the lock when its holder
dies, even by ``kill -9``: the next run takes it over. The lock file stays (removing it
would let two processes lock two different files); it must live on a local filesystem,
where ``flock`` is reliable. ``judge search`` locks its output file, ``judge experiment``
its folder, ``judge serve`` its job database.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from judge.io._errors import InputError


def holder_text(holder: dict[str, Any]) -> str:
    """``pid 4242 on host h, since 2026-11-27 10:00:00 UTC`` from a holder record."""
    since = holder.get("since")
    when = ""
    if isinstance(since, int | float):
        when = f", since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(since))}"
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}{when}"


class LockBusy(RuntimeError):
    """Another live process holds the lock; ``holder`` is its record (pid, host, since)."""

    def __init__(self, lock_path: Path, holder: dict[str, Any]) -> None:
        self.lock_path = lock_path
        self.holder = holder
        super().__init__(f"{lock_path} is held by {holder_text(holder)}")


class OutputBusy(InputError):
    """An output another judge process is writing (names the holder; exit 2)."""

    def __init__(self, target: Path, holder: dict[str, Any], *, command: str, field: str | None) -> None:
        self.holder = holder
        super().__init__(
            f"is being written by another {command} ({holder_text(holder)}): wait for it to "
            "finish or give another output",
            path=target,
            field=field,
        )


class WriterLock:
    """The exclusive lock of ``lock_path`` (``acquire`` and ``release`` are idempotent);
    ``acquire`` raises :class:`LockBusy` when another process (or another open of the same
    file in this one) holds it."""

    def __init__(self, lock_path: str | Path) -> None:
        self.path = Path(lock_path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LockBusy(self.path, holder) from None
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

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


def lock_output(target: Path, lock_path: Path, *, command: str, field: str | None) -> WriterLock:
    """The lock of an output (``target``: the file or folder written), taken: an
    :class:`OutputBusy` naming the holder when another process writes it."""
    lock = WriterLock(lock_path)
    try:
        lock.acquire()
    except LockBusy as busy:
        raise OutputBusy(target, busy.holder, command=command, field=field) from None
    except OSError as exc:
        raise InputError(f"cannot write here: {exc.strerror}", path=target, field=field) from None
    return lock


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 4096, 0)
        record = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (OSError, ValueError):
        record = {}
    return record if isinstance(record, dict) else {}
