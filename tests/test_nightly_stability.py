"""``judge nightly``: config, history JSONL, trend plot redrawn, loud breach."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from _helpers import passage_of

import judge.cli._stability as stability_cli
from judge.backends import ChatRequest, ScriptedBackend
from judge.backends._fake import Reply
from judge.cli import main
from judge.io._errors import InputError
from judge.stability import (
    append_history,
    git_commit,
    load_nightly_config,
    plot_trend,
    read_history,
)
from judge.stability._nightly import night_dir


class Judge:
    """yes iff "RELEVANT" in the passage; flips with probability p (seeded per occurrence)."""

    def __init__(self, p: float = 0.0, seed: int = 0) -> None:
        self.p, self.seed = p, seed
        self.seen: Counter[str] = Counter()

    def __call__(self, request: ChatRequest, _index: int) -> Reply:
        text = passage_of(request)
        n = self.seen[text]
        self.seen[text] += 1
        relevant = ("RELEVANT" in text) != (random.Random(f"{self.seed}|{n}|{text}").random() < self.p)
        return json.dumps({"verdict": "yes" if relevant else "no", "reason": "理由"}, ensure_ascii=False)


def write_dataset(path: Path, n_queries: int = 20, per_query: int = 8) -> Path:
    rng = random.Random(3)
    with path.open("w", encoding="utf-8") as fh:
        for q in range(n_queries):
            ctx = [
                {"id": f"{q}-{i}", "text": f"段落 {q}-{i}" + (" RELEVANT" if rng.random() < 0.4 else "")}
                for i in range(per_query)
            ]
            fh.write(json.dumps({"id": f"q{q}", "query": f"查询 {q}", "retrieval_context": ctx}) + "\n")
    return path


def write_config(dir_: Path, **overrides: Any) -> Path:
    write_dataset(dir_ / "data.jsonl")
    cfg = {
        "name": "test-night",
        "dataset": "data.jsonl",
        "runs": 2,
        "threshold": 0.01,
        "history": "out/history.jsonl",
        "report_dir": "out/reports",
    } | overrides
    path = dir_ / "nightly.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def use_backend(monkeypatch: pytest.MonkeyPatch, judge: Judge) -> None:
    monkeypatch.setattr(
        stability_cli,
        "open_backend",
        lambda *a, **k: ScriptedBackend(judge, name="fake:night", max_concurrency=1),
    )
    monkeypatch.setattr(stability_cli, "_describe", lambda b: b.name)
    monkeypatch.setenv("JUDGE_GIT_COMMIT", "0123abcd")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_nightly_twice_appends_two_entries_and_redraws_the_trend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    use_backend(monkeypatch, Judge(0.0))
    assert main(["nightly", str(config), "--quiet"]) == 0
    trend = tmp_path / "out" / "trend.png"
    history = tmp_path / "out" / "history.jsonl"
    first_hash = sha(trend)
    assert len(history.read_text(encoding="utf-8").splitlines()) == 1

    assert main(["nightly", str(config), "--quiet"]) == 0
    lines = history.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    entries = [json.loads(line) for line in lines]
    for e in entries:
        assert e["schema"] == "judge.nightly/1"
        assert e["name"] == "test-night" and e["git_commit"] == "0123abcd" and e["backend"] == "fake:night"
        assert e["passed"] is True and e["status"] == "pass" and e["relative_spread"] == 0.0
        assert e["runs"] == 2 and e["metric"] == "map" and e["threshold"] == 0.01
        assert set(e["figures"]) == {"map", "score", "ndcg@5", "ndcg@10"}
        assert e["flip_rate"] == 0.0 and e["fleiss_kappa"] == pytest.approx(1.0)
        assert Path(e["report_dir"], "report.json").exists()
        assert datetime.fromisoformat(e["timestamp"]).tzinfo is not None
    assert entries[0]["report_dir"] != entries[1]["report_dir"]
    # redrawn: a second point on the trend changes the picture
    assert trend.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sha(trend) != first_hash
    assert "BREACH" not in capsys.readouterr().err


def test_nightly_breach_is_loud_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, runs=3)
    use_backend(monkeypatch, Judge(0.05, seed=11))
    assert main(["nightly", str(config), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert re.search(
        r"^BREACH \[test-night\]: judge stability: map relative spread [\d.]+% > threshold 1.00%", err, re.M
    )
    entry = json.loads((tmp_path / "out" / "history.jsonl").read_text(encoding="utf-8"))
    assert entry["passed"] is False and entry["status"] == "breach" and entry["flip_rate"] > 0
    assert (tmp_path / "out" / "trend.png").exists()


def test_toml_config_and_defaults(tmp_path: Path) -> None:
    write_dataset(tmp_path / "d.jsonl")
    path = tmp_path / "night.toml"
    path.write_text(
        'dataset = "d.jsonl"\nmode = "graded"\nprobability = true\nruns = 4\nthreshold = 0.02\n'
        'metric = "ndcg@10"\nseed = 7\n',
        encoding="utf-8",
    )
    cfg = load_nightly_config(path)
    assert cfg.dataset == tmp_path / "d.jsonl"
    assert cfg.judge.mode == "graded" and cfg.judge.probability and cfg.judge.seed == 7
    assert cfg.options.runs == 4 and cfg.options.threshold == 0.02 and cfg.options.metric == "ndcg@10"
    assert cfg.history == tmp_path / "nightly" / "history.jsonl"
    assert cfg.trend_plot == tmp_path / "nightly" / "trend.png"
    assert cfg.report_dir == tmp_path / "nightly" / "reports"
    assert cfg.name == "night" and cfg.backend is None


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ({"dataset": "d.jsonl", "runz": 3}, "runz"),
        ({"runs": 3}, "dataset"),
        ({"dataset": "d.jsonl", "runs": "3"}, "runs"),
        ({"dataset": "d.jsonl", "probability": 1}, "probability"),
        ({"dataset": "d.jsonl", "runs": 1}, "runs"),
        ({"dataset": "d.jsonl", "k": [5, "x"]}, "k"),
    ],
)
def test_bad_config_names_the_field(tmp_path: Path, content: dict[str, Any], field: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_nightly_config(path)
    assert info.value.field == field and info.value.path == str(path)


def test_bad_config_exits_2_before_any_judging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    judge = Judge()
    use_backend(monkeypatch, judge)
    path = tmp_path / "c.json"
    path.write_text("{not json", encoding="utf-8")
    assert main(["nightly", str(path)]) == 2
    config = write_config(tmp_path, dataset="missing.jsonl")
    assert main(["nightly", str(config)]) == 2
    assert sum(judge.seen.values()) == 0


def test_history_survives_a_torn_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = tmp_path / "h.jsonl"
    history.write_text(
        '{"timestamp": "2025-01-01T00:00:00+00:00", "relative_spread": 0.0, "passed": true}\n{"timest',
        encoding="utf-8",
    )
    append_history(
        history, {"timestamp": "2025-01-02T00:00:00+00:00", "relative_spread": 0.02, "passed": False}
    )
    entries = read_history(history)
    assert [e["timestamp"][:10] for e in entries] == ["2025-01-01", "2025-01-02"]
    assert "unreadable history line skipped" in capsys.readouterr().err
    assert plot_trend(entries, 0.01)[:8] == b"\x89PNG\r\n\x1a\n"
    # an infinite spread (null) is drawn at the top, not dropped
    entries.append({"timestamp": "2025-01-03T00:00:00+00:00", "relative_spread": None, "passed": False})
    assert plot_trend(entries, 0.01) != plot_trend(entries[:2], 0.01)
    assert plot_trend([], 0.01)[:4] == b"\x89PNG"


def test_git_commit_from_env_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_GIT_COMMIT", "feedbeef")
    assert git_commit() == "feedbeef"
    monkeypatch.delenv("JUDGE_GIT_COMMIT")
    monkeypatch.delenv("GITHUB_SHA", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_commit(tmp_path) is None


def test_night_dirs_never_collide(tmp_path: Path) -> None:
    when = datetime(2025, 3, 1, 2, 0, 0, tzinfo=UTC)
    first = night_dir(tmp_path, when)
    assert first.name == "20250301T020000Z"
    first.mkdir()
    assert night_dir(tmp_path, when).name == "20250301T020000Z-2"
