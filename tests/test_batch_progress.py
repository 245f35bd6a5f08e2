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
    PassagePace,
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


def test_rates_count_only_this_runs_work() -> None:
    s = _snap()
    assert s.qps == 2.0 and s.pps == 12.0
    assert _snap(elapsed_s=0).qps == 0.0


def test_passages_left_are_those_in_flight_plus_the_queries_not_begun() -> None:
    # 30 of 100 queries done; 5 begun this run (2 of them committed... in flight 3); 30
    # passages asked for the 5 (6 a query), 20 answered: 10 in flight + 67 queries x 6.
    s = _snap(queries_started=5, queries_in_flight=3, passages_asked=30, passages_answered=20)
    assert s.passages_to_answer == 10 + 67 * 6
    assert _snap(queries_started=0).passages_to_answer is None  # nothing begun: no per-query count
    assert _snap(queries_done=100).passages_to_answer == 0.0
    # cache hits: 2 queries begun, 3 passages asked (the rest from the cache): 1.5 a query
    hits = _snap(queries_done=0, queries_total=4, queries_started=2, queries_in_flight=2, passages_asked=3)
    assert hits.passages_to_answer == 3 + 2 * 1.5


def _answers(t: float, n: int, **kw: float) -> Snapshot:
    """The README's first command: 14 queries of about 6 passages, 5 begun (30 asked)."""
    base: dict[str, float] = {
        "queries_done": 0,
        "queries_total": 14,
        "queries_this_run": 0,
        "passages_this_run": 0,
        "queries_started": 5,
        "queries_in_flight": 5,
        "passages_asked": 30,
    }
    base.update(kw)
    return _snap(elapsed_s=t, passages_answered=n, **base)


def test_the_eta_is_measured_per_passage_after_the_first_batch() -> None:
    """The embedded judge: 40 s before its first answers (the model loads, 4 probability
    passes, their reasons decoded together), then 4 answers every 28 s (7 s a passage).
    The first ETA comes with the second batch, 8 passages in, from 28 s over 4 passages;
    the 40 s of start-up are not in it (by queries, the first ETA needed the first query,
    40 + 28 s in: 68 s for 1 of 14, 13 x 68 = 884 s, where 76 x 7 = 532 s were left)."""
    pace = PassagePace()
    for t, n in [(0.5, 0), (20.0, 0), (40.0, 4), (40.5, 4), (60.0, 4)]:
        pace.observe(_answers(t, n))
        assert pace.seconds_per_passage is None and pace.eta_s(_answers(t, n)) is None
    second = _answers(68.0, 8)
    pace.observe(second)
    assert pace.seconds_per_passage == 7.0
    assert second.passages_to_answer == 22 + 9 * 6
    assert pace.eta_s(second) == 76 * 7.0
    third = _answers(96.0, 12, queries_done=1, queries_in_flight=5, queries_started=6, passages_asked=36)
    pace.observe(third)
    assert pace.seconds_per_passage == 7.0  # 56 s over 8 passages
    assert pace.eta_s(third) == (24 + 8 * 6) * 7.0
    assert pace.eta_s(_answers(200.0, 84, queries_done=14)) == 0.0


def test_a_batch_seen_over_two_ticks_is_still_one_batch() -> None:
    # the first batch's answers seen 2 then 4 within the second: 4 passages are the batch
    pace = PassagePace()
    for t, n in [(40.0, 2), (40.5, 4), (68.0, 8)]:
        pace.observe(_answers(t, n))
    assert pace.seconds_per_passage == 7.0
    # without the batch rule the pace would be 28 s over 6 passages: 4.7 s, a third too fast


def test_one_answer_at_a_time_gives_a_pace_after_four_answers() -> None:
    pace = PassagePace()
    pace.observe(_answers(10.0, 1))
    pace.observe(_answers(17.0, 2))
    pace.observe(_answers(24.0, 3))
    assert pace.seconds_per_passage is None  # 2 answers after the first: fewer than 3
    pace.observe(_answers(31.0, 4))
    assert pace.seconds_per_passage == 7.0
    pace.observe(_answers(35.0, 4))  # no new answer: the pace keeps the last answer's time
    assert pace.seconds_per_passage == 7.0


def test_a_run_that_finishes_has_an_eta_of_zero_even_unmeasured() -> None:
    pace = PassagePace()
    assert pace.eta_s(_answers(0.2, 0)) is None
    assert pace.eta_s(_answers(0.3, 84, queries_done=14)) == 0.0


def test_plain_line_has_every_counter() -> None:
    line = format_line(_snap(passages_answered=118))
    assert line == (
        "judge score: 30/100 queries (30%), 118 passages judged, 2.0 queries/s, 12 passages/s, "
        "ETA ?, retries 3, rate-limited 1, unjudged 2, rejected 1"
    )
    pace = PassagePace()
    for t, n in [(40.0, 4), (68.0, 8)]:
        pace.observe(_answers(t, n))
    line = format_line(_answers(68.0, 8), pace=pace)
    assert line.startswith("judge score: 0/14 queries (0%), 8 passages judged, 0.14 passages/s, ETA 8m52s, ")


def test_the_first_eta_is_printed_as_soon_as_it_is_known() -> None:
    out = io.StringIO()
    p = PlainProgress(out, interval_s=3600.0, heartbeat_s=3600.0)
    p.start(14, 0)
    p.update(_answers(40.0, 4))  # within the interval, no ETA yet: silent
    p.update(_answers(68.0, 8))  # the first ETA: printed at once
    p.update(_answers(96.0, 12))  # within the interval again: silent
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and "8 passages judged" in lines[0] and "ETA 8m52s" in lines[0]


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
    assert first.startswith("judge score: 0/2 queries (0%), 0 passages judged, rate not measured yet, ETA ?")
    last = err.getvalue().splitlines()[-1]
    assert re.search(r"2/2 queries \(100%\), 4 passages judged, [0-9.]+ queries/s, [0-9.]+ passages/s", last)


async def test_the_lines_count_the_passages_the_judge_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every passage asked and answered is counted (the pace's count); a second run from the
    verdict cache asks nothing and says the cache judged them."""
    from judge.store import SQLiteVerdictStore

    inp = tmp_path / "d.jsonl"
    rows = [
        {"id": f"q{i}", "query": "q", "retrieval_context": ["p RELEVANT", "p", f"p{i}"]} for i in range(3)
    ]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    backend = RuleBackend.keyword()
    opts = BatchOptions(progress="plain", progress_interval_s=0.0, fsync=False)
    lasts = []
    for run in range(2):
        err = io.StringIO()
        monkeypatch.setattr("sys.stderr", err)
        store = SQLiteVerdictStore(tmp_path / "cache.sqlite")
        try:
            await score_dataset(
                inp, tmp_path / f"o{run}.jsonl", backend, JudgeConfig(), store=store, options=opts
            )
        finally:
            await store.aclose()
        lasts.append(err.getvalue().splitlines()[-1])
    assert lasts[0].startswith("judge score: 3/3 queries (100%), 9 passages judged, ")
    assert lasts[1].startswith("judge score: 3/3 queries (100%), 9 passages judged (9 from the cache), ")
