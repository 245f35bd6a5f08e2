"""Human labels on the command line, end to end against the simulated server: ``judge
labels`` export/import/list/conflicts, ``judge score --labels``, ``compare-systems --labels``,
``judge calibrate`` and ``--calibration``; figures derived by hand."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_sim

from judge.cli import main
from judge.store import Label, LabelStore

sim_mod = load_sim()


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with sim_mod.SimProcess(None, latency_ms=5, jitter_ms=2, capacity=1000) as s:
        yield s


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)


def _dataset(path: Path) -> Path:
    # The sim says yes iff the marker grade >= 2: q0 -> [no, yes, yes], q1 -> [yes, no, no]
    rows = [
        {
            "id": "q0",
            "query": "问题 0",
            "retrieval_context": [
                {"id": "a", "text": "甲 <rel=0>"},
                {"id": "b", "text": "乙 <rel=2>"},
                {"id": "c", "text": "丙 <rel=3>"},
            ],
        },
        {
            "id": "q1",
            "query": "问题 1",
            "retrieval_context": [
                {"id": "d", "text": "丁 <rel=3>"},
                {"id": "e", "text": "戊 <rel=1>"},
                {"id": "f", "text": "己 <rel=0>"},
            ],
        },
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _score(sim: Any, *args: str) -> list[str]:
    return ["score", *args, "--backend", "openai:simulated-judge", "--base-url", sim.base_url, "--quiet"]


def _requests(sim: Any) -> int:
    return int(sim.stats()["total"])


def test_score_with_a_qrels_labels_file_overrides_records_and_summary(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _dataset(tmp_path / "d.jsonl")
    labels = tmp_path / "l.qrels"
    labels.write_text("q0 0 a 1\nq1 0 d 0\nq7 0 z 1\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    assert (
        main(_score(sim, str(inp), "-o", str(out), "--labels", str(labels), "--labels-reviewer", "nist")) == 0
    )
    summary = json.loads(capsys.readouterr().out)
    # q0 [yes(h), yes, yes] -> AP 1; q1 [no(h), no, no] -> AP 0; judge alone: 0.583333 and 1
    assert summary["judge"]["map"] == 0.5
    assert summary["human_labels"]["passages"] == 2 and summary["human_labels"]["changed"] == 2
    assert summary["labels"]["applied"] == 2 and summary["labels"]["unmatched"] == 1
    records = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    a = records["q0"]["verdicts"][0]
    assert (a["verdict"], a["source"], a["reviewer"], a["replaced"]["verdict"]) == (
        "yes",
        "human",
        "nist",
        "no",
    )
    saved = json.loads((tmp_path / "o.summary.json").read_text(encoding="utf-8"))
    assert saved["human_labels"] == summary["human_labels"]
    # Without labels, the same output file goes back to the judge's verdicts (cache: no call).
    before = _requests(sim)
    assert main(_score(sim, str(inp), "-o", str(tmp_path / "plain.jsonl"))) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["judge"]["map"] == pytest.approx(((1 / 2 + 2 / 3) / 2 + 1.0) / 2, abs=1e-6)
    assert "human_labels" not in plain and _requests(sim) == before


def test_graded_labels_on_a_binary_run_without_a_level_exit_2_before_any_call(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _dataset(tmp_path / "d.jsonl")
    labels = tmp_path / "g.qrels"
    labels.write_text("q0 0 a 3\nq0 0 b 0\n", encoding="utf-8")
    before = _requests(sim)
    assert main(_score(sim, str(inp), "--labels", str(labels))) == 2
    err = capsys.readouterr().err
    assert "graded" in err and "binary" in err and "--labels-level" in err
    assert _requests(sim) == before and not (tmp_path / "d.judged.jsonl").exists()
    assert main(_score(sim, str(inp), "--labels", str(labels), "--labels-level", "2")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["labels"]["mapping"]["graded"]["level"] == 2
    # q0 [yes(h: 3 >= 2), no(h: 0), yes] -> AP (1 + 2/3) / 2; q1 [yes, no, no] -> 1
    assert summary["judge"]["map"] == pytest.approx(((1 + 2 / 3) / 2 + 1) / 2, abs=1e-6)


def test_labels_import_export_round_trip_list_and_conflicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.qrels"
    src.write_text("q0 0 a 1\nq0 0 b 0\nq1 0 d 1\n", encoding="utf-8")
    assert main(["labels", "import", str(src), "--reviewer", "ann"]) == 0
    assert json.loads(capsys.readouterr().out)["imported"] == 3
    out = tmp_path / "out.qrels"
    assert main(["labels", "export", "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == src.read_text(encoding="utf-8")
    jl = tmp_path / "out.jsonl"
    assert main(["labels", "export", "--format", "jsonl", "-o", str(jl)]) == 0
    rows = [json.loads(x) for x in jl.read_text(encoding="utf-8").splitlines()]
    assert [(r["qid"], r["docno"], r["label"], r["reviewer"]) for r in rows] == [
        ("q0", "a", 1, "ann"),
        ("q0", "b", 0, "ann"),
        ("q1", "d", 1, "ann"),
    ]
    # The JSONL export imports into another store unchanged.
    other = tmp_path / "other.sqlite"
    assert main(["labels", "import", str(jl), "--store", str(other)]) == 0
    capsys.readouterr()
    assert main(["labels", "export", "--store", str(other), "-o", str(tmp_path / "again.qrels")]) == 0
    assert (tmp_path / "again.qrels").read_text() == src.read_text()
    # A second reviewer disagrees on q0 a.
    bob = tmp_path / "bob.qrels"
    bob.write_text("q0 0 a 0\n", encoding="utf-8")
    assert main(["labels", "import", str(bob), "--reviewer", "bob"]) == 0
    capsys.readouterr()
    assert main(["labels", "conflicts"]) == 0
    conflicts = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert conflicts == [
        {
            "qid": "q0",
            "docno": "a",
            "labels": {"ann": 1, "bob": 0},
            "scales": {"ann": "binary", "bob": "binary"},
        }
    ]
    assert main(["labels", "list", "--reviewer", "bob"]) == 0
    listed = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["qid"], x["docno"], x["label"]) for x in listed] == [("q0", "a", 0)]
    # A qrels import without a reviewer names the flag.
    assert main(["labels", "import", str(src)]) == 2
    assert "reviewer" in capsys.readouterr().err


def test_score_labels_from_the_store(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = _dataset(tmp_path / "d.jsonl")
    with LabelStore() as store:
        store.put(Label("q1", "e", 1, "ann", query="问题 1"))
        store.put(Label("q1", "f", 1, "ann", query="another data set's q1"))  # not this query
    assert main(_score(sim, str(inp), "--labels", "store")) == 0
    summary = json.loads(capsys.readouterr().out)
    # q1 [yes, yes(h), no] -> AP 1; q0 unchanged (1/2 + 2/3) / 2
    assert summary["human_labels"]["passages"] == 1
    assert summary["judge"]["map"] == pytest.approx(((1 / 2 + 2 / 3) / 2 + 1.0) / 2, abs=1e-6)


def _systems(tmp_path: Path) -> tuple[Path, Path]:
    one, four = [], []
    for i in range(2):
        q = f"q{i:02d}"
        rel = [{"id": f"{q}-r{j}", "text": f"查询 {i} 的相关段落 {j} <rel=3>"} for j in range(4)]
        irr = [{"id": f"{q}-n{j}", "text": f"查询 {i} 的无关段落 {j} <rel=0>"} for j in range(3)]
        one.append({"id": q, "query": f"问题 {i}", "retrieval_context": [rel[0], *irr]})
        four.append({"id": q, "query": f"问题 {i}", "retrieval_context": rel})
    a, b = tmp_path / "one.jsonl", tmp_path / "all4.jsonl"
    for path, rows in ((a, one), (b, four)):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return a, b


def test_compare_systems_pool_uses_labels_like_qrels(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _systems(tmp_path)
    labels = tmp_path / "l.qrels"
    # A reviewer says q00-n0 (judge: no) is relevant and q01-r3 (judge: yes) is not.
    labels.write_text("q00 0 q00-n0 1\nq01 0 q01-r3 0\n", encoding="utf-8")
    out = tmp_path / "r"
    before = _requests(sim)
    args = ["compare-systems", f"one={a}", f"all4={b}", "-o", str(out), "--backend", "openai:simulated-judge"]
    args += ["--base-url", sim.base_url, "--quiet", "--json", "--labels", str(labels)]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pool"]["human_labels"] == 2 and _requests(sim) - before <= 12  # 14 pairs, 2 labelled
    # q00 relevant: r0..r3 + n0 (5); q01: r0..r2 (3).
    # one = [r0, n0, n1, n2]: q00 AP (1 + 1) / 5 = 0.4; q01 AP 1/3 -> map 0.366667
    # all4 = [r0..r3]: q00 AP 4/5 = 0.8; q01 AP (1 + 1 + 1) / 3 = 1.0 -> map 0.9
    assert report["systems"]["one"]["measures"]["map"] == pytest.approx((0.4 + 1 / 3) / 2, abs=1e-4)
    assert report["systems"]["all4"]["measures"]["map"] == pytest.approx(0.9, abs=1e-4)
    qrels = (out / "pool.qrels").read_text(encoding="utf-8")
    assert "q00 0 q00-n0 1\n" in qrels and "q01 0 q01-r3 0\n" in qrels


def _judged_file(path: Path, n: int = 60) -> Path:
    """A judged output whose P(yes) are i/n and whose true relevance is P(yes) >= 0.7."""
    verdicts = [
        {
            "index": i,
            "passage_id": f"p{i}",
            "verdict": "yes" if i / n >= 0.575 else "no",
            "p_yes": i / n,
            "template_id": "binary.zh.v2",
            "template_hash": "x",
            "backend": "fake",
        }
        for i in range(n)
    ]
    record = {
        "id": "q0",
        "query": "q",
        "mode": "binary",
        "docnos": [f"p{i}" for i in range(n)],
        "verdicts": verdicts,
    }
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


def test_calibrate_stores_a_named_threshold_a_run_can_select(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judged = _judged_file(tmp_path / "j.jsonl")
    labels = tmp_path / "l.qrels"
    labels.write_text(
        "".join(f"q0 0 p{i} {1 if i / 60 >= 0.7 else 0}\n" for i in range(60)), encoding="utf-8"
    )
    shipped = (
        Path("prompts/calibration.toml").read_bytes() if Path("prompts/calibration.toml").exists() else None
    )
    args = ["calibrate", "--labels", str(labels), "--judged", str(judged), "--template", "binary.zh.v2"]
    assert main([*args, "--name", "team"]) == 0
    report = json.loads(capsys.readouterr().out)
    # negatives end at 41/60 = 0.6833, positives start at 42/60 = 0.7: midpoint 0.691667
    assert report["threshold"] == pytest.approx(0.691667) and report["previous_threshold"] == 0.575
    assert report["kappa_after"] > report["kappa_before"] and report["stored"]
    with LabelStore() as store:
        cal = store.calibration("team")
    assert cal is not None and cal.threshold == pytest.approx(0.691667)
    if shipped is not None:
        assert Path("prompts/calibration.toml").read_bytes() == shipped
    # Too few labels: refused, nothing stored.
    few = tmp_path / "few.qrels"
    few.write_text("".join(f"q0 0 p{i} {i % 2}\n" for i in range(20)), encoding="utf-8")
    assert (
        main(
            [
                "calibrate",
                "--labels",
                str(few),
                "--judged",
                str(judged),
                "--template",
                "binary.zh.v2",
                "--name",
                "x",
            ]
        )
        == 2
    )
    assert "at least 30" in capsys.readouterr().err
    # A run selects the calibration; another template's calibration is refused.
    inp = _dataset(tmp_path / "d.jsonl")
    assert main(_score(sim, str(inp), "--calibration", "nope")) == 2
    assert "no calibration named 'nope'" in capsys.readouterr().err
    assert main(_score(sim, str(inp), "--calibration", "team", "--template", "binary.en.v2")) == 2
    assert "is for template binary.zh.v2" in capsys.readouterr().err
    assert main(_score(sim, str(inp), "--calibration", "team", "-o", str(tmp_path / "cal.jsonl"))) == 0
    assert json.loads(capsys.readouterr().out)["config"]["calibration"] == "team"


def test_calibrated_threshold_sets_the_config(tmp_path: Path) -> None:
    from judge.cli._label_commands import calibrated_threshold
    from judge.judging import JudgeConfig, template_for
    from judge.store import Calibration

    config = JudgeConfig(probability=True, template="binary.zh.v2")
    tpl = template_for(config)
    with LabelStore() as store:
        store.save_calibration(Calibration("c", tpl.id, 0.66, tpl.hash))
    assert calibrated_threshold("c", config, None).p_yes_threshold == 0.66
    assert calibrated_threshold(None, config, None) is config
