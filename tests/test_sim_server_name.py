"""The simulated LLM server names itself as simulated: its model list, its replies, and what
the judge records and shows for a run against it never name a paid model."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_sim

from judge.cli import main

sim_mod = load_sim()
NAME = "simulated-judge"


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with sim_mod.SimProcess(None, latency_ms=1, jitter_ms=0, capacity=100) as s:
        yield s


def _get(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode("utf-8") if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def test_the_server_names_itself_simulated_whatever_the_request_asks(sim: Any) -> None:
    assert sim_mod.SimConfig().model == NAME
    assert [m["id"] for m in _get(sim.base_url + "/models")["data"]] == [NAME]
    reply = _get(
        sim.base_url + "/chat/completions",
        {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "<passage>x <rel=3></passage>"}]},
    )
    assert reply["model"] == NAME


def test_a_run_against_it_records_the_simulated_judge(
    sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    data = tmp_path / "d.jsonl"
    data.write_text(
        json.dumps(
            {"id": "q1", "query": "小狗贫血的表现", "retrieval_context": ["牙龈苍白 <rel=3>", "狗粮 <rel=0>"]}
        )
        + "\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    args = ["score", str(data), "-o", str(out), "--backend", f"openai:{NAME}", "--base-url", sim.base_url]
    assert main([*args, "--quiet", "--no-cache"]) == 0
    summary_path = next(tmp_path.glob("out*summary*.json"))
    summary = summary_path.read_text(encoding="utf-8")
    assert f"openai:{NAME}" in summary and "gpt-4o-mini" not in summary
    assert "gpt-4o-mini" not in out.read_text(encoding="utf-8")
