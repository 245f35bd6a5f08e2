"""Human labels in the stability harness: a labelled passage has its label in every run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge.backends import ChatRequest, ScriptedBackend
from judge.io._errors import InputError
from judge.judging import JudgeConfig
from judge.stability import StabilityOptions, load_records, run_stability_sync
from judge.store import Label, LabelSet


def _never(request: ChatRequest, _index: int) -> str:
    return json.dumps({"verdict": "no", "reason": "测试"}, ensure_ascii=False)


def _dataset(path: Path) -> Path:
    row = {
        "id": "q1",
        "query": "主题",
        "retrieval_context": [{"id": f"p{i}", "text": f"段落 {i}"} for i in range(3)],
    }
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def test_labelled_passages_are_decided_by_people_in_every_run(tmp_path: Path) -> None:
    records = load_records(_dataset(tmp_path / "d.jsonl"))
    backend = ScriptedBackend(_never, name="fake:no", max_concurrency=1)
    labels = LabelSet([Label("q1", "p1", 1, "ann")])
    report = run_stability_sync(
        backend, records, JudgeConfig(), StabilityOptions(runs=2, labels=labels), runs_dir=tmp_path / "runs"
    )
    # every run: [no, yes (human), no] -> AP = (1/2) / 1 = 0.5
    assert report.data["figures"]["map"]["values"] == [0.5, 0.5]
    assert report.data["human_labels"]["passages"] == 1
    run0 = json.loads((tmp_path / "runs" / "run-0.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert [v["source"] for v in run0["verdicts"]] == ["judge", "human", "judge"]


def test_graded_labels_on_a_binary_stability_run_need_a_level(tmp_path: Path) -> None:
    records = load_records(_dataset(tmp_path / "d.jsonl"))
    backend = ScriptedBackend(_never, name="fake:no", max_concurrency=1)
    labels = LabelSet([Label("q1", "p1", 3, "ann", scale="graded")])
    with pytest.raises(InputError) as err:
        run_stability_sync(backend, records, JudgeConfig(), StabilityOptions(runs=2, labels=labels))
    assert err.value.field == "--labels-level" and backend.calls == 0
    ok = run_stability_sync(
        backend, records, JudgeConfig(), StabilityOptions(runs=2, labels=labels, labels_level=2)
    )
    assert ok.data["figures"]["map"]["values"] == [0.5, 0.5]


def test_the_summary_lines_say_how_many_passages_people_decided(tmp_path: Path) -> None:
    from judge.stability import summary_lines

    records = load_records(_dataset(tmp_path / "d.jsonl"))
    backend = ScriptedBackend(_never, name="fake:no", max_concurrency=1)
    labels = LabelSet([Label("q1", "p1", 1, "ann"), Label("q1", "p2", 0, "ann")], source="labels file x")
    report = run_stability_sync(backend, records, JudgeConfig(), StabilityOptions(runs=2, labels=labels))
    assert "  2 passage(s) decided by human labels (labels file x) in every run" in summary_lines(report)
