"""One registration makes a measure family available everywhere a measure is taken:
``judge trec``, ``judge score -m``, ``judge.evaluate(measures=...)`` and stability runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import isolate_cli_env, load_sim

import judge
from judge.backends._fake import RuleBackend
from judge.cli import main
from judge.io import InputError
from judge.judging import JudgeConfig
from judge.metrics import (
    Measure,
    RankedQuery,
    available_measures,
    parse_measure,
    register_measure,
    unregister_measure,
)
from judge.stability import StabilityOptions, load_records, run_stability_sync

sim_mod = load_sim()


def _relevant_in_top(m: Measure, q: RankedQuery) -> float:
    """The number of relevant documents in the top k."""
    return float(q.hits_at(m.cutoff or q.num_ret))


@pytest.fixture
def rel_hits() -> Iterator[str]:
    register_measure("rel_hits", _relevant_in_top, cutoff="required", aliases=("RelHits",))
    try:
        yield "rel_hits"
    finally:
        unregister_measure("rel_hits")


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with sim_mod.SimProcess(None, latency_ms=5, jitter_ms=2, capacity=1000) as s:
        yield s


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_cli_env(tmp_path, monkeypatch)


def test_registration_is_checked_and_reversible(rel_hits: str) -> None:
    assert rel_hits in available_measures()
    assert parse_measure("RelHits@3").trec_name == "rel_hits_3"
    assert parse_measure("rel_hits_3") == parse_measure("rel_hits@3")
    with pytest.raises(ValueError, match="already registered"):
        register_measure("rel_hits", _relevant_in_top)
    with pytest.raises(ValueError, match="already registered"):
        register_measure("mine", _relevant_in_top, aliases=("MRR",))
    with pytest.raises(ValueError, match="ending in _<number>"):
        register_measure("mine_5", _relevant_in_top)
    with pytest.raises(ValueError, match="needs a cutoff"):
        parse_measure("rel_hits")
    with pytest.raises(ValueError, match="not a registered extension"):
        unregister_measure("map")


def test_unregistered_is_unknown_again() -> None:
    register_measure("tmp_family", _relevant_in_top)
    unregister_measure("tmp_family")
    with pytest.raises(ValueError, match="unknown measure"):
        parse_measure("tmp_family")
    assert "tmp_family" not in available_measures()


def test_a_registered_measure_in_trec(
    rel_hits: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qrels = tmp_path / "qrels"
    qrels.write_text("1 0 a 1\n1 0 b 0\n1 0 c 2\n2 0 x 1\n", encoding="utf-8")
    run = tmp_path / "run"
    run.write_text("1 Q0 a 1 3.0 t\n1 Q0 b 2 2.0 t\n1 Q0 c 3 1.0 t\n2 Q0 y 1 2.0 t\n2 Q0 x 2 1.0 t\n")
    assert main(["trec", "-q", "-m", "rel_hits@2", "-m", "P@2", str(qrels), str(run)]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    values = {(k.strip(), q): v for k, q, v in lines}
    # query 1: a (rel), b (no) -> 1 in the top 2; query 2: y (unjudged), x (rel) -> 1
    assert values[("rel_hits_2", "1")] == "1.0000" and values[("rel_hits_2", "2")] == "1.0000"
    assert values[("rel_hits_2", "all")] == "1.0000"


def test_a_registered_measure_in_score(
    rel_hits: str, sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = tmp_path / "d.jsonl"
    # the simulated judge says yes iff the marker grade >= 2
    ctx = [{"id": f"d{j}", "text": f"段落 {j} <rel={g}>"} for j, g in enumerate([3, 0, 2, 1])]
    inp.write_text(
        json.dumps({"id": "q", "query": "问题", "retrieval_context": ctx}) + "\n", encoding="utf-8"
    )
    out = tmp_path / "o.jsonl"
    argv = ["score", str(inp), "-o", str(out), "-m", "RelHits@3", "--backend", "openai:simulated-judge"]
    assert main([*argv, "--base-url", sim.base_url, "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["measures"] == {"RelHits@3": 2.0}  # yes, no, yes in the top 3
    assert summary["judge"]["measures"] == {"RelHits@3": 2.0}
    assert summary["conventions"]["measures"]["RelHits@3"]["judge"]["key"] == "rel_hits_3(unjudged=drop)"


def test_a_registered_measure_in_evaluate(rel_hits: str) -> None:
    result = judge.evaluate(
        "q",
        ["RELEVANT a", "b", "RELEVANT c", "RELEVANT d"],
        backend=RuleBackend.keyword("RELEVANT"),
        measures=["rel_hits@2", "RelHits@4"],
        summary=False,
    )
    assert result.measures == {"rel_hits@2": 1.0, "RelHits@4": 3.0}
    assert result.measure_conventions["rel_hits@2"]["unjudged"] == "drop"


def test_a_registered_measure_in_stability(rel_hits: str, tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    rows = [
        {"id": f"q{i}", "query": f"问题 {i}", "retrieval_context": ["RELEVANT a", f"b {i}", "RELEVANT c"]}
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    report = run_stability_sync(
        RuleBackend.keyword("RELEVANT"),
        load_records(path),
        JudgeConfig(),
        StabilityOptions(runs=2, metric="rel_hits@2"),
    )
    data = report.data
    assert data["check"]["metric"] == "rel_hits@2" and data["check"]["relative_spread"] == 0.0
    assert data["figures"]["rel_hits@2"]["values"] == [1.0, 1.0]
    assert data["conventions"]["measures"]["rel_hits@2"]["key"] == "rel_hits_2(unjudged=drop)"
    assert set(data["figures"]) == {"map", "score", "ndcg@5", "ndcg@10", "rel_hits@2"}


def test_stability_metric_names() -> None:
    assert StabilityOptions(metric="MRR").checked.measure.trec_name == "recip_rank(unjudged=drop)"
    assert StabilityOptions(metric="MAP").checked.name == "map"
    assert StabilityOptions(metric="P@3").checked.per_query_name == "P@3"
    with pytest.raises(InputError, match="bad metric 'P'"):
        StabilityOptions(metric="P")
    with pytest.raises(InputError, match="unknown metric 'rel_hits@2'"):
        StabilityOptions(metric="rel_hits@2")  # not registered here
