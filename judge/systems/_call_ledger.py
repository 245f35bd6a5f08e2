"""The judge's calls over a whole experiment, kept in its output folder across resumes.

A run that is interrupted (Ctrl-C, exit 3, a kill) and run again resumes from the verdicts
it kept; the calls the LLM answered before the interruption are still calls of the
experiment. ``calls.json`` in the output folder lists every run's calls under the
experiment's key (its query set, configurations and pool depth: another query set or grid
in the same folder is another experiment, counted apart). This run's entry is rewritten
while it judges (whenever the count moved, at most every ``interval_s``) and when it ends,
however it ends; a ``kill -9`` can lose at most the calls of the last interval. A call is
a provider attempt (``BackendStats.calls``: retries count, a request still waiting for a
free slot does not).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from judge.store import atomic_write_text

CALLS_FILE = "calls.json"
CALLS_SCHEMA = "judge.experiment-calls/1"

__all__ = ["CALLS_FILE", "CallLedger", "backend_calls"]


def backend_calls(counted: Any) -> int:
    """Provider calls made so far by a backend (or executor) that keeps ``stats``; 0 without."""
    stats = getattr(counted, "stats", None)
    return int(getattr(stats, "calls", 0) or 0) if stats is not None else 0


class CallLedger:
    """``calls.json`` of an output folder: the runs so far and this run's running count.

    ``count``: the calls this run has made (read from the backend's stats). Use as an async
    context manager around the run's judging; :attr:`total` is every run's calls."""

    def __init__(
        self, folder: Path, count: Callable[[], int], *, key: str = "", interval_s: float = 0.1
    ) -> None:
        self.path = Path(folder) / CALLS_FILE
        self.key = key
        self._others: dict[str, Any] = {}
        self._count = count
        self._start = count()
        self._interval_s = interval_s
        self._runs = self._read()
        self._entry: dict[str, Any] = {
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "calls": 0,
            "finished": False,
        }
        self._written = -1
        self._finished = False
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        self.extra = 0  # calls counted elsewhere (a Ray engine's workers), added at the end

    def _read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        experiments = data.get("experiments") if isinstance(data, dict) else None
        if not isinstance(experiments, dict):
            return []
        self._others = {k: v for k, v in experiments.items() if k != self.key}
        mine = experiments.get(self.key)
        runs = mine.get("runs", []) if isinstance(mine, dict) else []
        return [r for r in runs if isinstance(r, dict) and isinstance(r.get("calls"), int)]

    @property
    def this_run(self) -> int:
        return max(0, self._count() - self._start) + self.extra

    @property
    def earlier(self) -> int:
        return sum(int(r["calls"]) for r in self._runs)

    @property
    def total(self) -> int:
        return self.earlier + self.this_run

    def write(self, *, finished: bool = False) -> None:
        """Rewrite ``calls.json`` if this run's count moved (always when ``finished``; after
        that, only the final write counts). Safe from a worker thread."""
        with self._lock:
            if self._finished and not finished:
                return
            calls = self.this_run
            if calls == self._written and not finished:
                return
            self._entry.update(calls=calls, finished=finished)
            mine = {"calls": self.earlier + calls, "runs": [*self._runs, self._entry]}
            body = {"schema": CALLS_SCHEMA, "experiments": {**self._others, self.key: mine}}
            atomic_write_text(self.path, json.dumps(body, indent=2) + "\n")  # fsync: off the loop
            self._written = calls
            self._finished = finished

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await asyncio.to_thread(self.write)

    async def __aenter__(self) -> CallLedger:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.write()
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.write(finished=exc[0] is None)
