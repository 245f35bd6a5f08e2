"""Turns on this machine's CPUs for embedded models: one llama.cpp evaluation at a time,
across processes.

llama.cpp runs a call on as many threads as the process may use (:func:`default_threads`),
and its threads spin at every barrier: two judges on the same cores, each with every core,
run far below half their speed alone (0.02-0.04 passages/s each against 0.12 alone on 2
cores). :class:`MachineTurns` makes them take turns instead: every llama.cpp call (a
probability pass, a generation, a batch of reasons) holds an exclusive ``flock`` on
``$JUDGE_HOME/embedded-model.lock`` while it runs, so two judges each get about half the
machine (measured in docs/benchmarks.md, ``scripts/bench_local_share.py``). The lock is
advisory and per call (a few seconds), held by the kernel for the process: a killed judge
releases it at once. Without ``fcntl`` (Windows) or a writable ``$JUDGE_HOME`` there are no
turns (the judge runs as before).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from judge.backends._model_file import judge_home

try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "MachineTurns", "default_threads"]

LOCK_NAME = "embedded-model.lock"
logger = logging.getLogger("judge.backends.local")


def default_threads() -> int:
    """CPUs this process may run on: its affinity mask when the OS has one, else the
    machine's count."""
    if hasattr(os, "sched_getaffinity"):
        with contextlib.suppress(OSError):
            return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


class MachineTurns:
    """An exclusive, machine-wide turn for llama.cpp work (``with turns.turn(): ...``).

    ``path``: the lock file (default ``$JUDGE_HOME/embedded-model.lock``). One file
    descriptor per instance, opened on the first turn; turns of one instance must not nest.
    """

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._fd: int | None = None
        self._usable = _fcntl is not None
        self._open_lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path if self._path is not None else judge_home() / LOCK_NAME

    def _descriptor(self) -> int | None:
        with self._open_lock:
            if self._fd is None and self._usable:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                except OSError as exc:
                    self._usable = False
                    logger.info("no machine-wide turns for the embedded model (%s): %s", self.path, exc)
            return self._fd

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Wait for the machine's turn, hold it for the block."""
        fd = self._descriptor()
        if fd is None or _fcntl is None:
            yield
            return
        _fcntl.flock(fd, _fcntl.LOCK_EX)
        try:
            yield
        finally:
            _fcntl.flock(fd, _fcntl.LOCK_UN)

    def close(self) -> None:
        with self._open_lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
