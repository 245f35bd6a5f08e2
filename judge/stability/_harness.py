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
5. Judge noise beside query-sampling noise (see :func:`_noise`), and the pass/fail check:
   the relative spread of the checked figure (``map`` by default) must be ``<= threshold``.

Conventions (echoed under ``conventions`` in the report)
--------------------------------------------------------
* NDCG@k takes its IDCG from the run's own judged list; the dataset's qrels/expected ids
  are not used (they are ground truth about the passages, not about the judge), so every
  figure depends on the judge's verdicts only.
* A query none of whose passages could be judged (AP None) is left out of that run's
  averages; the count is reported per run as ``unjudged_queries``.
* A passage's *label* in a run is its verdict (``yes``/``no``/``unjudged``) in binary mode
  and its grade (``0``-``3``/``unjudged``) in graded mode. The flip rate counts a passage as
  unstable when its label is not identical in every run (``unjudged`` is a label here).
* Agreement statistics treat ``unjudged`` as a missing rating: Fleiss' kappa uses only the
  passages judged in every run; Krippendorff's alpha (nominal for binary, ordinal for
  graded) uses all ratings, missing ones left out.
* Relative spread with a zero mean: 0 if all runs are equal, else infinite (a breach).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from judge.backends import DEFAULT_CONCURRENCY, Backend, backend_fingerprint
from judge.batch import (
    BatchDriver,
    Executor,
    FeatureFn,
    LocalExecutor,
    QueryWork,
    RunSpec,
    check_adapt,
    executor_for,
)
from judge.io import DatasetRecord, InputError, read_dataset
from judge.judging import (
    DEFAULT_BORDERLINE_MARGIN,
    LANGUAGES,
    JudgeConfig,
    JudgeResult,
    Passage,
    PassageVerdict,
    bind_language,
    check_probability,
    check_templates,
    is_borderline,
    resolve_config,
    summarize,
)
from judge.stability._decisions import Decisions
from judge.stability._figures import (
    MAP_FIGURE,
    SCORE_FIGURE,
    StabilityMetric,
    figure_metrics,
    parse_metric,
)
from judge.stability._stats import (
    Interval,
    bootstrap_mean_ci,
    coefficient_of_variation,
    deviation_rate,
    fleiss_kappa_from_labels,
    flip_rate,
    krippendorff_alpha,
    queries_needed,
    relative_spread,
    value_range,
)
from judge.store import LabelSet, atomic_write_lines

if TYPE_CHECKING:
    from judge.metrics import AlphaLevel

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

REPORT_SCHEMA = "judge.stability/1"
"""The ``schema`` value of ``report.json``; bumped when a key changes meaning or goes away."""

DEFAULT_QUERY_CONCURRENCY = DEFAULT_CONCURRENCY
"""Queries in flight over all runs when neither the caller nor the backend sets a limit
(the call policy's one default)."""

# ---------------------------------------------------------------------------------------
# Options and results


@dataclass(frozen=True, slots=True)
class StabilityOptions:
    """How a stability run is made and checked.

    ``runs``: judgments of the whole dataset (>= 2). ``threshold``: the largest allowed
    relative spread of ``metric`` (``map``, ``score``, ``ndcg@K`` or a registry measure such as
    ``P@3``). ``k``: NDCG cutoffs.
    ``concurrency``: queries in flight over all runs (default: the backend's
    ``max_concurrency``, else 16). ``confidence``/``bootstrap_resamples``/``bootstrap_seed``:
    the bootstrap over queries. ``top``: how many least stable queries and passages to list.
    """

    runs: int = 3
    threshold: float = 0.01
    metric: str = "map"
    k: tuple[int, ...] = (5, 10)
    concurrency: int | None = None
    confidence: float = 0.95
    bootstrap_resamples: int = 2000
    bootstrap_seed: int = 0
    top: int = 10
    borderline_margin: float = DEFAULT_BORDERLINE_MARGIN
    # human labels decide their passages in every run (the judge's verdict is replaced, so
    # they neither flip nor move the figures); level / yes_grade: the stated scale mapping
    labels: LabelSet | None = None
    labels_level: int | None = None
    labels_yes_grade: int | None = None
    # ``RunSpec.adapt``: extra feature columns of the labels' rule (judge.batch.FeatureFn;
    # the CLI's is the encoder's relevance feedback); None: the judge's log-odds only
    adapt_features: FeatureFn | None = None

    def __post_init__(self) -> None:
        if isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 2:
            raise InputError("a stability run needs at least 2 runs", field="--runs")
        if not math.isfinite(self.threshold) or self.threshold < 0:
            raise InputError("must be a finite number >= 0", field="--threshold")
        if not self.k or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in self.k):
            raise InputError("cutoffs must be positive integers", field="-k")
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError("must be >= 1", field="--concurrency")
        if not 0.0 < self.confidence < 1.0:
            raise InputError("must be in (0, 1)", field="--confidence")
        if self.bootstrap_resamples < 1:
            raise InputError("must be >= 1", field="--bootstrap")
        if self.top < 0:
            raise InputError("must be >= 0", field="--top")
        if not 0.0 <= self.borderline_margin <= 1.0:
            raise InputError("must be within [0, 1]", field="--borderline-margin")
        parse_metric(self.metric, self.k)

    @property
    def checked(self) -> StabilityMetric:
        return parse_metric(self.metric, self.k)


