"""One writer per output: an exclusive ``flock`` on a lock file beside what is written.

The holder writes its pid, host and start time into the lock file, so a second writer is
refused with a message naming who holds it (:class:`OutputBusy`, an :class:`InputError`:
exit 2 on the command line, before any work). The kernel drops the lock when its holder
dies, even by ``kill -9``: the next run takes it over. The lock file stays (removing it
would let two processes lock two different files); it must live on a local filesystem,
where ``flock`` is reliable. ``judge score`` and ``judge search`` lock their output file,
``judge index build`` its index folder (the BM25 build and the dense vectors alike),
``judge experiment`` its folder, ``judge serve`` its job database.

An output is locked by what it is, not by how it is named: the lock file is named from the
output's resolved path (:func:`output_lock_path`: symlinks followed, ``./x`` and ``d/../x``
made one absolute path), and an output file that exists is locked itself too (its inode:
two names of one file by a hard link share it, and ``flock`` on either refuses the other).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import stat
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from judge.io._errors import InputError


def holder_text(holder: dict[str, Any]) -> str:
    """``pid 4242 on host h, since 2026-11-27 10:00:00 UTC`` from a holder record (a holder
    known only by the file it locks: ``a process writing it under another name``)."""
    if not holder:
        return "a process writing it under another name (a hard link to the same file)"
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
    file in this one) holds it. With ``target``, a regular file that exists when the lock is
    taken is locked as well (``flock`` on the file itself: whatever name reaches it)."""

    def __init__(self, lock_path: str | Path, target: str | Path | None = None) -> None:
        self.path = Path(lock_path)
        self.target = Path(target) if target is not None else None
        self._fd: int | None = None
        self._target_fd: int | None = None

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
        try:
            self._target_fd = _lock_file_itself(self.target)
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": round(time.time(), 3)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        self._fd = fd

    def release(self) -> None:
        target_fd, self._target_fd = self._target_fd, None
        if target_fd is not None:
            os.close(target_fd)  # closing the last descriptor of the open file drops its flock
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


def _lock_file_itself(target: Path | None) -> int | None:
    """An exclusive ``flock`` on ``target`` itself when it is an existing regular file (its
    descriptor, to close on release), else None; :class:`LockBusy` (holder unknown: the
    other writer named it otherwise) when another open of that file holds it."""
    if target is None:
        return None
    try:
        fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None  # not there yet (or unreadable): only the lock by its resolved name
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LockBusy(target, {}) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def output_lock_path(target: str | Path) -> Path:
    """The lock file of an output: ``.NAME.lock`` beside the path ``target`` resolves to
    (symlinks followed, relative, ``./`` and ``..`` parts made one absolute path), so two
    writers naming one output two ways take one lock."""
    resolved = Path(target).resolve()
    return resolved.with_name(f".{resolved.name}.lock")


def lock_output(
    target: Path, lock_path: Path | None = None, *, command: str, field: str | None
) -> WriterLock:
    """The lock of an output (``target``: the file or folder written; ``lock_path``: by
    default :func:`output_lock_path`), taken: an :class:`OutputBusy` naming the holder when
    another process writes it, under this name or another (a symlink, a hard link)."""
    where = lock_path if lock_path is not None else output_lock_path(target)
    lock = WriterLock(where, Path(target).resolve())
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
