"""``--compare-settings``: each variance-reduction setting measured by the harness, side by side."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _helpers import passage_of

import judge.cli._stability as stability_cli
from judge.backends import ChatRequest, ScriptedBackend
from judge.backends._fake import Reply
from judge.cli import main
from judge.io._errors import InputError
from judge.judging import JudgeConfig
from judge.stability import StabilityOptions, compare_settings, load_records, variance_settings


class SamplingJudge:
    """Truth: "RELEVANT" in the passage. When sampling (temperature > 0, no probabilities)
    each call flips with probability ``p`` (seeded per passage and occurrence); greedy
    decoding and probability mode are deterministic, like a real model."""

    def __init__(self, p: float = 0.1, seed: int = 0) -> None:
        self.p, self.seed = p, seed
        self.seen: Counter[str] = Counter()

    def __call__(self, request: ChatRequest, _index: int) -> Reply:
        text = passage_of(request)
        n = self.seen[text]
        self.seen[text] += 1
        relevant = "RELEVANT" in text
        if request.candidates is not None:
            return {"yes": 0.9 if relevant else 0.1, "no": 0.1 if relevant else 0.9}
        if request.temperature > 0 and random.Random(f"{self.seed}|{n}|{text}").random() < self.p:
            relevant = not relevant
        return json.dumps({"verdict": "yes" if relevant else "no", "reason": "理由"}, ensure_ascii=False)


def write_dataset(path: Path, n_queries: int = 30, per_query: int = 8) -> Path:
    rng = random.Random(1)
    with path.open("w", encoding="utf-8") as fh:
        for q in range(n_queries):
            ctx = [f"段落 {q}-{i}。" + (" RELEVANT" if rng.random() < 0.4 else "") for i in range(per_query)]
            fh.write(json.dumps({"id": f"q{q}", "query": f"查询 {q}", "retrieval_context": ctx}) + "\n")
    return path


def test_variance_settings_are_derived_from_the_base_config() -> None:
    base = JudgeConfig(mode="graded", language="en")
    settings = {s.name: s.config for s in variance_settings(base, vote_samples=3)}
    assert list(settings) == ["baseline", "t0-seed", "vote-3", "probability"]
    assert (settings["baseline"].temperature, settings["baseline"].seed) == (0.7, None)
    assert (settings["t0-seed"].temperature, settings["t0-seed"].seed) == (0.0, 42)
    assert (settings["vote-3"].samples, settings["vote-3"].temperature, settings["vote-3"].seed) == (
        3,
        0.7,
        42,
    )
    assert settings["probability"].probability and settings["probability"].samples == 1
    assert all(c.mode == "graded" and c.language == "en" for c in settings.values())
    # an explicit sampling temperature is kept for baseline and vote
    warm = {s.name: s.config for s in variance_settings(JudgeConfig(temperature=1.0))}
    assert warm["baseline"].temperature == 1.0 and warm["vote-5"].temperature == 1.0
    with pytest.raises(InputError, match="unknown setting"):
        variance_settings(base, names=["baseline", "beam"])
    with pytest.raises(InputError, match="at least 2"):
        variance_settings(base, vote_samples=1)


async def test_each_setting_is_measured_and_tabulated(tmp_path: Path) -> None:
    records = load_records(write_dataset(tmp_path / "d.jsonl"))
    backend = ScriptedBackend(SamplingJudge(0.1, seed=5), max_concurrency=1)
    settings = variance_settings(JudgeConfig())
    outcomes = await compare_settings(backend, records, settings, StabilityOptions(runs=3), tmp_path / "out")
    by = {o.setting.name: o.row() for o in outcomes}
    # greedy decoding and probability mode: no movement at all
    for name in ("t0-seed", "probability"):
        assert by[name]["relative_spread"] == 0.0 and by[name]["flip_rate"] == 0.0 and by[name]["passed"]
    # sampling at 10% flips: with 240 passages and 3 runs, ~27% of passages move
    assert by["baseline"]["flip_rate"] > 0.15 and not by["baseline"]["passed"]
    # majority of 5 samples: P(flip) = P(Bin(5, .1) >= 3) = 0.86%, so far fewer passages move
    assert by["vote-5"]["flip_rate"] < by["baseline"]["flip_rate"] / 3
    assert by["vote-5"]["calls"] == 5 * by["t0-seed"]["calls"]
    table = json.loads((tmp_path / "out" / "settings.json").read_text(encoding="utf-8"))
    assert [r["setting"] for r in table["settings"]] == ["baseline", "t0-seed", "vote-5", "probability"]
    md = (tmp_path / "out" / "settings.md").read_text(encoding="utf-8")
    assert "| vote-5 |" in md and "| probability |" in md
    for name in by:
        assert (tmp_path / "out" / "settings" / name / "report.json").exists()
        assert (tmp_path / "out" / "settings" / name / "runs" / "run-2.jsonl").exists()


async def test_probability_setting_is_skipped_without_token_probabilities(tmp_path: Path) -> None:
    records = load_records(write_dataset(tmp_path / "d.jsonl", n_queries=3, per_query=3))
    backend = ScriptedBackend(SamplingJudge(), max_concurrency=1, supports_probabilities=False)
    settings = variance_settings(JudgeConfig(), names=["t0-seed", "probability"])
    outcomes = await compare_settings(backend, records, settings, StabilityOptions(runs=2), tmp_path)
    assert outcomes[1].report is None and "no token probabilities" in (outcomes[1].skipped or "")
    assert "skipped" in (tmp_path / "settings.md").read_text(encoding="utf-8")


def test_cli_compare_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    dataset = write_dataset(tmp_path / "d.jsonl", n_queries=6, per_query=4)
    monkeypatch.setattr(
        stability_cli, "open_backend", lambda *a, **k: ScriptedBackend(SamplingJudge(0.2), max_concurrency=1)
    )
    monkeypatch.setattr(stability_cli, "_describe", lambda b: b.name)
    code = main(
        [
            "stability", str(dataset), "--runs", "2", "--compare-settings",
            "--settings", "baseline,t0-seed", "-o", str(tmp_path / "cmp"), "--quiet",
        ]
    )  # fmt: skip
    assert code == 0  # a measurement: pass/fail is per setting in the table
    out = capsys.readouterr().out
    assert "| baseline |" in out and "| t0-seed |" in out
