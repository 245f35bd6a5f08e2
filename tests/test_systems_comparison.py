"""``judge.systems.ComparisonReport``: a comparison loaded from its report folder renders the
same report.json, report.md, report.html and differences as the run that wrote it. Fake
backends only."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _helpers import passage_of

from judge.backends import CallPolicy, ChatRequest, ScriptedBackend, make_backend
from judge.io import InputError
from judge.judging import JudgeConfig
from judge.systems import ComparisonReport, ReportFolder, SystemsOptions, run_comparison

REL = "[相关]"


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _prob_backend() -> ScriptedBackend:
    """P(yes) 0.9 for a passage marked relevant, else 0.2 (binary), or grades by the same mark."""

    def step(request: ChatRequest, _index: int) -> Any:
        p = 0.9 if REL in passage_of(request) else 0.2
        return {"yes": p, "no": 1.0 - p}

    return ScriptedBackend(step, name="fake:probs", supports_probabilities=True)


def _passages(qid: str, marks: str) -> list[dict[str, str]]:
    """One passage per character of ``marks``: ``r`` relevant, ``n`` not (ids qid-index-mark)."""
    return [
        {"id": f"{qid}-{i}{m}", "text": f"{qid} 第 {i} 段" + (f" {REL}" if m == "r" else "")}
        for i, m in enumerate(marks)
    ]


def _systems(tmp_path: Path) -> dict[str, Path]:
    ranks = {
        "base": {"q1": "rnrnn", "q2": "nnrr", "q3": "rrn", "q4": "nr"},
        "better": {"q1": "rrnnn", "q2": "rrnn", "q3": "rrn"},  # q4 missing: left out of the tests
        "worse": {"q1": "nnnrr", "q2": "nrnr", "q3": "nrr", "q4": "rn"},
    }
    paths = {}
    for name, queries in ranks.items():
        rows = [
            {"id": qid, "query": f"问题 {qid}", "retrieval_context": _passages(qid, marks)}
            for qid, marks in queries.items()
        ]
        paths[name] = _write(tmp_path / f"{name}.jsonl", rows)
    return paths


def _run(tmp_path: Path, config: JudgeConfig, options: SystemsOptions) -> ComparisonReport:
    backend = make_backend(_prob_backend(), policy=CallPolicy(max_retries=0))

    async def go() -> ComparisonReport:
        try:
            return await run_comparison(
                _systems(tmp_path), tmp_path / "report", backend, config, options=options
            )
        finally:
            await backend.aclose()

    return asyncio.run(go())


def _assert_round_trip(folder: Path, run: ComparisonReport, options: SystemsOptions, **kw: Any) -> None:
    loaded = ComparisonReport.load(folder, options, **kw)
    written = ReportFolder(folder)
    assert loaded.report == run.report
    assert loaded.json_text() == written.view("json") == run.json_text()
    assert loaded.markdown() == written.view("md") == run.markdown()
    assert loaded.html() == written.view("html") == run.html()
    assert loaded.differences() == run.differences()


def test_a_loaded_binary_comparison_renders_what_the_run_rendered(tmp_path: Path) -> None:
    # Human labels fill part of the pool, the pool is cut at depth 2 while the views show 3
    # passages a system (the third is unpooled), one system lacks a query, P(yes) decides.
    human = tmp_path / "human.qrels"
    human.write_text("q1 0 q1-1n 1\nq2 0 q2-0n 0\n", encoding="utf-8")
    options = SystemsOptions(depth=2, qrels=human, relevance_level=1, top_passages=3, resamples=500)
    run = _run(tmp_path, JudgeConfig(probability=True, explain=False), options)
    folder = tmp_path / "report"
    _assert_round_trip(folder, run, options)

    diffs = run.differences()
    assert diffs["measure"] == "map"
    assert [q["id"] for q in diffs["queries"]] != []
    assert "q4" not in [q["id"] for q in diffs["queries"]]  # not in every system
    shown = [p for q in diffs["queries"] for s in q["systems"] for p in s["passages"]]
    assert {p["source"] for p in shown} == {"human", "judge", "none"}
    assert all(len(s["passages"]) <= 3 for q in diffs["queries"] for s in q["systems"])
    judged = [p for p in shown if p["source"] == "judge"]
    assert {p["p_yes"] for p in judged} == {0.9, 0.2}
    # the zh template's threshold: every query is Chinese
    conv = run.report.conventions
    zh = conv["p_yes_thresholds"][conv["template_ids"]["zh"]]
    assert {p["p_yes_threshold"] for p in judged} == {zh}


def test_a_loaded_graded_comparison_renders_what_the_run_rendered(tmp_path: Path) -> None:
    options = SystemsOptions(measures=("ndcg_cut_10", "map"), resamples=300, stability_resamples=50)
    run = _run(tmp_path, JudgeConfig(mode="graded", explain=False), options)
    assert run.report.conventions["mode"] == "graded"
    _assert_round_trip(tmp_path / "report", run, options)


def test_the_systems_files_can_be_given_when_they_moved(tmp_path: Path) -> None:
    options = SystemsOptions(resamples=200, stability_resamples=0)
    run = _run(tmp_path, JudgeConfig(probability=True, explain=False), options)
    moved = tmp_path / "moved"
    moved.mkdir()
    systems = {}
    for name in run.report.systems:
        systems[name] = shutil.move(str(tmp_path / f"{name}.jsonl"), moved / f"{name}.jsonl")
    with pytest.raises(InputError, match="no such file"):
        ComparisonReport.load(tmp_path / "report", options)
    _assert_round_trip(tmp_path / "report", run, options, systems=systems)


def test_a_folder_before_its_run_has_no_view(tmp_path: Path) -> None:
    folder = ReportFolder(tmp_path / "empty")
    assert not folder.written
    assert folder.view("json") is None and folder.view("md") is None and folder.view("html") is None
    assert folder.export("qrels") is None and folder.export("run", "A") is None
    assert folder.saved_differences() is None and folder.judged_mode() is None
    with pytest.raises(FileNotFoundError):
        ComparisonReport.load(folder.path)


def test_files_are_named_by_the_folder_and_differences_are_saved_once(tmp_path: Path) -> None:
    options = SystemsOptions(resamples=200, stability_resamples=0)
    run = _run(tmp_path, JudgeConfig(probability=True, explain=False), options)
    folder = run.folder
    assert folder.written and folder.judged_mode() == "binary"
    assert folder.export("qrels") == folder.pool_qrels.read_text(encoding="utf-8")
    assert folder.export("run", "better") == folder.run("better").read_text(encoding="utf-8")
    assert folder.export("run", "nobody") is None
    assert folder.saved_differences() is None
    saved = run.save_differences()
    assert folder.saved_differences() == saved == run.differences()