@dataclass(frozen=True, slots=True)
class RunResult:
    """One judgment of the whole dataset: results in dataset order."""

    index: int
    results: tuple[JudgeResult, ...]
    elapsed_s: float

    def figure(self, metric: StabilityMetric) -> float:
        """Mean of the per-query values over the queries that have one (nan if none)."""
        values = [v for v in (metric.per_query(r) for r in self.results) if v is not None]
        return float(np.mean(values)) if values else math.nan


@dataclass(frozen=True)
class StabilityReport:
    """A finished stability run. ``data`` is exactly what ``report.json`` holds."""

    data: dict[str, Any]
    runs: tuple[RunResult, ...]
    records: tuple[DatasetRecord, ...]
    config: JudgeConfig
    options: StabilityOptions
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.data["check"]["passed"])

    @property
    def exit_code(self) -> int:
        """0 when the check passed, 1 on a breach."""
        return 0 if self.passed else 1

    @property
    def spread(self) -> float:
        """Relative spread of the checked figure (``inf`` when unbounded)."""
        value = self.data["check"]["relative_spread"]
        return math.inf if value is None else float(value)


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


def run_file_name(index: int) -> str:
    return f"run-{index}.jsonl"


def _run_lines(run: RunResult, records: Sequence[DatasetRecord]) -> list[dict[str, Any]]:
    return [
        {"run": run.index, "id": rec.id, **res.model_dump(mode="json")}
        for rec, res in zip(records, run.results, strict=True)
    ]


class _Runs:
    """The commit side of a stability run: each run's results by query, finished runs
    written to ``runs/run-<i>.jsonl`` and reported as soon as their last query commits."""

    def __init__(
        self,
        backend: Backend,
        records: Sequence[DatasetRecord],
        config: JudgeConfig,
        options: StabilityOptions,
        decisions: Decisions,
        out_dir: Path | None,
        on_run: Callable[[RunResult], None] | None,
        on_query: Callable[[int, int, int], None] | None,
    ) -> None:
        self.backend = backend
        self.records = records
        self.config = config
        self.options = options
        self.out_dir = out_dir
        self.on_run = on_run
        self.on_query = on_query
        self.results: list[list[JudgeResult | None]] = [[None] * len(records) for _ in range(options.runs)]
        self.done = [0] * options.runs
        self.started: dict[int, float] = {}
        self.finished: dict[int, RunResult] = {}
        self.decisions = decisions
        self.bound: dict[int, JudgeConfig] = {}
        self.lock = asyncio.Lock()

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
    options: StabilityOptions = StabilityOptions(),
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
    options: StabilityOptions = StabilityOptions(),
    **kwargs: Any,
) -> StabilityReport:
    """Blocking wrapper of :func:`run_stability` (``asyncio.run``)."""
    return asyncio.run(run_stability(backend, records, config, options, **kwargs))


# ---------------------------------------------------------------------------------------
# Analysis (pure: runs in, report dict out)


def _num(value: float | None) -> float | None:
    """JSON-safe float: nan and inf become None (the report documents when that happens)."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _sd(values: Sequence[float] | np.ndarray[Any, np.dtype[np.float64]]) -> float:
    """Sample standard deviation (ddof=1); exactly 0 when all values are equal or < 2."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 2 or float(arr.max() - arr.min()) == 0.0:
        return 0.0
    return float(arr.std(ddof=1))


