"""``judge compare-systems`` end to end against the simulated OpenAI-compatible server:
the issue's "done when" scenario, ``judge trec`` reproducing the report, the HTML page,
exit codes, and kill -9 / resume mid-pool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_sim

from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
sim_mod = load_sim()
MEASURES = ("map", "ndcg_cut_10", "P_5", "recall_10", "recip_rank")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Any]:
    with sim_mod.SimProcess(str(tmp_path / "requests.jsonl"), latency_ms=10, jitter_ms=5, capacity=1000) as s:
        yield s


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)


def _systems(tmp_path: Path, n_queries: int) -> tuple[Path, Path]:
    """``one`` finds 1 of 4 relevant passages per query (then 3 irrelevant), ``all4`` all 4.
    The simulated judge says yes iff the marker grade is >= 2."""
    one, four = [], []
    for i in range(n_queries):
        q = f"q{i:02d}"
        rel = [{"id": f"{q}-r{j}", "text": f"查询 {i} 的相关段落 {j} <rel=3>"} for j in range(4)]
        irr = [{"id": f"{q}-n{j}", "text": f"查询 {i} 的无关段落 {j} <rel=0>"} for j in range(3)]
        one.append({"id": q, "query": f"第 {i} 个问题：小狗贫血的表现", "retrieval_context": [rel[0], *irr]})
        four.append({"id": q, "query": f"第 {i} 个问题：小狗贫血的表现", "retrieval_context": rel})
    a, b = tmp_path / "one.jsonl", tmp_path / "all4.jsonl"
    for path, rows in ((a, one), (b, four)):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return a, b


def _cli(sim: Any, a: Path, b: Path, out: Path, *extra: str) -> list[str]:
    return [
        "compare-systems",
        f"one={a}",
        f"all4={b}",
        "-o",
        str(out),
        "--backend",
        "openai:simulated-judge",
        "--base-url",
        sim.base_url,
        "--quiet",
        "--json",
        *extra,
    ]


def _requests(sim: Any) -> int:
    return int(sim.stats()["total"])


def test_done_when_second_system_wins_means_match_judge_trec_one_call_per_pair(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 20
    a, b = _systems(tmp_path, n)
    out = tmp_path / "report"
    assert main(_cli(sim, a, b, out)) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["schema"] == "judge.systems/1"

    # Exactly one LLM call per unique (query, passage) pair: 4 relevant + 3 irrelevant.
    assert _requests(sim) == n * 7
    asked = Counter(e["key"] for e in sim.log_entries())
    assert len(asked) == n * 7 and set(asked.values()) == {1}
    assert report["pool"] == {
        "queries": n,
        "pairs": n * 8,
        "unique_pairs": n * 7,
        "human_labels": 0,
        "judged": n * 7,
        "unjudged": 0,
        "calls": n * 7,
        "calls_saved": n,
    }

    # The second system wins on map, on every query, with p < 0.01 (after Holm too).
    c = next(c for c in report["comparisons"] if c["measure"] == "map")
    assert (c["baseline"], c["system"]) == ("one", "all4")
    assert (c["baseline_mean"], c["system_mean"], c["diff"]) == (0.25, 1.0, 0.75)
    assert c["p_value"] < 0.01 and c["p_holm"] < 0.01 and c["t_test_p"] < 0.01
    assert (c["wins"], c["ties"], c["losses"]) == (n, 0, 0)
    assert set(report["comparisons"][0]) >= {
        "baseline", "system", "measure", "baseline_mean", "system_mean", "diff", "p_value", "p_holm",
        "t_test_p", "ci_low", "ci_high", "wins", "ties", "losses", "order_stability",
    }  # fmt: skip
    # Isolated AP cannot tell them apart.
    assert report["systems"]["one"]["measures"]["map_isolated"] == 1.0
    assert report["systems"]["all4"]["measures"]["map_isolated"] == 1.0

    # judge trec on the written files gives the report's means to the last digit.
    for name in ("one", "all4"):
        args = ["trec", "--json", *(x for m in MEASURES for x in ("-m", m))]
        assert main([*args, str(out / "pool.qrels"), str(out / "runs" / f"{name}.run")]) == 0
        trec = json.loads(capsys.readouterr().out)["all"]
        measures = report["systems"][name]["measures"]
        assert {m: trec[m] for m in MEASURES} == {m: measures[m] for m in MEASURES}
        assert report["systems"][name]["queries"] == n

    # A re-run makes no call and writes the same report.
    before = _requests(sim)
    assert main(_cli(sim, a, b, out)) == 0
    rerun = json.loads(capsys.readouterr().out)
    assert _requests(sim) == before
    assert rerun["pool"]["calls"] == 0
    assert rerun["systems"] == report["systems"] and rerun["comparisons"] == report["comparisons"]


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: Counter[str] = Counter()
        self.attrs: list[tuple[str, str, str | None]] = []
        self.ids: dict[str, int] = {}
        self.stack: list[str] = []
        self.in_queries = 0
        self.query_blocks = 0
        self.text_in_queries: list[str] = []
        self.charset: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        d = dict(attrs)
        for k, v in attrs:
            self.attrs.append((tag, k, v))
        if tag == "meta" and d.get("charset"):
            self.charset = d["charset"]
        if d.get("id"):
            self.ids[str(d["id"])] = self.tags[tag]
        if d.get("id") == "queries":
            self.in_queries = 1
        elif self.in_queries and tag == "div" and d.get("class") == "query":
            self.query_blocks += 1

    def handle_data(self, data: str) -> None:
        if self.in_queries:
            self.text_in_queries.append(data)


def test_html_is_self_contained_and_holds_the_per_query_section(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _systems(tmp_path, 8)
    out = tmp_path / "report"
    assert main(_cli(sim, a, b, out)) == 0
    capsys.readouterr()
    html = (out / "report.html").read_text(encoding="utf-8")
    page = _Page()
    page.feed(html)
    page.close()
    assert page.charset == "utf-8"
    assert page.tags["script"] == 0 and page.tags["link"] == 0 and page.tags["img"] == 0
    # Nothing fetched at view time: no src/href; the only URL is SVG's namespace.
    assert not [a for a in page.attrs if a[1] in ("src", "href")]
    assert {v for _, k, v in page.attrs if v and "://" in v} == {"http://www.w3.org/2000/svg"}
    assert page.tags["svg"] >= 2  # the means chart and the per-query difference plot
    for section in ("summary", "pool", "systems", "means", "comparisons", "per-query", "queries"):
        assert section in page.ids
    assert page.query_blocks == 8  # every query differs (AP 0.25 vs 1.0)
    text = "".join(page.text_in_queries)
    assert "第 0 个问题：小狗贫血的表现" in text and "查询 0 的相关段落 0" in text
    assert "yes" in text and "no" in text  # verdict badges
    md = (out / "report.md").read_text(encoding="utf-8")
    # 8 queries all won: randomization p ~ 2/2^8, Holm over 5 comparisons still < 0.05.
    assert "all4 is better than one on map (Holm-adjusted over 5 comparisons p=" in md
    assert "diff +0.7500; randomization test p=" in md and "wins 8, ties 0, losses 0" in md


def test_exit_codes_strict_and_missing_file(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _systems(tmp_path, 3)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(b.read_text(encoding="utf-8") + '{"id": "x", "query": "问题"}\n', encoding="utf-8")
    before = _requests(sim)
    assert main(_cli(sim, a, bad, tmp_path / "r", "--strict")) == 2
    err = capsys.readouterr().err
    assert f"{bad}:4: field 'retrieval_context': missing" in err and "--strict" in err
    assert _requests(sim) == before
    assert main(_cli(sim, a, tmp_path / "missing.jsonl", tmp_path / "r")) == 2
    assert str(tmp_path / "missing.jsonl") in capsys.readouterr().err
    assert main(["compare-systems", f"one={a}", "-o", str(tmp_path / "r"), "--backend", "openai:x"]) == 2
    assert main(["compare-systems", "nonsense", f"b={b}", "-o", str(tmp_path / "r")]) == 2
    assert _requests(sim) == before


# ---------------------------------------------------------------------------- kill -9
CONCURRENCY = 6


def _log_len(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_kill_9_mid_pool_then_rerun_loses_nothing_and_asks_nothing_twice(tmp_path: Path, sim: Any) -> None:
    n = 30
    a, b = _systems(tmp_path, n)
    out = tmp_path / "report"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [
        sys.executable,
        "-m",
        "judge",
        "compare-systems",
        f"one={a}",
        f"all4={b}",
        "-o",
        str(out),
        "--backend",
        "openai:simulated-judge",
        "--base-url",
        sim.base_url,
        "--cache",
        str(tmp_path / "cache.sqlite"),
        "--concurrency",
        str(CONCURRENCY),
        "--quiet",
        "--json",
    ]
    log = Path(sim.log_path)
    marks = []
    for point in (15, 90):
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while _log_len(log) < point:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "kill point not reached"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
        time.sleep(0.1)
        marks.append(_log_len(log))
        assert not (out / "report.json").exists()
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    records = [json.loads(x) for x in (out / "pool.judged.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(r["id"] for r in records) == [f"q{i:02d}" for i in range(n)]  # none lost, none twice
    assert report["pool"]["judged"] == n * 7 and report["pool"]["unjudged"] == 0
    entries = sim.log_entries()
    asked = Counter(e["key"] for e in entries if e["outcome"] != "429")
    assert len(asked) == n * 7
    first: dict[str, int] = {}
    for pos, e in enumerate(entries):
        first.setdefault(e["key"], pos)
    for key, count in asked.items():
        if count > 1:  # only a request in flight at a kill is asked again
            assert count == 2
            assert any(m - 2 * CONCURRENCY <= first[key] < m for m in marks), (first[key], marks)
    c = next(c for c in report["comparisons"] if c["measure"] == "map")
    assert (c["wins"], c["system_mean"], c["baseline_mean"]) == (n, 1.0, 0.25)


def test_depth_and_qrels_flags(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _systems(tmp_path, 3)
    human = tmp_path / "human.qrels"
    # Humans label q00's first relevant passage and one irrelevant one: two holes fewer.
    human.write_text("q00 0 q00-r0 3\nq00 0 q00-n0 0\n", encoding="utf-8")
    before = _requests(sim)
    out = tmp_path / "r"
    assert main(_cli(sim, a, b, out, "--depth", "2", "--qrels", str(human), "--mode", "graded")) == 0
    report = json.loads(capsys.readouterr().out)
    # Top 2 of each: one = [r0, n0], all4 = [r0, r1] -> 3 unique per query; 2 labelled in q00.
    assert report["pool"]["unique_pairs"] == 9 and report["pool"]["human_labels"] == 2
    assert report["pool"]["calls"] == _requests(sim) - before == 7
    assert report["conventions"]["depth"] == 2 and report["conventions"]["relevance_level"] == 2
    assert "q00 0 q00-r0 3\n" in (out / "pool.qrels").read_text(encoding="utf-8")


def test_progress_lines_are_labelled_compare_systems(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _systems(tmp_path, 2)
    args = [x for x in _cli(sim, a, b, tmp_path / "report") if x != "--quiet"]
    assert main(args) == 0
    err = capsys.readouterr().err  # not a TTY: plain progress lines
    progress = [line for line in err.splitlines() if " queries (" in line]
    assert progress and all(line.startswith("judge compare-systems: ") for line in progress), err
    assert "judge score" not in err
