"""The stability harness: judge one dataset K times and measure how much the figures move.

What a stability run does
-------------------------
1. Judge every query of the dataset ``runs`` times with the *same* :class:`JudgeConfig`
   and **no verdict cache** (``store=None``), through the batch driver
   (:class:`judge.batch.BatchDriver`, one planned query per run and query): the harness
   measures the judge, not the cache. Runs go in parallel when the backend allows it
   (``backend.max_concurrency`` is None or > 1; the embedded model's 4 calls in flight
   share one model, whose probabilities do not depend on what ran before); with
   ``max_concurrency == 1`` they run one after the other. At most ``concurrency`` queries
   are in flight over all runs.
2. Keep every run's verdicts (``runs/run-<i>.jsonl``: one line per query, the full
   :class:`JudgeResult`), written as soon as the run completes. Human labels decide their
   passages in every run; with ``RunSpec.adapt`` each finished run is first decided by the
   rule the same labels teach (:mod:`judge.stability._decisions`), so every figure below
   measures the adapted verdicts.
3. Per run: mAP (mean AP), mean score, mean NDCG@k over the queries, and a bootstrap
   interval of the checked figure over queries.
4. Across runs: relative spread ``(max - min) / mean`` and coefficient of variation of each
   figure; the per-passage verdict flip rate; Fleiss' kappa and Krippendorff's alpha with
   the runs as raters; the least stable queries and passages.
5. Judge noise beside query-sampling noise (``_noise``), and the pass/fail check:
   the relative spread of the checked figure (``map`` by default) must be ``<= threshold``.

Steps 3 to 5 and the conventions they follow are :func:`analyse`
(:mod:`judge.stability._analysis`); the options and the report are in
:mod:`judge.stability._stability_types`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judge.backends import DEFAULT_CONCURRENCY, Backend, backend_fingerprint
from judge.batch import (
    BatchDriver,
    Executor,
    LocalExecutor,
    QueryWork,
    RunSpec,
    check_adapt,
    executor_for,
)
from judge.io import DatasetRecord, InputError, read_dataset
from judge.judging import (
    JudgeConfig,
    JudgeResult,
    Passage,
    PassageVerdict,
    bind_language,
    check_probability,
    check_templates,
    resolve_config,
    summarize,
)
from judge.stability._analysis import analyse
from judge.stability._decisions import Decisions
from judge.stability._figures import StabilityMetric, parse_metric
from judge.stability._stability_types import (
    REPORT_SCHEMA,
    RunResult,
    StabilityOptions,
    StabilityReport,
    run_file_name,
)
from judge.store import atomic_write_lines

__all__ = [
    "REPORT_SCHEMA",
    "RunResult",
    "StabilityMetric",
    "StabilityOptions",
    "StabilityReport",
    "analyse",
    "load_records",
    "parse_metric",
    "run_stability",
    "run_stability_sync",
]

DEFAULT_QUERY_CONCURRENCY = DEFAULT_CONCURRENCY
"""Queries in flight over all runs when neither the caller nor the backend sets a limit
(the call policy's one default)."""

# ---------------------------------------------------------------------------------------
# Reading the dataset (one function, so the reader can be switched in one place)


def load_records(path: str | Path) -> list[DatasetRecord]:
    """Read a JSONL dataset strictly (the first bad line raises its InputError)."""
    records = read_dataset(path)
    if not records:
        raise InputError("the dataset has no queries", path=str(path))
    return records


# ---------------------------------------------------------------------------------------
# Running


def _passages(record: DatasetRecord) -> list[Passage]:
    return [Passage(text=p.text, id=p.id, truncated=p.truncated, query_id=record.id) for p in record.passages]


def _run_lines(run: RunResult, records: Sequence[DatasetRecord]) -> list[dict[str, Any]]:
    return [
        {"run": run.index, "id": rec.id, **res.model_dump(mode="json")}
        for rec, res in zip(records, run.results, strict=True)
    ]


@dataclass(eq=False)
class _Runs:
    """The commit side of a stability run: each run's results by query, finished runs
    written to ``runs/run-<i>.jsonl`` and reported as soon as their last query commits."""

    backend: Backend
    records: Sequence[DatasetRecord]
    config: JudgeConfig
    options: StabilityOptions
    decisions: Decisions
    out_dir: Path | None
    on_run: Callable[[RunResult], None] | None
    on_query: Callable[[int, int, int], None] | None
    results: list[list[JudgeResult | None]] = field(init=False)
    done: list[int] = field(init=False)
    started: dict[int, float] = field(init=False, default_factory=dict)
    finished: dict[int, RunResult] = field(init=False, default_factory=dict)
    bound: dict[int, JudgeConfig] = field(init=False, default_factory=dict)
    lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.results = [[None] * len(self.records) for _ in range(self.options.runs)]
        self.done = [0] * self.options.runs

    def plan(self, run_indices: Sequence[int]) -> Iterator[QueryWork]:
        """Every query of each run in ``run_indices``, run after run (FIFO: earlier runs
        finish first)."""
        for run_index in run_indices:
            for q, record in enumerate(self.records):
                self.started.setdefault(run_index, time.perf_counter())
                yield QueryWork.fresh(record.query, _passages(record), (run_index, q))

    def _result(self, q: int, verdicts: list[PassageVerdict]) -> JudgeResult:
        return summarize(
            self.records[q].query,
            self.decisions.labelled(self.records[q], verdicts),
            self.bound[q],
            self.backend.name,
            k=self.options.k,
            qrels=None,  # IDCG from the judged list: the harness measures the judge alone
        )

    async def _adapt(self, run_index: int) -> None:
        """``--adapt``: the finished run decided again by the labels' rule (one at a time,
        off the event loop: the other runs' calls go on)."""
        results = [r for r in self.results[run_index] if r is not None]
        async with self.lock:
            decided = await asyncio.to_thread(self.decisions.adapted, run_index, results)
        adapted: list[JudgeResult | None] = [self._result(q, v) for q, v in enumerate(decided)]
        self.results[run_index] = adapted

    async def commit(self, work: QueryWork, verdicts: list[PassageVerdict]) -> None:
        run_index, q = work.payload
        self.bound[q] = bind_language(self.config, work.query, language=work.language)
        self.results[run_index][q] = self._result(q, verdicts)
        self.done[run_index] += 1
        if self.on_query is not None:
            self.on_query(run_index, self.done[run_index], len(self.records))
        if self.done[run_index] == len(self.records):
            if self.decisions.adapt:
                await self._adapt(run_index)
            results = tuple(r for r in self.results[run_index] if r is not None)
            run = RunResult(run_index, results, time.perf_counter() - self.started[run_index])
            self.finished[run_index] = run
            if self.out_dir is not None:
                atomic_write_lines(self.out_dir / run_file_name(run_index), _run_lines(run, self.records))
            if self.on_run is not None:
                self.on_run(run)


async def run_stability(
    backend: Backend,
    records: Sequence[DatasetRecord],
    config: JudgeConfig | RunSpec,
    options: StabilityOptions = StabilityOptions(),  # noqa: B008  # frozen dataclass: safe default
    *,
    dataset: str = "",
    backend_description: str | None = None,
    runs_dir: str | Path | None = None,
    on_run: Callable[[RunResult], None] | None = None,
    on_query: Callable[[int, int, int], None] | None = None,
    executor: Executor | None = None,
) -> StabilityReport:
    """Judge ``records`` ``options.runs`` times (cache bypassed) and analyse the runs.

    The runs go through the batch driver (:class:`judge.batch.BatchDriver`) with no
    store: every (run, query) is one planned query, committed into its run. At most
    ``concurrency`` queries are in flight over all runs, and each query's passages are
    bounded by ``backend.max_concurrency`` (the executor's window is their product).
    ``executor``: who judges (default a :class:`~judge.batch.LocalExecutor` over
    ``backend``; the caller owns it). ``config``: a :class:`JudgeConfig`, or the run's
    :class:`~judge.batch.RunSpec`, taken as is (its config; its ``window``, when set, over
    the product above; a Ray engine's executor when no ``executor`` is given). Its ``adapt``
    (``--adapt``): every run decided by the rule ``options.labels`` teach (features:
    ``options.adapt_features``), refused before any call as ``judge score`` refuses it.

    ``runs_dir``: where ``run-<i>.jsonl`` is written as each run completes. ``on_run`` is
    called with each finished run, ``on_query(run_index, done, total)`` after each judged
    query (progress). A :class:`PermanentError` from the backend
    stops everything and propagates; transient failures become unjudged verdicts.
    """
    if not records:
        raise InputError("the dataset has no queries", path=dataset or None)
    spec = config if isinstance(config, RunSpec) else RunSpec(config=config)
    config = resolve_config(spec.config, backend)  # the report echoes the settings in force
    check_probability(backend, config)
    check_templates(config)  # fail fast on a bad template, before any call
    if spec.adapt:
        check_adapt(config, labels=options.labels, examples_active=spec.examples.active)
    elif options.adapt_features is not None:
        raise InputError("is only used with adapt (RunSpec.adapt, --adapt)", field="adapt_features")
    limit = options.concurrency or backend.max_concurrency or DEFAULT_QUERY_CONCURRENCY
    per_query = backend.max_concurrency or max(len(r.passages) for r in records) or 1
    out_dir = Path(runs_dir) if runs_dir is not None else None
    decisions = Decisions(  # labels checked here, before any call
        records,
        config,
        labels=options.labels,
        level=options.labels_level,
        yes_grade=options.labels_yes_grade,
        k=options.k,
        adapt=spec.adapt,
        features=options.adapt_features,
    )
    runs = _Runs(backend, records, config, options, decisions, out_dir, on_run, on_query)
    own = executor_for(spec, backend) if executor is None else None
    window = spec.window if spec.window is not None else limit * per_query
    driver = BatchDriver(
        executor or own or LocalExecutor(backend, window=window),
        config,
        store=None,
        max_queries=limit,
    )
    sequential = backend.max_concurrency == 1
    try:
        if sequential:
            for index in range(options.runs):
                await driver.run(runs.plan([index]), runs.commit)
        else:
            await driver.run(runs.plan(range(options.runs)), runs.commit)
    finally:
        if own is not None:
            await own.aclose()
    report = analyse(
        [runs.finished[i] for i in range(options.runs)],
        records,
        config,
        options,
        dataset=dataset,
        backend=backend_description or backend.name,
        runs_dir=out_dir,
        parallel_runs=not sequential,
        fingerprint=backend_fingerprint(backend),
    )
    report.data.update(decisions.echo(options.runs))
    if spec.adapt:
        report.data["settings"]["adapt"] = True
    return report


def run_stability_sync(
    backend: Backend,
    records: Sequence[DatasetRecord],
    config: JudgeConfig | RunSpec,
    options: StabilityOptions = StabilityOptions(),  # noqa: B008  # frozen dataclass: safe default
    **kwargs: Any,
) -> StabilityReport:
    """Blocking wrapper of :func:`run_stability` (``asyncio.run``)."""
    return asyncio.run(run_stability(backend, records, config, options, **kwargs))
