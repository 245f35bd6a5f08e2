"""The stability harness end to end with fake judges: a deterministic one (spread 0, pass),
one that flips 5% of verdicts at random (seeded, per run: spread, flip rate, unstable
passages, breach at 1%), graded and probability modes, unjudged passages, reports, CLI."""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pytest
from _helpers import passage_of

import judge.cli._stability as stability_cli
from judge.backends import ChatRequest, ScriptedBackend
from judge.backends._fake import Reply
from judge.cli import main
from judge.io._errors import InputError
from judge.judging import JudgeConfig
from judge.stability import (
    StabilityOptions,
    load_records,
    run_stability,
    run_stability_sync,
    write_report,
)


class NoisyJudge:
    """Truth: "RELEVANT" in the passage (graded: the digit after "GRADE="). Each call flips
    the answer with probability ``p``, drawn from ``Random(seed|occurrence|passage)``: the
    n-th time a passage is asked (run n when runs are sequential) has its own seeded draw.
    ``noisy_only_when_sampling``: no flips at temperature 0 or in probability mode."""

    def __init__(self, p: float, seed: int = 1, *, noisy_only_when_sampling: bool = False) -> None:
        self.p = p
        self.seed = seed
        self.sampling_only = noisy_only_when_sampling
        self.seen: Counter[str] = Counter()
        self.flips = 0

    def _flip(self, request: ChatRequest, text: str) -> bool:
        n = self.seen[text]
        self.seen[text] += 1
        if self.p <= 0 or (self.sampling_only and (request.temperature == 0 or request.candidates)):
            return False
        flipped = random.Random(f"{self.seed}|{n}|{text}").random() < self.p
        self.flips += flipped
        return flipped

    def __call__(self, request: ChatRequest, _index: int) -> Reply:
        text = passage_of(request)
        graded = request.candidates is not None and "3" in request.candidates
        graded = graded or '"grade"' in json.dumps(request.json_schema or {})
        flip = self._flip(request, text)
        if graded:
            m = re.search(r"GRADE=(\d)", text)
            g = int(m.group(1)) if m else 0
            if flip:
                g = (g + 2) % 4
            if request.candidates is not None:
                return {c: (0.7 if c == str(g) else 0.1) for c in request.candidates}
            return json.dumps({"grade": g, "reason": "测试理由"}, ensure_ascii=False)
        relevant = ("RELEVANT" in text) != flip
        if request.candidates is not None:
            p_yes = 0.8 if relevant else 0.2
            return {"yes": p_yes, "no": 1 - p_yes}
        return json.dumps({"verdict": "yes" if relevant else "no", "reason": "测试理由"}, ensure_ascii=False)


def backend_for(judge: NoisyJudge, *, max_concurrency: int | None = 1, **kw: Any) -> ScriptedBackend:
    return ScriptedBackend(judge, name="fake:noisy", max_concurrency=max_concurrency, **kw)


