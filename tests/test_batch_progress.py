"""Progress reporting: plain lines when not a terminal, nothing when quiet."""

from __future__ import annotations

import io

import pytest

from judge.batch._progress import (
    BarProgress,
    PlainProgress,
    QuietProgress,
    Snapshot,
    format_duration,
    format_line,
    make_progress,
)


def _snap(**kw: float) -> Snapshot:
    base = {
        "queries_done": 30,
        "queries_total": 100,
        "queries_this_run": 20,
        "passages_this_run": 120,
        "retries": 3,
        "rate_limited": 1,
        "unjudged": 2,
        "rejected": 1,
        "elapsed_s": 10.0,
    }
    base.update(kw)
    return Snapshot(**{k: (int(v) if k != "elapsed_s" else float(v)) for k, v in base.items()})  # type: ignore[arg-type]


def test_rates_and_eta_count_only_this_runs_work() -> None:
    s = _snap()
    assert s.qps == 2.0 and s.pps == 12.0
    assert s.eta_s == 35.0  # 70 left at 2 queries/s
    assert _snap(queries_this_run=0).eta_s is None
    assert _snap(queries_done=100).eta_s == 0.0
    assert _snap(elapsed_s=0).qps == 0.0


def test_plain_line_has_every_counter() -> None:
    line = format_line(_snap())
    assert line == (
        "judge score: 30/100 queries (30%), 2.00 queries/s, 12.0 passages/s, ETA 35s, "
        "retries 3, rate-limited 1, unjudged 2, rejected 1"
    )


@pytest.mark.parametrize(("secs", "text"), [(None, "?"), (5.4, "5s"), (65, "1m05s"), (3725, "1h02m05s")])
def test_format_duration(secs: float | None, text: str) -> None:
    assert format_duration(secs) == text


def test_plain_progress_prints_periodically_and_at_the_end() -> None:
    out = io.StringIO()
    p = PlainProgress(out, interval_s=3600.0)
    p.start(100, 30)
    p.update(_snap())  # within the interval: silent
    p.stop(_snap(queries_done=100))
    lines = out.getvalue().splitlines()
    assert lines[0] == "judge score: resuming, 30/100 queries already in the output"
    assert lines[1].startswith("judge score: 100/100 queries (100%)")
    assert len(lines) == 2
    eager = io.StringIO()
    q = PlainProgress(eager, interval_s=0.0)
    q.start(100, 0)
    q.update(_snap())
    assert eager.getvalue().count("\n") == 1


def test_mode_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(make_progress("quiet"), QuietProgress)
    assert isinstance(make_progress("plain"), PlainProgress)
    assert isinstance(make_progress("bar"), BarProgress)
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a TTY
    assert isinstance(make_progress("auto"), PlainProgress)


def test_plain_progress_stays_quiet_while_nothing_moves() -> None:
    out = io.StringIO()
    p = PlainProgress(out, interval_s=0.0, heartbeat_s=3600.0)
    p.start(100, 0)
    p.update(_snap())
    p.update(_snap())  # no query finished since: no new line
    p.update(_snap(queries_done=31))
    assert out.getvalue().count("\n") == 2