def _figure_summary(values: Sequence[float]) -> dict[str, Any]:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) != len(values) or not finite:
        return {
            "values": [_num(v) for v in values],
            "mean": None,
            "min": None,
            "max": None,
            "range": None,
            "sd": None,
            "relative_spread": None,
            "cv": None,
        }
    arr = np.asarray(finite, dtype=np.float64)
    return {
        "values": [float(v) for v in finite],
        "mean": float(arr.mean()),
        "min": float(arr.min()),
        "max": float(arr.max()),
        "range": value_range(arr),
        "sd": _sd(arr),
        "relative_spread": _num(relative_spread(arr)),
        "cv": _num(coefficient_of_variation(arr)),
    }


def _interval_dict(iv: Interval) -> dict[str, Any]:
    return {
        "estimate": _num(iv.estimate),
        "low": _num(iv.low),
        "high": _num(iv.high),
        "half_width": _num(iv.half_width),
        "se": _num(iv.se),
        "n_queries": iv.n,
        "confidence": iv.confidence,
    }


Label = str


def _label(result: JudgeResult, index: int, mode: str) -> Label:
    v = result.verdicts[index]
    if v.verdict == "unjudged":
        return "unjudged"
    if mode == "graded":
        return str(v.grade)
    return v.verdict


def _labels(runs: Sequence[RunResult], records: Sequence[DatasetRecord], mode: str) -> list[list[Label]]:
    """runs x passages labels, passages in dataset order (query by query)."""
    table: list[list[Label]] = []
    for run in runs:
        row: list[Label] = []
        for rec, res in zip(records, run.results, strict=True):
            if len(res.verdicts) != len(rec.passages):
                raise ValueError(
                    f"query {rec.id}: {len(res.verdicts)} verdicts for {len(rec.passages)} passages"
                )
            row.extend(_label(res, i, mode) for i in range(len(rec.passages)))
        table.append(row)
    return table


def _agreement(labels: list[list[Label]], mode: str) -> dict[str, Any]:
    n_passages = len(labels[0]) if labels else 0
    cols = [[row[j] for row in labels] for j in range(n_passages)]
    complete = [j for j, col in enumerate(cols) if "unjudged" not in col]
    categories = ["0", "1", "2", "3"] if mode == "graded" else ["no", "yes"]
    kappa = fleiss_kappa_from_labels([[row[j] for j in complete] for row in labels], categories)
    value_of: Mapping[str, float] = (
        {"0": 0.0, "1": 1.0, "2": 2.0, "3": 3.0} if mode == "graded" else {"no": 0.0, "yes": 1.0}
    )
    matrix = np.array([[value_of.get(x, math.nan) for x in row] for row in labels], dtype=np.float64).reshape(
        len(labels), n_passages
    )
    level: AlphaLevel = "ordinal" if mode == "graded" else "nominal"
    alpha = krippendorff_alpha(
        matrix, level=level, value_domain=[0.0, 1.0, 2.0, 3.0] if mode == "graded" else None
    )
    unstable = sum(1 for col in cols if len(set(col)) > 1)
    return {
        "labels": "grade" if mode == "graded" else "verdict",
        "passages": n_passages,
        "unstable_passages": unstable,
        "flip_rate": flip_rate(labels),
        "deviation_rate": deviation_rate(labels),
        "fleiss_kappa": _num(kappa),
        "fleiss_subjects": len(complete),
        "krippendorff_alpha": _num(alpha),
        "alpha_level": level,
        "unjudged_ratings": sum(row.count("unjudged") for row in labels),
    }


def _per_query_values(runs: Sequence[RunResult], metric: StabilityMetric) -> list[list[float | None]]:
    """queries x runs values of a per-query metric."""
    n_queries = len(runs[0].results)
    return [[metric.per_query(run.results[q]) for run in runs] for q in range(n_queries)]


def _range_of(values: Sequence[float | None]) -> float:
    present = [v for v in values if v is not None]
    return value_range(present) if len(present) > 1 else 0.0


