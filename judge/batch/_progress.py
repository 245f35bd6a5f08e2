"""Progress reporting for batch scoring: a rich bar on a terminal, plain lines otherwise.

``make_progress("auto")`` picks the rich bar when stderr is a TTY and periodic plain lines
on stderr when it is not; ``"quiet"`` reports nothing. Every reporter has the same small
interface: ``start(total, done)``, ``update(snapshot)``, ``stop(snapshot)``.

The ETA is measured per passage (:class:`PassagePace`): the seconds per passage answered
since the judge's first answer, times the passages still to ask. It appears once a few
passages are answered, not after the first query (whose time also holds the judge's start:
loading a model, opening connections), which made the first ETA of the embedded judge three
times too long.
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
    passage still being judged is not done), so the rates are measured ones.
    ``passages_asked``/``passages_answered``: passages this run handed to the judge (cache
    misses) and those it has answered; ``passages_cached``: passages the verdict cache
    answered; ``queries_started``: queries this run has begun (committed or not),
    ``queries_in_flight`` of them not committed yet."""

    queries_done: int
    queries_total: int
    queries_this_run: int
    passages_this_run: int
    retries: int
    rate_limited: int
    unjudged: int
    rejected: int
    elapsed_s: float
    passages_asked: int = 0
    passages_answered: int = 0
    queries_started: int = 0
    queries_in_flight: int = 0
    passages_cached: int = 0

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
    def passages_judged(self) -> int:
        """Passages with a verdict this run: answered by the judge or by the cache."""
        return self.passages_answered + self.passages_cached

    def judged_text(self) -> str:
        """``"8 passages judged"``, with ``" (84 from the cache)"`` when the cache answered any."""
        cached = f" ({self.passages_cached} from the cache)" if self.passages_cached else ""
        return f"{self.passages_judged} passages judged{cached}"

    @property
    def finished(self) -> bool:
        return self.queries_done >= self.queries_total

    @property
    def passages_to_answer(self) -> float | None:
        """Passages still to be answered by the judge: those asked and not answered, plus
        the queries not begun yet at the passages asked per query begun so far (cache hits
        come at that share too). None before a query has begun."""
        if self.finished:
            return 0.0
        if self.queries_started <= 0:
            return None
        not_begun = max(0, self.queries_total - self.queries_done - self.queries_in_flight)
        per_query = self.passages_asked / self.queries_started
        return max(0, self.passages_asked - self.passages_answered) + not_begun * per_query


class PassagePace:
    """Seconds per passage, measured on the judge's answers as progress snapshots show them
    (their ``elapsed_s`` is the clock, so a test feeds snapshots and no time passes).

    The first snapshot with an answer starts the clock; answers seen within ``batch_s`` of
    it belong to the first batch (an embedded model answers 4 passages at once, after its
    reasons are decoded together) and are not counted. The pace is the time from then to
    the latest new answer, over the answers after the first batch; it is known once
    ``min_passages`` of them are in. The time before the first answer (loading a model,
    opening connections, the first batch itself) never enters it.
    """

    def __init__(self, *, min_passages: int = 3, batch_s: float = 1.0) -> None:
        self.min_passages = max(1, min_passages)
        self.batch_s = batch_s
        self._t0: float | None = None
        self._n0 = 0
        self._t_last = 0.0
        self._n_last = 0

    def observe(self, snap: Snapshot) -> None:
        n, t = snap.passages_answered, snap.elapsed_s
        if n <= 0:
            return
        if self._t0 is None:
            self._t0, self._n0, self._t_last, self._n_last = t, n, t, n
            return
        if t - self._t0 <= self.batch_s:
            self._n0 = max(self._n0, n)
        if n > self._n_last:
            self._t_last, self._n_last = t, n

    @property
    def seconds_per_passage(self) -> float | None:
        counted = self._n_last - self._n0
        if self._t0 is None or counted < self.min_passages or self._t_last <= self._t0:
            return None
        return (self._t_last - self._t0) / counted

    def eta_s(self, snap: Snapshot) -> float | None:
        """Seconds until the run ends: 0 when every query is done, None while the pace or
        the passages left are unknown."""
        if snap.finished:
            return 0.0
        pace, left = self.seconds_per_passage, snap.passages_to_answer
        if pace is None or left is None:
            return None
        return left * pace


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


