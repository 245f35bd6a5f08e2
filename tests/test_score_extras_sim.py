"""``judge score`` against a simulated server whose replies carry harmless extras.

A share of the replies have one key the schema does not ask for (``"grade": 0`` on a binary
verdict) and some have ``"reason": null``. Every passage must come back judged on its first
ask (no re-asks), with the extras kept in ``raw``, and a re-run must make zero calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_sim

from judge.cli import main

sim_mod = load_sim()
QUERIES, PER_QUERY = 24, 5


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with sim_mod.SimProcess(
        None, latency_ms=5, jitter_ms=2, capacity=1000, extra_key_rate=0.3, null_reason_rate=0.2
    ) as s:
        yield s


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)


def _dataset(path: Path) -> Path:
    rows = [
        {
            "id": f"q{i}",
            "query": f"问题 {i}",
            "retrieval_context": [f"问题 {i} 的段落 {j} <rel={(i * 7 + j) % 4}>" for j in range(PER_QUERY)],
        }
        for i in range(QUERIES)
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _score(sim: Any, data: Path, out: Path, *extra: str) -> int:
    argv = [
        "score",
        str(data),
        "-o",
        str(out),
        "--backend",
        "openai:simulated-judge",
        "--base-url",
        sim.base_url,
    ]
    return main([*argv, "--quiet", *extra])


def test_extra_keys_and_null_reasons_leave_nothing_unjudged_and_rerun_is_free(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _dataset(tmp_path / "d.jsonl")
    passages = QUERIES * PER_QUERY
    sim.reset()
    assert _score(sim, data, tmp_path / "a.jsonl") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["unjudged"] == 0
    stats = sim.stats()
    assert stats["kinds"]["judge"] == passages  # one ask per passage: nothing was re-asked
    assert stats["repeated_keys"] == 0

    records = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()]
    verdicts = [v for r in records for v in r["verdicts"]]
    assert len(verdicts) == passages and all(v["verdict"] in ("yes", "no") for v in verdicts)
    assert all(v["reasks"] == 0 for v in verdicts)
    with_extras = [v for v in verdicts if v["raw"] is not None]
    # the simulator gives ~30% of replies an extra key: they are kept whole in raw
    assert 0.15 * passages < len(with_extras) < 0.45 * passages
    assert all('"grade": 0' in v["raw"] for v in with_extras)
    empty_reasons = sum(v["reason"] == "" for v in verdicts)
    assert 0.08 * passages < empty_reasons < 0.35 * passages  # ~20% null reasons -> ""
    # the verdict itself is the simulator's: yes iff the passage's marked grade >= 2
    for r in records:
        i = int(r["id"][1:])
        assert [v["verdict"] for v in r["verdicts"]] == [
            "yes" if (i * 7 + j) % 4 >= 2 else "no" for j in range(PER_QUERY)
        ]

    # a re-run (a fresh output, same cache) asks nothing
    sim.reset()
    assert _score(sim, data, tmp_path / "b.jsonl") == 0
    again = json.loads(capsys.readouterr().out)
    assert again["unjudged"] == 0
    assert sim.stats()["total"] == 0
    first = {r["id"]: [v["verdict"] for v in r["verdicts"]] for r in records}
    rerun = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["id"]: [v["verdict"] for v in r["verdicts"]] for r in rerun} == first
    assert all(v["cached"] for r in rerun for v in r["verdicts"])
