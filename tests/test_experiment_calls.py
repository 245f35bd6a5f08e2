"""An experiment's calls and pairs, told apart and counted over the whole experiment (every
run of it in its folder, across an interruption and a resume), and its report with the
answer first: the title, the best, its interval and test, rounded figures."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from _experiment_fixtures import Bundled, bundled, trec_rankings

from judge.backends import ChatRequest, Completion, make_backend
from judge.batch import run_spec_from_kwargs
from judge.judging import JudgeConfig
from judge.store import SQLiteVerdictStore
from judge.systems import ComparisonReport, ExperimentOptions, PoolRun, SystemsOptions, run_experiment

GRID = ("k1=3.0,1.2,0.2",)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    return bundled(tmp_path_factory.mktemp("bundled"))


class CountingLLM:
    """The qrels-backed judge behind a counter of the calls it sees; with ``hang_at``, the
    call of that number never answers (the run is interrupted while it waits)."""

    def __init__(self, inner: Any, hang_at: int | None = None) -> None:
        self.inner = inner
        self.name, self.model = inner.name, inner.model
        self.supports_probabilities = inner.supports_probabilities
        self.max_concurrency = 1
        self.seen = 0
        self.hang_at = hang_at
        self.hanging = asyncio.Event()

    def params(self) -> dict[str, Any]:
        return dict(self.inner.params())

    async def complete(self, request: ChatRequest) -> Completion:
        self.seen += 1
        if self.seen == self.hang_at:
            self.hanging.set()
            await asyncio.Event().wait()  # until cancelled
        result: Completion = await self.inner.complete(request)
        return result

    async def aclose(self) -> None:
        return None


async def _experiment(
    data: Bundled, out: Path, llm: CountingLLM, cache: Path, depth: int | None = None
) -> Any:
    spec = run_spec_from_kwargs(concurrency=1)
    backend = make_backend(llm, policy=spec.policy)
    store = SQLiteVerdictStore(cache)
    try:
        return await run_experiment(
            data.queries,
            out,
            backend,
            JudgeConfig(),
            experiment=ExperimentOptions(configs=(data.config,), grid=GRID),
            store=store,
            options=SystemsOptions(depth=depth, resamples=200, stability_resamples=0),
            pool_run=PoolRun(spec=spec),
        )
    finally:
        await store.aclose()


def _qrels_judge(data: Bundled) -> Any:
    return make_backend(f"qrels:{data.qrels}").inner


async def test_interrupted_then_resumed_reports_every_call_the_llm_saw(data: Bundled, tmp_path: Path) -> None:
    out, cache = tmp_path / "exp", tmp_path / "cache.sqlite"
    first = CountingLLM(_qrels_judge(data), hang_at=40)
    task = asyncio.create_task(_experiment(data, out, first, cache))
    await asyncio.wait_for(first.hanging.wait(), timeout=60)
    task.cancel()  # Ctrl-C while call 40 is with the LLM
    with pytest.raises(asyncio.CancelledError):
        await task
    assert first.seen == 40
    ledger = json.loads((out / "calls.json").read_text(encoding="utf-8"))
    (entry,) = ledger["experiments"].values()
    assert entry["calls"] == 40 and entry["runs"][0]["finished"] is False
    assert not (out / "report.json").exists()
    again = CountingLLM(_qrels_judge(data))
    comparison = await _experiment(data, out, again, cache)
    e = comparison.report.experiment
    assert e is not None
    # the pair of call 40 was never answered: asked again, so the LLM saw 40 + the rest
    assert again.seen == e.pairs - 39
    assert e.calls == first.seen + again.seen
    assert e.calls_this_run == again.seen
    assert e.calls_per_pair == pytest.approx(e.calls / e.pairs, abs=1e-6)
    # run once more: nothing is asked, the experiment's calls stay what the LLM saw
    third = CountingLLM(_qrels_judge(data))
    e3 = (await _experiment(data, out, third, cache)).report.experiment
    assert e3 is not None and third.seen == 0
    assert (e3.calls, e3.calls_this_run) == (first.seen + again.seen, 0)


async def test_nominal_is_configurations_queries_and_the_depth_pooled(data: Bundled, tmp_path: Path) -> None:
    llm = CountingLLM(_qrels_judge(data))
    comparison = await _experiment(data, tmp_path / "exp", llm, tmp_path / "cache.sqlite", depth=5)
    report = comparison.report
    e = report.experiment
    assert e is not None
    queries = len(data.queries.read_text(encoding="utf-8").splitlines())
    assert e.nominal_pairs == 3 * queries * 5 and e.depth == 5  # not the configurations' depth 10
    pooled: set[tuple[str, str]] = set()
    for c in e.configurations:
        assert c.trec is not None
        pooled |= {(q, d) for q, docs in trec_rankings(Path(c.trec), 5).items() for d in docs}
    assert e.pairs == len(pooled) == report.pool.judged + report.pool.unjudged
    assert e.calls == llm.seen == len(pooled)  # the qrels judge: one call per pair
    assert e.pairs_ratio == pytest.approx(len(pooled) / e.nominal_pairs, abs=1e-6)
    assert e.calls_per_pair == 1.0


async def test_report_gives_the_answer_first_with_rounded_figures(data: Bundled, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    comparison = await _experiment(data, out, CountingLLM(_qrels_judge(data)), tmp_path / "cache.sqlite")
    e = comparison.report.experiment
    assert e is not None and e.best is not None and e.best_value is not None
    md = (out / "report.md").read_text(encoding="utf-8")
    lines = md.splitlines()
    assert lines[0] == f"# Search experiment: queries.zh.jsonl, {len(e.configurations)} configurations"
    best = next(i for i, line in enumerate(lines) if line.startswith("Best on ndcg_cut_10"))
    assert best < 10
    ci = comparison.report.systems[e.best].ci["ndcg_cut_10"]
    assert ci is not None
    assert f"**{e.best}**, {e.best_value:.4f} (95% interval {ci[0]:.4f} to {ci[1]:.4f})" in lines[best]
    assert e.best != e.configurations[0].name
    baseline = e.configurations[0]
    assert baseline.objective is not None
    diff = e.best_value - baseline.objective
    assert f"Against the baseline: better by {diff:+.4f} than {baseline.name}" in lines[best]
    calls = next(i for i, line in enumerate(lines) if line.startswith("Pairs: "))
    table = lines.index("## Experiment")
    pairwise = next(i for i, line in enumerate(lines) if line.startswith("## Each configuration against"))
    assert best < calls < table < pairwise < lines.index("## Pool")
    # no figure printed with more than 4 decimals (hashes and the conventions block aside)
    prose = md.split("## Conventions")[0]
    assert not re.findall(r"(?<![\w.])\d+\.\d{5,}", prose)
    html = ComparisonReport.load(out).html()
    assert f"<h1>Search experiment: queries.zh.jsonl, {len(e.configurations)} configurations</h1>" in html
    assert html.index('id="best"') < html.index('id="experiment"') < html.index('id="pairwise"')


def test_progress_lines_name_the_experiment(
    data: Bundled, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from judge.cli import main

    code = main(["experiment", str(data.queries), "--config", str(data.config), "--grid", "k1=0.6,1.2",
                 "--backend", f"qrels:{data.qrels}", "--cache", str(tmp_path / "c.sqlite"),
                 "--resamples", "200", "-o", str(tmp_path / "exp")])  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err  # not a TTY: plain progress lines
    progress = [line for line in err.splitlines() if " queries (" in line]
    assert progress and all(line.startswith("judge experiment: ") for line in progress), err
    assert "compare-systems" not in err
    closing = err.splitlines()[-1]
    assert re.search(r"best bm25-k1_\S+ \(ndcg_cut_10 \d\.\d{4}\)", closing), closing