def write_dataset(path: Path, n_queries: int = 40, per_query: int = 10, seed: int = 7) -> Path:
    rng = random.Random(seed)
    lines = []
    for q in range(n_queries):
        passages = []
        for i in range(per_query):
            g = rng.choice([0, 0, 1, 2, 3])
            marker = " RELEVANT" if rng.random() < 0.35 else ""
            passages.append({"id": f"q{q}-p{i}", "text": f"段落 {q}-{i} 关于主题 {q}。GRADE={g}{marker}"})
        lines.append(json.dumps({"id": f"q{q}", "query": f"主题 {q} 是什么", "retrieval_context": passages}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "data.jsonl")


def expected_flip_rate(p: float, runs: int) -> float:
    """P(a passage's label is not identical in all runs) with independent flips of prob p."""
    return 1 - (1 - p) ** runs - p**runs


def binomial_tolerance(p: float, n: int, sigmas: float = 4.0) -> float:
    return sigmas * math.sqrt(p * (1 - p) / n)


# -------------------------------------------------------------------------------------------


def test_deterministic_backend_has_zero_spread_and_passes(dataset: Path, tmp_path: Path) -> None:
    records = load_records(dataset)
    judge = NoisyJudge(0.0)
    backend = backend_for(judge)
    report = run_stability_sync(
        backend, records, JudgeConfig(), StabilityOptions(runs=3), runs_dir=tmp_path / "runs"
    )
    d = report.data
    assert report.passed and report.exit_code == 0 and report.spread == 0.0
    assert d["check"] == {
        "metric": "map",
        "threshold": 0.01,
        "relative_spread": 0.0,
        "spread_infinite": False,
        "passed": True,
        "status": "pass",
    }
    for name in ("map", "score", "ndcg@5", "ndcg@10"):
        fig = d["figures"][name]
        assert fig["relative_spread"] == 0.0 and fig["cv"] == 0.0 and fig["range"] == 0.0
        assert len(set(fig["values"])) == 1
    agr = d["agreement"]
    assert agr["passages"] == 400 and agr["flip_rate"] == 0.0 and agr["unstable_passages"] == 0
    assert agr["fleiss_kappa"] == pytest.approx(1.0) and agr["krippendorff_alpha"] == pytest.approx(1.0)
    assert d["unstable_passages"] == [] and d["unstable_queries"] == []
    # every run asked the backend: 3 runs x 400 passages, no cache
    assert backend.calls == 1200
    assert [r["calls"] for r in d["runs"]] == [400, 400, 400]
    # runs kept: one line per query, the full result with its verdicts
    for i in range(3):
        lines = (tmp_path / "runs" / f"run-{i}.jsonl").read_text(encoding="utf-8").splitlines()
        assert len(lines) == 40
        first = json.loads(lines[0])
        assert first["run"] == i and first["id"] == "q0" and len(first["verdicts"]) == 10
    # judge noise 0: query sampling dominates
    noise = d["noise"]
    assert noise["judge"]["sd"] == 0.0 and noise["dominant"] == "query_sampling"
    assert noise["query_sampling"]["n_queries"] == 40


def test_map_is_the_mean_of_per_query_ap(dataset: Path) -> None:
    records = load_records(dataset)
    report = run_stability_sync(
        backend_for(NoisyJudge(0.0)), records, JudgeConfig(), StabilityOptions(runs=2)
    )
    run = report.runs[0]
    aps = [r.ap for r in run.results]
    assert all(a is not None for a in aps)
    assert report.data["runs"][0]["map"] == pytest.approx(float(np.mean([a for a in aps if a is not None])))
    scores = [r.score for r in run.results if r.score is not None]
    assert report.data["runs"][0]["score"] == pytest.approx(float(np.mean(scores)))


def test_five_percent_flips_are_measured_and_breach(dataset: Path, tmp_path: Path) -> None:
    records = load_records(dataset)
    p, runs = 0.05, 3
    judge = NoisyJudge(p, seed=2024)
    report = run_stability_sync(backend_for(judge), records, JudgeConfig(), StabilityOptions(runs=runs))
    d = report.data
    agr = d["agreement"]
    n = agr["passages"]
    assert n == 400
    # flip rate: share of passages not identical across 3 runs, expected 1 - .95^3 - .05^3
    expected = expected_flip_rate(p, runs)
    assert expected == pytest.approx(0.1425)
    assert abs(agr["flip_rate"] - expected) <= binomial_tolerance(expected, n)
    # deviation rate: share of labels off their passage's mode, ~ p (3 runs: 0.0475)
    expected_dev = (3 * p * (1 - p) ** 2 + 3 * p**2 * (1 - p)) / 3
    assert abs(agr["deviation_rate"] - expected_dev) <= binomial_tolerance(expected_dev, n * runs)
    # the fake's own count of flips agrees with the report: each unstable passage holds >= 1 flip
    assert judge.flips >= agr["unstable_passages"] > 0
    # unstable passages are listed with their label in each run
    listed = d["unstable_passages"]
    assert len(listed) == 10  # --top default
    for row in listed:
        assert len(row["labels"]) == runs and len(set(row["labels"])) == 2
        assert row["passage_id"].startswith(row["query_id"] + "-p")
    # spread over 1%: breach
    spread = d["figures"]["map"]["relative_spread"]
    assert spread is not None and spread > 0.01
    assert d["check"]["passed"] is False and d["check"]["status"] == "breach"
    assert report.exit_code == 1
    assert d["unstable_queries"] and d["unstable_queries"][0]["range"] >= d["unstable_queries"][-1]["range"]
    # kappa/alpha below 1 but high; alpha equals the krippendorff package on the label table
    assert 0.7 < agr["fleiss_kappa"] < 1.0
    table = np.array(
        [
            [1.0 if v.verdict == "yes" else 0.0 for res in run.results for v in res.verdicts]
            for run in report.runs
        ]
    )
    ref = krippendorff.alpha(reliability_data=table, level_of_measurement="nominal")
    assert agr["krippendorff_alpha"] == pytest.approx(ref)


def test_threshold_decides_pass_or_breach_on_the_same_runs(dataset: Path) -> None:
    records = load_records(dataset)
    loose = run_stability_sync(
        backend_for(NoisyJudge(0.05, seed=2024)),
        records,
        JudgeConfig(),
        StabilityOptions(runs=3, threshold=0.5),
    )
    strict = run_stability_sync(
        backend_for(NoisyJudge(0.05, seed=2024)), records, JudgeConfig(), StabilityOptions(runs=3)
    )
    assert loose.data["figures"] == strict.data["figures"]  # same seeded flips
    assert loose.passed and not strict.passed


def test_metric_option_checks_another_figure(dataset: Path) -> None:
    records = load_records(dataset)
    report = run_stability_sync(
        backend_for(NoisyJudge(0.05, seed=9)),
        records,
        JudgeConfig(),
        StabilityOptions(runs=2, metric="ndcg@5", threshold=1.0),
    )
    assert report.data["check"]["metric"] == "ndcg@5"
    assert report.data["check"]["relative_spread"] == report.data["figures"]["ndcg@5"]["relative_spread"]
    assert report.data["noise"]["metric"] == "ndcg@5"
    with pytest.raises(InputError, match="ndcg@7"):
        StabilityOptions(metric="ndcg@7")
    with pytest.raises(InputError, match="unknown metric"):
        StabilityOptions(metric="mrr_typo")


def test_graded_mode_uses_grades_and_ordinal_alpha(dataset: Path) -> None:
    records = load_records(dataset)
    report = run_stability_sync(
        backend_for(NoisyJudge(0.05, seed=3)), records, JudgeConfig(mode="graded"), StabilityOptions(runs=3)
    )
    agr = report.data["agreement"]
    assert agr["labels"] == "grade" and agr["alpha_level"] == "ordinal"
    table = np.array(
        [[float(v.grade or 0) for res in run.results for v in res.verdicts] for run in report.runs]
    )
    ref = krippendorff.alpha(
        reliability_data=table, level_of_measurement="ordinal", value_domain=[0, 1, 2, 3]
    )
    assert agr["krippendorff_alpha"] == pytest.approx(ref)
    assert all(set(row["labels"]) <= {"0", "1", "2", "3"} for row in report.data["unstable_passages"])


def test_probability_mode_records_p_yes(dataset: Path) -> None:
    records = load_records(dataset)
    report = run_stability_sync(
        backend_for(NoisyJudge(0.05, seed=4)),
        records,
        JudgeConfig(probability=True),
        StabilityOptions(runs=2),
    )
    rows = report.data["unstable_passages"]
    assert rows
    for r in rows:
        assert sorted(r["p_yes"]) == [pytest.approx(0.2), pytest.approx(0.8)]
        assert sorted(r["labels"]) == ["no", "yes"]


def test_unjudged_passages_are_labels_for_flips_and_missing_for_agreement(tmp_path: Path) -> None:
    path = write_dataset(tmp_path / "small.jsonl", n_queries=4, per_query=5)
    records = load_records(path)
    noisy = NoisyJudge(0.0)
    broken = "段落 2-3 "

    def script(request: ChatRequest, index: int) -> Reply:
        text = passage_of(request)
        # passage 2-3 gets garbage in the first run only (3 replies: ask + 2 re-asks)
        if text.startswith(broken) and noisy.seen[text] < 3:
            noisy.seen[text] += 1
            return "not json"
        return noisy(request, index)

    report = run_stability_sync(
        ScriptedBackend(script, max_concurrency=1), records, JudgeConfig(), StabilityOptions(runs=2)
    )
    agr = report.data["agreement"]
    assert agr["unjudged_ratings"] == 1
    assert agr["unstable_passages"] == 1 and agr["flip_rate"] == pytest.approx(1 / 20)
    assert agr["fleiss_subjects"] == 19
    assert report.data["runs"][0]["unjudged_passages"] == 1
    assert report.data["unstable_passages"][0]["labels"][0] == "unjudged"


def test_a_run_without_any_judged_passage_is_an_infinite_spread(tmp_path: Path) -> None:
    path = write_dataset(tmp_path / "tiny.jsonl", n_queries=2, per_query=2)
    records = load_records(path)
    good = NoisyJudge(0.0)

    def script(request: ChatRequest, index: int) -> Reply:
        return good(request, index) if index < 4 else "garbage"

    report = run_stability_sync(
        ScriptedBackend(script, max_concurrency=1), records, JudgeConfig(), StabilityOptions(runs=2)
    )
    chk = report.data["check"]
    assert chk["relative_spread"] is None and chk["spread_infinite"] is True and not chk["passed"]
    assert report.data["runs"][1]["map"] is None and report.data["runs"][1]["unjudged_queries"] == 2
    json.dumps(report.data, allow_nan=False)


def test_all_no_verdicts_mean_zero_is_a_zero_spread(tmp_path: Path) -> None:
    path = tmp_path / "none.jsonl"
    path.write_text(
        json.dumps({"id": "a", "query": "q", "retrieval_context": ["x", "y"]}) + "\n", encoding="utf-8"
    )
    records = load_records(path)

    def no(request: ChatRequest, _i: int) -> Reply:
        return json.dumps({"verdict": "no", "reason": "无关"}, ensure_ascii=False)

    report = run_stability_sync(ScriptedBackend(no), records, JudgeConfig(), StabilityOptions(runs=2))
    assert report.data["figures"]["map"]["mean"] == 0.0
    assert report.data["check"]["relative_spread"] == 0.0 and report.passed
    # one category only: kappa and alpha are undefined (null), not a crash
    assert report.data["agreement"]["fleiss_kappa"] is None
    assert report.data["agreement"]["krippendorff_alpha"] is None


def test_runs_are_parallel_unless_the_backend_takes_one_call(dataset: Path) -> None:
    records = load_records(dataset)[:4]
    serial = backend_for(NoisyJudge(0.0), max_concurrency=1, latency_s=0.001)
    run_stability_sync(serial, records, JudgeConfig(), StabilityOptions(runs=3))
    assert serial.max_in_flight == 1
    parallel = backend_for(NoisyJudge(0.0), max_concurrency=None, latency_s=0.001)
    report = run_stability_sync(parallel, records, JudgeConfig(), StabilityOptions(runs=3))
    assert parallel.max_in_flight > 10  # more than one query's passages at once
    assert report.data["settings"]["parallel_runs"] is True


def test_sync_and_async_agree(dataset: Path) -> None:
    records = load_records(dataset)[:6]
    a = run_stability_sync(
        backend_for(NoisyJudge(0.05, seed=8)), records, JudgeConfig(), StabilityOptions(runs=2)
    )
    b = asyncio.run(
        run_stability(backend_for(NoisyJudge(0.05, seed=8)), records, JudgeConfig(), StabilityOptions(runs=2))
    )
    for key in ("figures", "agreement", "noise", "check", "unstable_passages", "unstable_queries"):
        assert a.data[key] == b.data[key]


def test_bad_options_and_empty_dataset(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="at least 2 runs"):
        StabilityOptions(runs=1)
    with pytest.raises(InputError):
        StabilityOptions(threshold=-0.1)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(InputError, match="no queries"):
        load_records(empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "query": "q", "retrieval_context": []}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl:1: field 'retrieval_context'"):
        load_records(bad)


def test_write_report_files(dataset: Path, tmp_path: Path) -> None:
    records = load_records(dataset)
    report = run_stability_sync(
        backend_for(NoisyJudge(0.05, seed=5)), records, JudgeConfig(), StabilityOptions(runs=3)
    )
    paths = write_report(report, tmp_path / "rep")
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert data["schema"] == "judge.stability/1"
    assert set(data) >= {
        "created", "dataset", "backend", "judge_config", "settings", "conventions", "check",
        "runs", "figures", "agreement", "noise", "query_ranges", "unstable_queries",
        "unstable_passages", "plots",
    }  # fmt: skip
    assert len(data["query_ranges"]["ap"]) == 40
    for key in ("map_per_run", "query_ranges"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "**BREACH**" in md and "flip rate" in md and "Fleiss' kappa" in md
    assert "queries needed" in md and "map_per_run.png" in md


# ---- CLI ------------------------------------------------------------------------------------


def _patch_backend(monkeypatch: pytest.MonkeyPatch, judge: NoisyJudge) -> None:
    def fake_open(*_a: Any, **_k: Any) -> ScriptedBackend:
        return backend_for(judge)

    monkeypatch.setattr(stability_cli, "open_backend", fake_open)
    monkeypatch.setattr(stability_cli, "_describe", lambda b: b.name)


def test_cli_deterministic_passes_with_exit_0(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _patch_backend(monkeypatch, NoisyJudge(0.0))
    out = tmp_path / "report"
    code = main(["stability", str(dataset), "--runs", "3", "-o", str(out), "--quiet"])
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("PASS: mAP relative spread 0.00% over 3 runs")
    assert "BREACH" not in captured.err
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["run-0.jsonl", "run-1.jsonl", "run-2.jsonl"]
    assert (out / "report.json").exists() and (out / "map_per_run.png").exists()


def test_cli_flipping_judge_breaches_with_exit_1(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _patch_backend(monkeypatch, NoisyJudge(0.05, seed=2024))
    code = main(["stability", str(dataset), "--runs", "3", "--threshold", "0.01", "-o", str(tmp_path / "r")])
    assert code == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("BREACH: mAP relative spread")
    assert "flip rate" in captured.out
    assert re.search(
        r"^BREACH: judge stability: map relative spread [\d.]+% > threshold 1.00%", captured.err, re.M
    )


def test_cli_bad_input_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _patch_backend(monkeypatch, NoisyJudge(0.0))
    assert main(["stability", str(tmp_path / "missing.jsonl"), "--runs", "2"]) == 2
    dataset = write_dataset(tmp_path / "d.jsonl", n_queries=2, per_query=2)
    assert main(["stability", str(dataset), "--runs", "1"]) == 2
    assert main(["stability", str(dataset), "--metric", "ndcg@3"]) == 2


def test_progress_callbacks(dataset: Path) -> None:
    records = load_records(dataset)[:5]
    seen: list[tuple[int, int, int]] = []
    finished: list[int] = []
    run_stability_sync(
        backend_for(NoisyJudge(0.0)),
        records,
        JudgeConfig(),
        StabilityOptions(runs=2),
        on_query=lambda r, done, total: seen.append((r, done, total)),
        on_run=lambda run: finished.append(run.index),
    )
    assert finished == [0, 1]
    assert [s for s in seen if s[0] == 0] == [(0, i, 5) for i in range(1, 6)]
    assert len(seen) == 10
