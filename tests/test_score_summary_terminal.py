"""``judge score``'s summary: a short table on a terminal, the JSON on a pipe or with --json.

The terminal is a stdout whose ``isatty()`` says True (the check the command makes); the
judge is the qrels-backed one at level 2 on the sample's hand grades, so every figure is
known: it says yes to the passages graded 2 or 3, and the ground truth counts grade >= 1."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("JUDGE_BACKEND", raising=False)
    shutil.copy(ROOT / "datasets" / "sample.jsonl", tmp_path / "sample.jsonl")
    return tmp_path / "sample.jsonl"


def _grades() -> list[int]:
    lines = (ROOT / "datasets" / "sample.qrels").read_text(encoding="utf-8").split("\n")
    return [int(line.split()[3]) for line in lines if line.strip()]


def _score(sample: Path, monkeypatch: pytest.MonkeyPatch, out: io.StringIO, *extra: str) -> str:
    monkeypatch.setattr("sys.stdout", out)
    qrels = ROOT / "datasets" / "sample.qrels"
    code = main(["score", str(sample), "--backend", f"qrels:{qrels}:2", "--quiet", *extra])
    assert code == 0
    return out.getvalue()


def test_a_terminal_sees_a_short_table_and_where_the_json_is(
    sample: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _score(sample, monkeypatch, _Terminal())
    summary_path = sample.with_name("sample.judged.summary.json")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    grades = _grades()
    yes, relevant = sum(g >= 2 for g in grades), sum(g >= 1 for g in grades)
    assert (len(grades), yes, relevant) == (84, 31, 48)
    lines = text.splitlines()
    assert lines[0] == (
        "judge score: 14 queries, 84 passages (31 yes, 53 no, 0 unjudged); "
        "this run asked the judge 84, the cache answered 0"
    )
    assert lines[2].split() == ["judge", "ground", "truth"]
    table = {line.split()[0]: line.split()[1:] for line in lines[3:9]}
    assert list(table) == ["mAP", "NDCG@5", "NDCG@10", "P@5", "P@10", "MRR"]
    judge, truth = summary["judge"], summary["ground_truth"]
    assert table["mAP"] == [f"{judge['map']:.4f}", f"{truth['map']:.4f}"]
    assert table["P@5"] == [f"{judge['precision']['5']:.4f}", f"{truth['precision']['5']:.4f}"]
    assert table["MRR"] == [f"{judge['mrr']:.4f}", f"{truth['mrr']:.4f}"]
    # the judge says no to the 17 passages of grade 1 and yes to no passage of grade 0
    assert f"accuracy {(84 - 17) / 84:.3f}" in text
    assert "the judge said no to 17 of 48 relevant passages and yes to 0 of 36 others" in text
    assert lines[-2] == f"output   {sample.with_name('sample.judged.jsonl')}"
    assert lines[-1] == f"summary  {summary_path} (every figure as JSON; --json prints it here)"
    assert "{" not in text and len(lines) < 25


def test_a_pipe_and_json_get_the_json(sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    piped = json.loads(_score(sample, monkeypatch, io.StringIO()))
    written = json.loads(sample.with_name("sample.judged.summary.json").read_text(encoding="utf-8"))
    assert piped == written and piped["verdicts"] == {"yes": 31, "no": 53}
    asked = json.loads(_score(sample, monkeypatch, _Terminal(), "--json"))  # resumed: nothing to do
    assert asked["judge"] == piped["judge"] and asked["this_run"]["queries_skipped_already_done"] == 14


def test_the_table_says_what_labels_and_adapt_did(sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    labels = sample.with_name("few.qrels")
    labels.write_text("q01 0 q01-p1 0\nq02 0 q02-p1 3\n", encoding="utf-8")
    text = _score(sample, monkeypatch, _Terminal(), "--labels", str(labels), "--labels-level", "1")
    summary = json.loads(sample.with_name("sample.judged.summary.json").read_text(encoding="utf-8"))
    applied, changed = summary["labels"]["applied"], summary["labels"]["changed"]
    assert applied == 2
    assert f"human labels: 2 applied ({changed} changed a verdict), 0 unmatched" in text
