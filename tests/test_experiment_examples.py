"""An experiment's example passages compare two configurations: the best on the objective
and the baseline, or the best and the runner-up when the best is the baseline; reasons on
request are asked for exactly the pairs that block shows. A comparison of systems still
shows every system, each in its own colour.

The experiments run on the bundled Chinese search data (b fixed at 0, k1 varied: three
configurations whose objectives differ), judged by the qrels-backed judge behind a wrapper
that prefers probabilities, as the embedded judge does, so verdicts come first and reasons
on request. Expected pairs are derived from the runs' TREC files and the per-query
objective on the experiment's pool.qrels."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _experiment_fixtures import Bundled, bundled, trec_rankings

from judge.backends import ChatRequest, Completion, RuleBackend, ensure_resilient, make_backend
from judge.io import join_run_qrels, read_qrels, read_run
from judge.judging import JudgeConfig
from judge.metrics import evaluate, parse_measure_args
from judge.systems import ComparisonReport, ExperimentOptions, SystemsOptions, run_experiment
from judge.systems._render import palette
from judge.systems._run import run_comparison

OBJECTIVE = "ndcg_cut_10"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    return bundled(tmp_path_factory.mktemp("bundled"))


class PreferringLLM:
    """The qrels-backed judge preferring probabilities; records every request."""

    prefers_probabilities = True

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.model = inner.name, inner.model
        self.supports_probabilities = True
        self.max_concurrency = 1
        self.requests: list[ChatRequest] = []

    def params(self) -> dict[str, Any]:
        return dict(self.inner.params())

    async def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        result: Completion = await self.inner.complete(request)
        return result

    async def aclose(self) -> None:
        return None

    @property
    def reasons(self) -> list[tuple[str, str]]:
        """(query id, docno) of each explaining request (a generation, no candidates)."""
        return [
            ((r.meta or {})["query_id"], (r.meta or {})["passage_id"])
            for r in self.requests
            if not r.candidates
        ]


async def _experiment(
    data: Bundled, out: Path, k1: str, *, top_queries: int = 10, top_passages: int = 5
) -> tuple[ComparisonReport, PreferringLLM]:
    llm = PreferringLLM(make_backend(f"qrels:{data.qrels}").inner)
    comparison = await run_experiment(
        data.queries,
        out,
        make_backend(llm),
        JudgeConfig(),
        experiment=ExperimentOptions(configs=(data.config,), grid=(k1,), overrides=("b=0",)),
        options=SystemsOptions(
            resamples=200, stability_resamples=0, top_queries=top_queries, top_passages=top_passages
        ),
    )
    return comparison, llm


def _objectives(comparison: ComparisonReport) -> dict[str, float]:
    e = comparison.report.experiment
    assert e is not None
    return {c.name: float(c.objective) for c in e.configurations if c.objective is not None}


def _columns(html: str) -> list[list[str]]:
    """The system names of each query block's columns, block by block."""
    blocks = html.split('<div class="query"')[1:]
    return [
        re.findall(r'<div class="col"><h4 style="color:#[0-9a-f]{6};margin:\.2em 0">([^<]+) <span', b)
        for b in blocks
    ]


def _per_query(out: Path, name: str) -> dict[str, float]:
    (m,) = parse_measure_args([OBJECTIVE])
    ev = evaluate([m], join_run_qrels(read_qrels(out / "pool.qrels"), read_run(out / "runs" / f"{name}.run")))
    return dict(zip(ev.qids, ev.query_scores(m), strict=True))


def _check_two_columns(
    comparison: ComparisonReport, out: Path, first: str, second: str, heading: str
) -> None:
    html = (out / "report.html").read_text(encoding="utf-8")
    assert f'<h2 id="queries">{heading}</h2>' in html
    columns = _columns(html)
    assert columns and all(c == [first, second] for c in columns)
    assert [s["name"] for q in comparison.differences()["queries"] for s in q["systems"]] == [
        first,
        second,
    ] * len(columns)
    # the report read back from its folder shows the same block
    assert _columns(ComparisonReport.load(out).html()) == columns


