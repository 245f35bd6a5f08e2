"""Progress reporting: plain lines when not a terminal, nothing when quiet."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path

import pytest

from judge.backends import ChatRequest, Completion, RuleBackend
from judge.batch import BatchOptions, score_dataset
from judge.batch._progress import (
    BarProgress,
    PlainProgress,
    QuietProgress,
    Snapshot,
    format_duration,
    format_line,
    format_rate,
    make_progress,
)
from judge.judging import JudgeConfig


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
        "judge score: 30/100 queries (30%), 2.0 queries/s, 12 passages/s, ETA 35s, "
        "retries 3, rate-limited 1, unjudged 2, rejected 1"
    )


@pytest.mark.parametrize(
    ("rate", "text"),
    [
        (0.1333, "0.13"),  # the embedded model's rate: not rounded to 0.1
        (0.0214, "0.021"),
        (0.004249, "0.0042"),
        (1.0, "1.0"),
        (2.0, "2.0"),
        (9.96, "10"),
        (12.0, "12"),
        (153.4, "153"),
        (0.0, "0"),
    ],
)
def test_rates_have_two_significant_figures(rate: float, text: str) -> None:
    assert format_rate(rate) == text


def test_a_slow_run_shows_its_passage_rate() -> None:
    # 4 passages in 30 s: 0.13 passages/s (one decimal would say 0.1)
    line = format_line(_snap(queries_this_run=1, passages_this_run=4, elapsed_s=30))
    assert "0.033 queries/s, 0.13 passages/s" in line


def test_progress_lines_carry_the_command_that_runs() -> None:
    out = io.StringIO()
    p = PlainProgress(out, interval_s=0.0, command="judge compare-systems")
    p.start(100, 30)
    p.stop(_snap())
    lines = out.getvalue().splitlines()
    assert lines[0] == "judge compare-systems: resuming, 30/100 queries already in the output"
    assert lines[1].startswith("judge compare-systems: 30/100 queries (30%)")
    assert not any("judge score" in line for line in lines)
    assert format_line(_snap(), "judge experiment").startswith("judge experiment: 30/100")
    plain = make_progress("plain", command="judge compare-systems")
    assert isinstance(plain, PlainProgress) and plain.command == "judge compare-systems"


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


def test_no_rate_before_a_query_of_this_run_has_finished() -> None:
    line = format_line(_snap(queries_done=30, queries_this_run=0, passages_this_run=0))
    assert "rate not measured yet" in line
    assert "passages/s" not in line and "queries/s" not in line
    assert "ETA ?" in line
    assert not _snap(queries_this_run=0).measured
    assert _snap().measured


async def test_first_line_of_a_run_shows_no_rate_while_passages_are_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Passages started but no query finished: the first line must not invent a rate (it
    used to divide the started passages by the first seconds: "3.8 passages/s")."""
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    inp = tmp_path / "d.jsonl"
    rows = [{"id": f"q{i}", "query": "q", "retrieval_context": ["p RELEVANT", "p"]} for i in range(2)]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    keyword = RuleBackend.keyword()
    seen_before_first_reply: list[str] = []

    class Held(RuleBackend):
        async def complete(self, request: ChatRequest) -> Completion:
            if not seen_before_first_reply:
                for _ in range(400):  # the runner's ticker prints every 0.5 s; bounded wait
                    if err.getvalue():
                        break
                    await asyncio.sleep(0.05)
                seen_before_first_reply.append(err.getvalue())
            return await super().complete(request)

    opts = BatchOptions(progress="plain", progress_interval_s=0.0, concurrency=1, fsync=False)
    await score_dataset(inp, tmp_path / "o.jsonl", Held(keyword.rule), JudgeConfig(), options=opts)
    first = seen_before_first_reply[0].splitlines()[0]
    assert first.startswith("judge score: 0/2 queries (0%), rate not measured yet, ETA ?")
    last = err.getvalue().splitlines()[-1]
    assert re.search(r"2/2 queries \(100%\), [0-9.]+ queries/s, [0-9.]+ passages/s", last)
