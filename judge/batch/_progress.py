"""Progress reporting for batch scoring: a rich bar on a terminal, plain lines otherwise.

``make_progress("auto")`` picks the rich bar when stderr is a TTY and periodic plain lines
on stderr when it is not; ``"quiet"`` reports nothing. Every reporter has the same small
interface: ``start(total, done)``, ``update(snapshot)``, ``stop(snapshot)``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import IO, Literal, Protocol

ProgressMode = Literal["auto", "bar", "plain", "quiet"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Counters at one moment. ``queries_done`` includes queries finished by earlier runs;
    ``passages_this_run`` counts the passages of the queries this run has finished (a
    passage still being judged is not done), so the rates are measured ones."""

    queries_done: int
    queries_total: int
    queries_this_run: int
    passages_this_run: int
    retries: int
    rate_limited: int
    unjudged: int
    rejected: int
    elapsed_s: float

    @property
    def measured(self) -> bool:
        """Whether a rate has been measured yet: a query of this run has finished."""
        return self.queries_this_run > 0 and self.elapsed_s > 0

    @property
    def qps(self) -> float:
        return self.queries_this_run / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def pps(self) -> float:
        return self.passages_this_run / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        remaining = max(0, self.queries_total - self.queries_done)
        if remaining == 0:
            return 0.0
        return remaining / self.qps if self.qps > 0 else None


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def format_rate(value: float) -> str:
    """A rate to two significant figures (``0.13``, ``0.0042``, ``2.0``), whole from 10 up
    (``12``, ``153``): a slow run's rate is not rounded away to ``0.1``."""
    if value <= 0 or not math.isfinite(value):
        return "0"
    if value >= 10:
        return f"{value:.0f}"
    decimals = 1 - math.floor(math.log10(value))
    text = f"{value:.{decimals}f}"
    if float(text) >= 10:  # 9.96 rounds up to 10
        return "10"
    return text


def format_rates(snap: Snapshot) -> str:
    """``"0.021 queries/s, 0.13 passages/s"``, or ``"rate not measured yet"`` before the first
    query of this run has finished (a rate from passages merely started would be invented)."""
    if not snap.measured:
        return "rate not measured yet"
    return f"{format_rate(snap.qps)} queries/s, {format_rate(snap.pps)} passages/s"


def format_line(snap: Snapshot, command: str = "judge score") -> str:
    """The plain progress line, labelled with the command that runs (``judge score``,
    ``judge compare-systems``, ...)."""
    pct = 100.0 * snap.queries_done / snap.queries_total if snap.queries_total else 100.0
    return (
        f"{command}: {snap.queries_done}/{snap.queries_total} queries ({pct:.0f}%), "
        f"{format_rates(snap)}, ETA {format_duration(snap.eta_s)}, "
        f"retries {snap.retries}, rate-limited {snap.rate_limited}, unjudged {snap.unjudged}, "
        f"rejected {snap.rejected}"
    )


class ProgressReporter(Protocol):
    def start(self, total: int, done: int) -> None: ...

    def update(self, snap: Snapshot) -> None: ...

    def stop(self, snap: Snapshot) -> None: ...


class QuietProgress:
    def start(self, total: int, done: int) -> None:
        return None

    def update(self, snap: Snapshot) -> None:
        return None

    def stop(self, snap: Snapshot) -> None:
        return None


class PlainProgress:
    """Plain lines on ``stream``: at most one every ``interval_s`` seconds when a query has
    finished since the last line, at least one every ``heartbeat_s`` seconds, one at the end.
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        interval_s: float = 5.0,
        heartbeat_s: float = 60.0,
        command: str = "judge score",
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.command = command
        self.interval_s = interval_s
        self.heartbeat_s = max(heartbeat_s, interval_s)
        self._last = 0.0
        self._last_done = -1

    def start(self, total: int, done: int) -> None:
        self._last = time.monotonic()
        if done:
            print(f"{self.command}: resuming, {done}/{total} queries already in the output", file=self.stream)

    def update(self, snap: Snapshot) -> None:
        now = time.monotonic()
        since = now - self._last
        moved = snap.queries_done != self._last_done
        if (moved and since >= self.interval_s) or since >= self.heartbeat_s:
            self._last = now
            self._last_done = snap.queries_done
            print(format_line(snap, self.command), file=self.stream, flush=True)

    def stop(self, snap: Snapshot) -> None:
        print(format_line(snap, self.command), file=self.stream, flush=True)


class BarProgress:
    """A rich progress bar on stderr, labelled with the command that runs."""

    def __init__(self, command: str = "judge score") -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn(f"[bold]{escape(command)}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rates]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("retries {task.fields[retries]} (429: {task.fields[rl]})"),
            TextColumn("unjudged {task.fields[unjudged]}"),
            console=Console(stderr=True),
            transient=False,
        )
        self._task = self._progress.add_task(
            "score", total=None, rates="rate not measured yet", retries=0, rl=0, unjudged=0
        )

    def start(self, total: int, done: int) -> None:
        self._progress.update(self._task, total=total, completed=done)
        self._progress.start()

    def update(self, snap: Snapshot) -> None:
        self._progress.update(
            self._task,
            completed=snap.queries_done,
            rates=format_rates(snap),
            retries=snap.retries,
            rl=snap.rate_limited,
            unjudged=snap.unjudged,
        )

    def stop(self, snap: Snapshot) -> None:
        self.update(snap)
        self._progress.stop()


def make_progress(
    mode: ProgressMode = "auto", *, interval_s: float = 5.0, command: str = "judge score"
) -> ProgressReporter:
    """The reporter for ``mode``; its lines are labelled ``command`` (the command that runs)."""
    if mode == "quiet":
        return QuietProgress()
    if mode == "bar" or (mode == "auto" and sys.stderr.isatty()):
        return BarProgress(command)
    return PlainProgress(interval_s=interval_s, command=command)