def _unstable_queries(
    runs: Sequence[RunResult],
    records: Sequence[DatasetRecord],
    checked: StabilityMetric,
    top: int,
) -> tuple[list[dict[str, Any]], list[float], list[float]]:
    ap = _per_query_values(runs, MAP_FIGURE)
    score = _per_query_values(runs, SCORE_FIGURE)
    chk = _per_query_values(runs, checked)
    rows: list[dict[str, Any]] = []
    for q, rec in enumerate(records):
        rows.append(
            {
                "id": rec.id,
                "query": rec.query,
                "metric": checked.per_query_name,
                "values": chk[q],
                "range": _range_of(chk[q]),
                "ap": ap[q],
                "ap_range": _range_of(ap[q]),
                "score": score[q],
                "score_range": _range_of(score[q]),
            }
        )
    ap_ranges = [r["ap_range"] for r in rows]
    score_ranges = [r["score_range"] for r in rows]
    moving = [r for r in rows if r["range"] > 0 or r["ap_range"] > 0 or r["score_range"] > 0]
    moving.sort(key=lambda r: (-r["range"], -r["ap_range"], -r["score_range"], r["id"]))
    return moving[:top], ap_ranges, score_ranges


def _snippet(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _unstable_passages(
    runs: Sequence[RunResult], records: Sequence[DatasetRecord], mode: str, top: int
) -> list[dict[str, Any]]:
    rows: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for q, rec in enumerate(records):
        for i, passage in enumerate(rec.passages):
            labels = [_label(run.results[q], i, mode) for run in runs]
            if len(set(labels)) == 1:
                continue
            counts = Counter(labels)
            minority = len(labels) - counts.most_common(1)[0][1]
            p_yes = [run.results[q].verdicts[i].p_yes for run in runs]
            p_present = [p for p in p_yes if p is not None]
            p_range = value_range(p_present) if len(p_present) > 1 else 0.0
            row = {
                "query_id": rec.id,
                "index": i,
                "passage_id": passage.id,
                "labels": labels,
                "p_yes": p_yes,
                "minority": minority,
                "text": _snippet(passage.text),
            }
            rows.append(((-minority, -p_range, q, i), row))
    rows.sort(key=lambda item: item[0])
    return [row for _, row in rows[:top]]


def _noise(
    runs: Sequence[RunResult],
    checked: StabilityMetric,
    options: StabilityOptions,
    run_values: Sequence[float],
) -> tuple[dict[str, Any], list[Interval]]:
    """Judge noise (run to run) beside query-sampling noise (bootstrap over queries).

    * judge noise: the standard deviation (ddof=1) of the checked figure across runs, and
      its range;
    * query-sampling noise: the percentile bootstrap interval (``confidence``, seeded) of
      the mean over queries of each query's value averaged over the runs; its standard
      error is the bootstrap distribution's standard deviation;
    * ``dominant``: ``query_sampling`` when its SE exceeds the judge SD, ``judge`` when the
      judge SD is larger, ``none`` when both are 0;
    * ``queries_needed``: queries for a CI half-width <= ``threshold * |mean|`` (the same
      relative tolerance as the stability check), ``ceil(n * (h / target)^2)``;
      ``queries_needed_comparison``: the same for the difference of two independent systems'
      means (its half-width is sqrt(2) times larger): ``ceil(2 n (h / target)^2)``.
    """
    per_query = _per_query_values(runs, checked)
    averaged = [
        float(np.mean([v for v in row if v is not None]))
        for row in per_query
        if any(v is not None for v in row)
    ]
    seed, conf, n_res = options.bootstrap_seed, options.confidence, options.bootstrap_resamples
    pooled = bootstrap_mean_ci(averaged, confidence=conf, n_resamples=n_res, seed=seed)
    per_run = [
        bootstrap_mean_ci(
            [v for v in (checked.per_query(r) for r in run.results) if v is not None],
            confidence=conf,
            n_resamples=n_res,
            seed=seed,
        )
        for run in runs
    ]
    finite = [v for v in run_values if math.isfinite(v)]
    judge_sd = _sd(finite)
    judge_range = value_range(finite) if finite else 0.0
    query_se = pooled.se
    if not math.isfinite(query_se):
        dominant = "unknown"
    elif judge_sd == 0.0 and query_se == 0.0:
        dominant = "none"
    elif query_se >= judge_sd:
        dominant = "query_sampling"
    else:
        dominant = "judge"
    ratio = query_se / judge_sd if judge_sd > 0 and math.isfinite(query_se) else math.inf
    mean = float(np.mean(finite)) if finite else math.nan
    target = options.threshold * abs(mean) if math.isfinite(mean) else math.nan
    hw = pooled.half_width
    single = queries_needed(pooled.n, hw, target)
    comparison = queries_needed(pooled.n, math.sqrt(2.0) * hw, target)
    data = {
        "metric": checked.name,
        "judge": {"sd": judge_sd, "range": judge_range, "half_range": judge_range / 2.0},
        "query_sampling": _interval_dict(pooled),
        "dominant": dominant,
        "query_se_over_judge_sd": _num(ratio),
        "target_half_width": _num(target),
        "queries_needed": single,
        "queries_needed_comparison": comparison,
        "formula": (
            "queries_needed = ceil(n * (half_width / (threshold * |mean|))^2); "
            "comparison of two independent systems: ceil(2 * n * (half_width / (threshold * |mean|))^2)"
        ),
    }
    return data, per_run


def _thresholds(config: JudgeConfig) -> float | list[float]:
    """The decision threshold of ``config`` (``auto``: of each language's template)."""
    if config.p_yes_threshold is not None:
        return config.p_yes_threshold
    values = sorted({bind_language(config, "", language=lang).decision_threshold for lang in LANGUAGES})
    return values[0] if len(values) == 1 else values


def _borderline(
    runs: Sequence[RunResult], records: Sequence[DatasetRecord], config: JudgeConfig, margin: float
) -> dict[str, Any]:
    """Verdicts within ``margin`` of the decision threshold in any run: identical runs on
    one machine cannot show it, but these are the verdicts another machine's float kernels
    may flip (docs/embedded_determinism.md)."""
    listed: dict[tuple[int, int], dict[str, Any]] = {}
    thresholds: set[float] = set()
    if config.probability:
        for run in runs:
            for q, (record, result) in enumerate(zip(records, run.results, strict=True)):
                # each query against its own threshold (``auto``: its language's template's)
                given = result.conventions.get("p_yes_threshold", config.p_yes_threshold)
                threshold = float(given) if given is not None else 0.5
                thresholds.add(threshold)
                for v in result.verdicts:
                    if (q, v.index) in listed:
                        continue
                    if is_borderline(v, threshold, margin, config.grade_threshold):
                        listed[(q, v.index)] = {
                            "query_id": record.id,
                            "index": v.index,
                            "passage_id": v.passage_id,
                            "verdict": v.verdict,
                            "p_yes": v.p_yes,
                        }
    return {
        "margin": margin,
        # one threshold, or (language auto) each language's template's
        "threshold": (
            next(iter(thresholds))
            if len(thresholds) == 1
            else sorted(thresholds)
            if thresholds
            else _thresholds(config)
        ),
        "count": len(listed),
        "note": "liable to flip on a machine whose llama.cpp kernels round differently",
        "verdicts": [listed[key] for key in sorted(listed)],
    }


def _conventions(options: StabilityOptions, mode: str) -> dict[str, str]:
    return {
        "cache": "bypassed (store=None): every run asks the backend",
        "relative_spread": (
            "(max - min) / |mean| across runs; mean 0: 0 if all equal else infinite (null in JSON, a breach)"
        ),
        "cv": "sample standard deviation (ddof=1) / |mean| across runs; null when infinite",
        "ndcg": "IDCG from each run's judged list (the dataset's qrels are not used)",
        "query_without_judged_passages": "left out of that run's averages (counted as unjudged_queries)",
        "labels": "grade 0-3 or unjudged" if mode == "graded" else "yes, no or unjudged",
        "flip_rate": "share of passages whose label is not identical in every run",
        "deviation_rate": "share of (passage, run) labels that differ from the passage's most common label",
        "fleiss_kappa": (
            "runs as raters, passages judged in every run as subjects; "
            "null when undefined (one category only)"
        ),
        "krippendorff_alpha": (
            ("ordinal" if mode == "graded" else "nominal")
            + " level, unjudged = missing; null when undefined (fewer than two distinct values)"
        ),
        "bootstrap": (
            f"percentile bootstrap over queries, {options.bootstrap_resamples} resamples, "
            f"seed {options.bootstrap_seed}, confidence {options.confidence}"
        ),
        "check": f"relative spread of {options.metric} <= threshold",
    }


def analyse(
    runs: Sequence[RunResult],
    records: Sequence[DatasetRecord],
    config: JudgeConfig,
    options: StabilityOptions,
    *,
    dataset: str = "",
    backend: str = "",
    runs_dir: Path | None = None,
    parallel_runs: bool = True,
    created: datetime | None = None,
    fingerprint: str | None = None,
) -> StabilityReport:
    """Every across-run figure of a stability run (pure apart from the clock)."""
    if len(runs) < 2:
        raise ValueError("analyse needs at least 2 runs")
    runs = sorted(runs, key=lambda r: r.index)
    checked = options.checked
    metrics = figure_metrics(options.k, checked, probability=bool(config.probability))
    per_run_figures = {m.name: [run.figure(m) for run in runs] for m in metrics}
    figures = {name: _figure_summary(values) for name, values in per_run_figures.items()}
    noise, per_run_ci = _noise(runs, checked, options, per_run_figures[checked.name])

    run_rows: list[dict[str, Any]] = []
    for run, ci in zip(runs, per_run_ci, strict=True):
        row: dict[str, Any] = {"run": run.index}
        for m in metrics:
            row[m.name] = _num(per_run_figures[m.name][runs.index(run)])
        row["ci"] = _interval_dict(ci)
        row["queries"] = len(run.results)
        row["unjudged_queries"] = sum(1 for r in run.results if r.ap is None)
        row["unjudged_passages"] = sum(r.unjudged for r in run.results)
        row["calls"] = sum(r.usage.calls for r in run.results)
        row["prompt_tokens"] = sum(r.usage.prompt_tokens for r in run.results)
        row["completion_tokens"] = sum(r.usage.completion_tokens for r in run.results)
        row["cost"] = sum(r.usage.cost for r in run.results)
        row["elapsed_s"] = run.elapsed_s
        row["file"] = f"runs/{run_file_name(run.index)}" if runs_dir is not None else None
        run_rows.append(row)

    labels = _labels(runs, records, config.mode)
    agreement = _agreement(labels, config.mode)
    top_queries, ap_ranges, score_ranges = _unstable_queries(runs, records, checked, options.top)
    top_passages = _unstable_passages(runs, records, config.mode, options.top)

    checked_values = per_run_figures[checked.name]
    if any(not math.isfinite(v) for v in checked_values):
        spread = math.inf  # a run with no figure at all cannot pass
    else:
        spread = relative_spread(checked_values)
    passed = math.isfinite(spread) and spread <= options.threshold
    stamp = (created or datetime.now(UTC)).isoformat(timespec="seconds")
    data: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "created": stamp,
        "dataset": {
            "path": dataset,
            "queries": len(records),
            "passages": sum(len(r.passages) for r in records),
        },
        "backend": backend,
        "judge_config": asdict(config),
        "settings": {
            "runs": len(runs),
            "threshold": options.threshold,
            "metric": checked.name,
            "k": list(options.k),
            "concurrency": options.concurrency,
            "parallel_runs": parallel_runs,
            "confidence": options.confidence,
            "bootstrap_resamples": options.bootstrap_resamples,
            "bootstrap_seed": options.bootstrap_seed,
            "top": options.top,
        },
        "conventions": {
            **_conventions(options, config.mode),
            "measures": {m.name: m.conventions for m in metrics},
        },
        "check": {
            "metric": checked.name,
            "threshold": options.threshold,
            "relative_spread": _num(spread),
            "spread_infinite": math.isinf(spread),
            "passed": passed,
            "status": "pass" if passed else "breach",
        },
        "runs": run_rows,
        "figures": figures,
        "agreement": agreement,
        "noise": noise,
        "query_ranges": {"ap": ap_ranges, "score": score_ranges},
        "unstable_queries": top_queries,
        "unstable_passages": top_passages,
        "backend_fingerprint": fingerprint,
        "borderline": _borderline(runs, records, config, options.borderline_margin),
    }
    json.dumps(data, allow_nan=False)  # the report must be strict JSON
    return StabilityReport(data, tuple(runs), tuple(records), config, options)