async def test_best_against_the_baseline(data: Bundled, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    comparison, _ = await _experiment(data, out, "k1=0.2,1.2,3.0")
    objectives = _objectives(comparison)
    names = list(objectives)
    assert len(names) == 3 and len(set(objectives.values())) == 3
    baseline, best = names[0], max(objectives, key=lambda n: objectives[n])
    assert best != baseline and comparison.report.experiment is not None
    assert comparison.report.experiment.best == best
    _check_two_columns(
        comparison,
        out,
        best,
        baseline,
        f"Queries where the best ({best}) and the baseline ({baseline}) differ most",
    )


async def test_best_is_the_baseline_then_the_runner_up(data: Bundled, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    comparison, _ = await _experiment(data, out, "k1=1.2,0.2,3.0")
    objectives = _objectives(comparison)
    names = list(objectives)
    best = max(objectives, key=lambda n: objectives[n])
    assert best == names[0]  # the baseline
    runner_up = max(names[1:], key=lambda n: objectives[n])
    assert objectives[runner_up] > min(objectives[n] for n in names[1:])  # no tie decides it
    _check_two_columns(
        comparison,
        out,
        best,
        runner_up,
        f"Queries where the best, the baseline ({best}), and the runner-up ({runner_up}) differ most",
    )


async def test_reasons_asked_for_exactly_the_pairs_shown(data: Bundled, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    top_passages = 3
    comparison, llm = await _experiment(
        data, out, "k1=0.2,1.2,3.0", top_queries=50, top_passages=top_passages
    )
    objectives = _objectives(comparison)
    names = list(objectives)
    baseline, best = names[0], max(objectives, key=lambda n: objectives[n])
    e = comparison.report.experiment
    assert e is not None
    trec = {c.name: trec_rankings(Path(str(c.trec)), top_passages) for c in e.configurations}
    # by hand: every query on which the two differ (top_queries exceeds the query set), each
    # one's top 3 passages; every corpus pair has a label, so each is judged and lacks a reason
    best_q, base_q = _per_query(out, best), _per_query(out, baseline)
    differing = [q for q in best_q if best_q[q] != base_q[q]]
    assert differing
    expected = {(q, d) for q in differing for d in trec[best][q] + trec[baseline][q]}
    assert sorted(llm.reasons) == sorted(expected)  # each asked once
    # the block of every configuration would have asked more
    everyone = {q for q in best_q if len({_per_query(out, n)[q] for n in names}) > 1}
    assert len({(q, d) for q in everyone for n in names for d in trec[n][q]}) > len(expected)
    # and the report shows each of them with its reason
    shown = {
        (q["id"], p["docno"]): p["reason"]
        for q in comparison.differences()["queries"]
        for s in q["systems"]
        for p in s["passages"]
    }
    assert shown.keys() == expected and all(shown.values())
    # a verdict pass and a reason per pair shown, beside one verdict per pooled pair
    assert e.calls == e.pairs + 2 * len(expected)


# ---------------------------------------------------------------------------- compare-systems
def _nine_systems(tmp_path: Path) -> dict[str, Path]:
    """Nine systems over 3 queries: system i ranks i relevant passages (of 9) first."""
    paths: dict[str, Path] = {}
    for i in range(9):
        rows = []
        for q in range(3):
            rel = [{"id": f"q{q}-r{j}", "text": f"查询 {q} 的相关段落 {j} RELEVANT"} for j in range(i)]
            irr = [{"id": f"q{q}-n{j}", "text": f"查询 {q} 的无关段落 {j}"} for j in range(9 - i)]
            rows.append({"id": f"q{q}", "query": f"第 {q} 个问题", "retrieval_context": rel + irr})
        paths[f"s{i}"] = tmp_path / f"s{i}.jsonl"
        paths[f"s{i}"].write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    return paths


async def test_compare_systems_still_shows_every_system_in_its_own_colour(tmp_path: Path) -> None:
    systems = _nine_systems(tmp_path)
    asked: list[ChatRequest] = []
    keyword = RuleBackend.keyword("RELEVANT")

    def rule(request: ChatRequest) -> Any:
        asked.append(request)
        return keyword.rule(request)

    backend = ensure_resilient(RuleBackend(rule, prefers_probabilities=True))
    comparison = await run_comparison(
        systems,
        tmp_path / "out",
        backend,
        JudgeConfig(),
        options=SystemsOptions(top_passages=2, resamples=200),
    )
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert '<h2 id="queries">Queries where the systems differ most</h2>' in html
    columns = _columns(html)
    assert len(columns) == 3 and all(c == list(systems) for c in columns)
    block = html.split('<div class="query"')[1]
    colors = re.findall(r'<h4 style="color:(#[0-9a-f]{6})', block)
    assert len(colors) == len(set(colors)) == 9 and colors[:8] == palette(8)
    # reasons for every system's top 2 on each query: s0 shows two irrelevant passages, s1 one
    # relevant and one irrelevant, s2..s8 the same two relevant ones: 4 distinct pairs a query
    reasons = [((r.meta or {})["query_id"], (r.meta or {})["passage_id"]) for r in asked if not r.candidates]
    assert sorted(reasons) == sorted(
        (f"q{q}", f"q{q}-{d}") for q in range(3) for d in ("n0", "n1", "r0", "r1")
    )
    # a verdict per pooled pair (8 relevant + 9 irrelevant a query), then a verdict pass and a
    # reason per pair shown
    assert comparison.report.pool.calls == len(asked) == 3 * 17 + 2 * 12


def test_palette_never_repeats() -> None:
    for n in (0, 1, 8, 9, 40, 300):
        colors = palette(n)
        assert len(colors) == n == len(set(colors))
        assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colors)
    assert palette(9)[:8] == palette(8)