def format_rates(snap: Snapshot, pace: PassagePace | None = None) -> str:
    """``"0.021 queries/s, 0.13 passages/s"``: queries per second once a query of this run has
    finished, passages per second from ``pace`` once it is measured (else from the finished
    queries' passages); ``"rate not measured yet"`` before either (a rate from passages
    merely started would be invented)."""
    parts = []
    if snap.measured:
        parts.append(f"{format_rate(snap.qps)} queries/s")
    per_passage = pace.seconds_per_passage if pace is not None else None
    if per_passage is not None:
        parts.append(f"{format_rate(1.0 / per_passage)} passages/s")
    elif snap.measured:
        parts.append(f"{format_rate(snap.pps)} passages/s")
    return ", ".join(parts) if parts else "rate not measured yet"


def format_line(snap: Snapshot, command: str = "judge score", pace: PassagePace | None = None) -> str:
    """The plain progress line, labelled with the command that runs (``judge score``,
    ``judge compare-systems``, ...); rates and ETA measured by ``pace`` (None: no ETA until
    the end)."""
    pct = 100.0 * snap.queries_done / snap.queries_total if snap.queries_total else 100.0
    eta = pace.eta_s(snap) if pace is not None else (0.0 if snap.finished else None)
    return (
        f"{command}: {snap.queries_done}/{snap.queries_total} queries ({pct:.0f}%), "
        f"{snap.judged_text()}, "
        f"{format_rates(snap, pace)}, ETA {format_duration(eta)}, "
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
    finished or a passage was answered since the last line, one as soon as the first ETA is
    known, at least one every ``heartbeat_s`` seconds, one at the end.
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
        self.pace = PassagePace()
        self._last = 0.0
        self._last_moved: tuple[int, int] = (-1, -1)
        self._eta_shown = False

    def start(self, total: int, done: int) -> None:
        self._last = time.monotonic()
        if done:
            print(f"{self.command}: resuming, {done}/{total} queries already in the output", file=self.stream)

    def update(self, snap: Snapshot) -> None:
        self.pace.observe(snap)
        now = time.monotonic()
        since = now - self._last
        moved = (snap.queries_done, snap.passages_judged) != self._last_moved
        first_eta = not self._eta_shown and self.pace.eta_s(snap) is not None
        if (moved and since >= self.interval_s) or since >= self.heartbeat_s or first_eta:
            self._last = now
            self._last_moved = (snap.queries_done, snap.passages_judged)
            self._eta_shown = self._eta_shown or first_eta
            print(format_line(snap, self.command, self.pace), file=self.stream, flush=True)

    def stop(self, snap: Snapshot) -> None:
        self.pace.observe(snap)
        print(format_line(snap, self.command, self.pace), file=self.stream, flush=True)


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
        )

        self.pace = PassagePace()

        self._progress = Progress(
            TextColumn(f"[bold]{escape(command)}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rates]}"),
            TimeElapsedColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            TextColumn("retries {task.fields[retries]} (429: {task.fields[rl]})"),
            TextColumn("unjudged {task.fields[unjudged]}"),
            console=Console(stderr=True),
            transient=False,
        )
        self._task = self._progress.add_task(
            "score", total=None, rates="rate not measured yet", eta="?", retries=0, rl=0, unjudged=0
        )

    def start(self, total: int, done: int) -> None:
        self._progress.update(self._task, total=total, completed=done)
        self._progress.start()

    def update(self, snap: Snapshot) -> None:
        self.pace.observe(snap)
        self._progress.update(
            self._task,
            completed=snap.queries_done,
            rates=f"{snap.judged_text()}, {format_rates(snap, self.pace)}",
            eta=format_duration(self.pace.eta_s(snap)),
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
