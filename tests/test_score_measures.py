"""``judge score -m MEASURE``: registry measures per query and in the summary, by hand."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import isolate_cli_env, load_sim

from judge.cli import main

sim_mod = load_sim()


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    # Half the requests fail with HTTP 500; with --max-retries 0 those passages are unjudged.
    with sim_mod.SimProcess(None, latency_ms=5, jitter_ms=2, capacity=1000, error_rate=0.5, seed=7) as s:
        yield s


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_cli_env(tmp_path, monkeypatch)


def _dataset(path: Path, n: int = 8) -> Path:
    rows = []
    for i in range(n):
        ctx = [{"id": f"q{i}-d{j}", "text": f"问题 {i} 段落 {j} <rel={(i * 3 + j) % 4}>"} for j in range(5)]
        rows.append(
            {"id": f"q{i}", "query": f"问题 {i}", "retrieval_context": ctx, "expected_ids": [f"q{i}-d1"]}
        )
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(sim: Any, *args: str) -> int:
    return main(
        [
            "score",
            *args,
            "--backend",
            "openai:simulated-judge",
            "--base-url",
            sim.base_url,
            "--quiet",
            "--max-retries",
            "0",
        ]
    )


def _p_at(rel: list[int], k: int) -> float:
    return sum(rel[:k]) / k


def _judged_rel(record: dict[str, Any]) -> list[int]:
    """The judged list by hand: unjudged passages dropped, yes = relevant."""
    return [1 if v["verdict"] == "yes" else 0 for v in record["verdicts"] if v["verdict"] != "unjudged"]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def test_p_at_3_equals_the_hand_computation_from_the_verdicts(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _dataset(tmp_path / "d.jsonl")
    out = tmp_path / "o.jsonl"
    assert _run(sim, str(inp), "-o", str(out), "-m", "P@3", "-m", "RR,AP(denominator=qrels)") == 0
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert sum(r["unjudged"] for r in records) > 0, "the faulty server should leave passages unjudged"
    hand: list[float] = []
    for r in records:
        rel = _judged_rel(r)
        if not rel:
            assert r["measures"]["P@3"] is None
            continue
        assert r["measures"]["P@3"] == pytest.approx(_p_at(rel, 3), abs=1e-6)
        assert r["measures"]["RR"] == r["rr"]  # the same registry measure as the standard field
        hand.append(_p_at(rel, 3))
        # ground truth: the input ranking against expected_ids (d1 relevant), trec_eval's P@3
        assert r["ground_truth"]["measures"]["P@3"] == pytest.approx(1 / 3, abs=1e-6)
    assert summary["judge"]["measures"]["P@3"] == pytest.approx(_mean(hand), abs=1e-6)
    assert summary["judge"]["measures"]["RR"] == summary["judge"]["mrr"]
    assert summary["ground_truth"]["measures"]["P@3"] == pytest.approx(1 / 3, abs=1e-6)
    assert summary["ground_truth"]["measures"]["RR"] == summary["ground_truth"]["mrr"] == 0.5
    # the conventions each measure was computed with are in the summary
    conv = summary["conventions"]["measures"]
    assert conv["P@3"]["judge"] == {
        "key": "P_3(unjudged=drop)",
        "measure": "P",
        "cutoff": 3,
        "rel": "verdict yes",
        "unjudged": "drop",
        "pool": "judged passages (+ unretrieved qrels passages when qrels are given)",
    }
    assert conv["P@3"]["ground_truth"]["key"] == "P_3"
    assert conv["AP(denominator=qrels)"]["judge"]["ap_denominator"] == "qrels"
    # the standard keys are unchanged by -m
    assert set(summary["judge"]) == {"map", "ndcg", "mean_score", "mrr", "precision", "expected", "measures"}


def test_without_m_the_output_has_no_measures_key(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _dataset(tmp_path / "d.jsonl", n=2)
    out = tmp_path / "o.jsonl"
    assert _run(sim, str(inp), "-o", str(out)) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "measures" not in summary["judge"] and "measures" not in summary["conventions"]
    assert all("measures" not in json.loads(x) for x in out.read_text(encoding="utf-8").splitlines())


def test_resume_with_other_measures_computes_them_from_the_records(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _dataset(tmp_path / "d.jsonl", n=4)
    out = tmp_path / "o.jsonl"
    assert _run(sim, str(inp), "-o", str(out), "-m", "P@3") == 0
    capsys.readouterr()
    # every query is done: the rerun judges nothing but reports P@2 from the stored verdicts
    assert _run(sim, str(inp), "-o", str(out), "-m", "P@2") == 0
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    rels = [_judged_rel(r) for r in records]
    assert summary["judge"]["measures"] == {
        "P@2": pytest.approx(_mean([_p_at(x, 2) for x in rels if x]), abs=1e-6)
    }
    assert summary["ground_truth"]["measures"] == {"P@2": 0.5}


def test_a_bad_measure_is_refused_before_any_call(
    sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _dataset(tmp_path / "d.jsonl", n=1)
    before = int(sim.stats()["total"])
    assert _run(sim, str(inp), "-m", "P@3,nonsense@2") == 2
    err = capsys.readouterr().err
    assert "field '-m'" in err and "nonsense@2" in err
    assert int(sim.stats()["total"]) == before
    assert not (tmp_path / "d.judged.jsonl").exists()
