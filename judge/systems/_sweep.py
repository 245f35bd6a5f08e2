"""``judge experiment``: run a query set through several search configurations, judge the
pooled results once, compare the configurations.

The configurations are the ``--config`` files given, every point of ``--grid`` applied to
the first one, or ``--trials N`` points sampled by optuna's TPE sampler (seeded). Each is
searched by :func:`judge.search.arun_search` into ``DIR/runs/NAME.jsonl`` (a run whose
configuration hash matches is reused: nothing is searched again), then every run is one
system of :func:`run_comparison`: per query the union of all results is judged once
(verdict cache, human labels, ``--until-decided``, the cascade, the qrels-backed judge all
as in ``compare-systems``) and each configuration is compared with the first. With trials,
each trial's new pairs are judged as it finishes, so the sampler gets its objective; the
final comparison then finds every verdict in the cache.

The report is the comparison report with an ``experiment`` section
(:class:`~judge.systems.ExperimentSummary`): every configuration's objective with its
interval and test against the baseline, the best, judged coverage@k, the judge's calls
against configurations x queries x depth, and a heat map when two knobs vary.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Unpack

from judge.backends import Backend, synchronous
from judge.io import InputError, Qrels, lock_output
from judge.judging import JudgeConfig, VerdictStore
from judge.metrics import UNDECIDED
from judge.search import SearchConfig, SearchOptions, SearchRun, arun_search, load_config, read_queries
from judge.stability import drawn_or_warning
from judge.store import atomic_write_bytes
from judge.systems._call_ledger import CallLedger, backend_calls
from judge.systems._comparison import ComparisonReport
from judge.systems._example_bank import check_pool_examples, pool_example_bank
from judge.systems._expected import GradeRows, expected_evaluation, grade_rows, merge_rows, tested_figure
from judge.systems._inputs import read_systems, trec_token
from judge.systems._model import ExperimentConfiguration, ExperimentSummary, SystemsReport
from judge.systems._options import SystemsOptions, read_human_labels
from judge.systems._pairwise import pairwise_differences, tie_group
from judge.systems._pool import PoolRun, build_pool, judge_pool, pool_dataset_lines
from judge.systems._pooled_call import PooledKeywords, pooled_call
from judge.systems._run import _pooled_config, run_comparison
from judge.systems._scoring import evaluate_files, parse_measures, pool_qrels, write_pool_files
from judge.systems._sweep_report import HEATMAP_FILE, coverage_keys, heatmap_png
from judge.systems._sweep_space import Knob, grid_points, parse_grid, point_name, unique_names, varying_knobs

EXPERIMENT_MEASURES = ("ndcg_cut_10", "map", "P_5", "recall_10", "recip_rank")
DEFAULT_EXPERIMENT_DIR = "experiment"
#: The label of an experiment's progress lines and messages.
EXPERIMENT_COMMAND = "judge experiment"
EXPERIMENT_LOCK = ".experiment.lock"  # one judge experiment writes a folder at a time


@dataclass(frozen=True)
class ExperimentOptions:
    """How the configurations are chosen and searched.

    ``configs``: search configuration files (the first is the baseline); ``grid``: knob
    specs (``k1=0.6,0.9`` or, for trials, ``k1=0.6:1.5``) applied to the first config;
    ``trials``: sample that many points of the grid's space with TPE (``seed``);
    ``overrides``: ``[params]`` set on every configuration (``judge search --set``);
    ``query_qrels``: a qrels file beside the query set; ``search``: the engines' call
    settings."""

    configs: tuple[Path, ...]
    grid: tuple[str, ...] = ()
    trials: int | None = None
    seed: int = 0
    overrides: tuple[str, ...] = ()
    query_qrels: Path | None = None
    search: SearchOptions | None = None

    def check(self) -> list[Knob]:
        """The parsed grid, or an InputError naming the flag."""
        if not self.configs:
            raise InputError("give at least one search configuration", field="--config")
        if self.trials is not None and self.trials < 2:
            raise InputError(f"must be >= 2, got {self.trials}", field="--trials")
        knobs = parse_grid(self.grid, trials=self.trials is not None)
        if self.trials is not None and not knobs:
            raise InputError(
                "--trials samples the space of --grid: give at least one --grid knob", field="--trials"
            )
        if not knobs and len(self.configs) < 2:
            raise InputError(
                "an experiment needs two configurations or more: several --config, or --grid",
                field="--config",
            )
        if knobs and self.trials is None:
            points = math.prod(len(k.values or ()) for k in knobs)
            if points + len(self.configs) - 1 < 2:
                raise InputError(
                    f"the grid has {points} point and there is no other configuration: an experiment "
                    "compares two configurations or more; give a knob two values or more",
                    field="--grid",
                )
        return knobs


@dataclass
class Planned:
    """One configuration to run: its system name, configuration and trial number."""

    name: str
    config: SearchConfig
    trial: int | None = None
    run: SearchRun | None = None


def query_set_digest(queries: Sequence[Any]) -> str:
    """8 hex digits identifying a query set (ids and texts, in order)."""
    h = hashlib.sha256()
    for q in queries:
        h.update(json.dumps([q.id, q.query], ensure_ascii=False).encode("utf-8") + b"\n")
    return h.hexdigest()[:8]


def experiment_key(
    queries: Sequence[Any], exp: ExperimentOptions, overrides: Mapping[str, Any] | None, depth: int | None
) -> str:
    """12 hex digits naming an experiment in its folder (the call ledger's key): the query
    set, the configuration files' contents, the grid, trials, seed, ``--set`` and pool depth."""
    h = hashlib.sha256()
    parts: list[Any] = [query_set_digest(queries), exp.grid, exp.trials, exp.seed, exp.overrides, depth]
    for path in map(Path, exp.configs):
        parts.append(hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else str(path))
    h.update(json.dumps([list(p) if isinstance(p, tuple) else p for p in parts], default=str).encode())
    return h.hexdigest()[:12]


def run_path(out: Path, planned: Planned, queries: Sequence[Any]) -> Path:
    """Where a configuration's run goes: ``runs/NAME.HASH12.QSET8.jsonl``, so a run is found
    again exactly when the configuration's hash and the query set match (a changed file
    under one name, or another query set in the same folder, gets a new run)."""
    return out / "runs" / f"{planned.name}.{planned.config.hash[:12]}.{query_set_digest(queries)}.jsonl"


def _load(path: Path, overrides: Mapping[str, Any] | None) -> SearchConfig:
    if not path.exists():
        raise InputError("no such file", path=str(path), field="--config")
    return load_config(path, overrides=dict(overrides) if overrides else None)


def plan_configurations(
    configs: Sequence[Path], knobs: Sequence[Knob], overrides: Mapping[str, Any] | None = None
) -> list[Planned]:
    """The configurations of a grid or of the files given, with unique names."""
    loaded = [_load(Path(p), overrides) for p in configs]
    planned: list[tuple[str, SearchConfig]] = []
    if knobs:
        base = loaded[0]
        for point in grid_points(knobs):
            planned.append((point_name(base.name, point), base.with_params(point)))
        planned += [(c.name, c) for c in loaded[1:]]
    else:
        planned = [(point_name(c.name, {}), c) for c in loaded]
    names = unique_names([n for n, _ in planned])
    return [Planned(name, cfg) for name, (_, cfg) in zip(names, planned, strict=True)]


@dataclass
class _Judging:
    """What judging a trial needs, and the labels gathered so far over every trial."""

    out: Path
    backend: Backend
    config: JudgeConfig
    store: VerdictStore | None
    run: PoolRun
    options: SystemsOptions
    human: Qrels | None
    level: int
    objective: Any
    known: dict[str, dict[str, int]] = field(default_factory=dict)
    known_rows: GradeRows | None = None  # the pairs gathered so far as distributions over grades
    calls: int = 0


async def _judge_trial(planned: Planned, j: _Judging) -> float | None:
    """Judge one trial's new pairs; its objective against every label gathered so far."""
    assert planned.run is not None
    inputs = read_systems(
        {planned.name: Path(planned.run.dataset_path)},
        max_passage_chars=j.options.max_passage_chars,
        at_least=1,
    )
    pool = build_pool(inputs, depth=j.options.depth, human=j.human)
    bank = pool_example_bank(j.run.spec.examples, pool, inputs, j.config)
    where = j.out / "trials" / planned.name
    where.mkdir(parents=True, exist_ok=True)
    verdicts = await judge_pool(
        where / "pool.input.jsonl",
        where / "pool.judged.jsonl",
        pool_dataset_lines(pool, inputs),
        j.backend,
        j.config,
        store=j.store,
        run=replace(j.run, max_passage_chars=j.options.max_passage_chars, examples=bank),
    )
    j.calls += verdicts.calls
    mode = _pooled_config(j.config, j.backend, j.run.listwise).mode
    qrels = pool_qrels(pool, verdicts, mode)
    for token, docs in qrels.items():
        j.known.setdefault(token, {}).update(docs)
    j.known_rows = merge_rows(j.known_rows, grade_rows(pool, verdicts, qrels, mode))
    qrels_path, runs = write_pool_files(where, inputs, j.known)
    ev = evaluate_files(qrels_path, runs[planned.name], [j.objective], j.level)
    if tested_figure(j.options.test_figure, j.known_rows, [j.objective]).used == "expected":
        # TPE is told the figure the comparison will test
        ev = expected_evaluation(ev, inputs.systems[0], inputs, j.known_rows, j.level)
    value = ev.all.get(j.objective.trec_name) if ev is not None else None
    return float(value) if isinstance(value, int | float) else None


async def _run_trials(
    queries: Sequence[Any],
    base: SearchConfig,
    knobs: Sequence[Knob],
    exp: ExperimentOptions,
    j: _Judging,
) -> list[Planned]:
    """``exp.trials`` TPE trials: sample, search, judge the new pairs, tell the objective."""
    try:
        import optuna
    except ImportError:
        raise InputError(
            "--trials needs optuna: pip install 'judge[search]' (or list --grid values for a grid)",
            field="--trials",
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists: dict[str, Any] = {}
    for k in knobs:
        if k.values is not None:
            dists[k.name] = optuna.distributions.CategoricalDistribution(list(k.values))
        elif k.integer:
            dists[k.name] = optuna.distributions.IntDistribution(int(k.low or 0), int(k.high or 0))
        else:
            dists[k.name] = optuna.distributions.FloatDistribution(float(k.low or 0.0), float(k.high or 0.0))
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=exp.seed))
    for k in knobs:  # every bound is a valid knob value before the first trial is judged
        for value in k.values if k.values is not None else (k.low, k.high):
            base.with_params({k.name: value})
    done: list[Planned] = []
    for i in range(int(exp.trials or 0)):
        trial = study.ask(dists)
        point = {k.name: trial.params[k.name] for k in knobs}
        names = unique_names([*(p.name for p in done), point_name(f"{base.name}-t{i:02d}", point)])
        planned = Planned(names[-1], base.with_params(point), trial=i)
        planned.run = await arun_search(
            list(queries), planned.config, run_path(j.out, planned, queries), options=exp.search
        )
        value = await _judge_trial(planned, j)
        study.tell(trial, value if value is not None else 0.0)
        done.append(planned)
    return done


def _coverage(comparison: ComparisonReport, name: str, ks: Sequence[int]) -> dict[str, float | None]:
    """Judged coverage@k of one configuration: over its queries, the share of its top k
    passages with a human label or a judged verdict."""
    data = comparison.data
    system = next(s for s in data.inputs.systems if s.name == name)
    out: dict[str, float | None] = {}
    for k in ks:
        judged = total = 0
        for qid, sq in system.queries.items():
            labels = data.pool.labels(qid)
            verdicts = data.verdicts.verdicts.get(qid, {})
            for d in sq.docnos[:k]:
                total += 1
                v = verdicts.get(d)
                judged += d in labels or (v is not None and v.judged)
        out[str(k)] = round(judged / total, 6) if total else None
    return out


def _best(report: SystemsReport, objective: str) -> tuple[str | None, float | None]:
    ranked = report.ranked(objective)
    if not ranked:
        return None, None
    value = report.systems[ranked[0]].measures[objective]
    return ranked[0], float(value) if value is not None else None


def _p(x: float | None) -> str:
    """A p-value as the reports print it (4 decimals, or 1e-5 style below 0.0001)."""
    if x is None:
        return "–"
    return f"{x:.4f}" if x >= 0.0001 else f"{x:.1e}"


def _versus_baseline(report: SystemsReport, best: str | None, objective: str) -> str | None:
    if best is None:
        return None
    baseline = str(report.conventions.get("baseline"))
    if best == baseline:
        return "the best is the baseline"
    alpha = 1 - float(report.conventions.get("confidence") or 0.95)
    for c in report.comparisons:
        if c.system == best and c.measure == objective:
            decision = c.significance(alpha)
            word = "better" if c.diff > 0 else "worse" if c.diff < 0 else "equal"
            error = f" ± {_p(c.p_holm_se)}" if c.p_holm_se else ""
            if decision == "undecided":
                decision = UNDECIDED.replace("alpha", f"{alpha:g}")
            return f"{word} by {c.diff:+.4f} than {baseline}, {decision} (Holm p {_p(c.p_holm)}{error})"
    return None


def summarize_experiment(
    comparison: ComparisonReport,
    planned: Sequence[Planned],
    *,
    query_set: str,
    queries: int,
    exp: ExperimentOptions,
    objective: str,
    calls: int,
    calls_this_run: int | None = None,
    depth: int | None = None,
) -> ExperimentSummary:
    """The experiment section for the comparison of ``planned``'s runs. ``calls``: over
    the whole experiment (every run in the folder); ``depth``: the pool's ``--depth``."""
    report = comparison.report
    ks = coverage_keys([p.config.depth for p in planned])
    configurations = []
    for p in planned:
        assert p.run is not None
        value = report.systems[p.name].measures.get(objective)
        configurations.append(
            ExperimentConfiguration(
                name=p.name,
                hash=p.config.hash,
                source=str(p.config.path) if p.config.path is not None else None,
                engine=p.config.engine,
                depth=p.config.depth,
                params=dict(p.config.params),
                run=str(p.run.dataset_path),
                trec=str(p.run.trec_path) if p.run.trec_path is not None else None,
                queries_searched=p.run.queries_searched,
                queries_reused=p.run.queries_reused,
                objective=float(value) if isinstance(value, int | float) else None,
                coverage=_coverage(comparison, p.name, [k for k in ks if k <= max(p.config.depth, min(ks))]),
                trial=p.trial,
            )
        )
    best, best_value = _best(report, objective)
    conv = report.conventions
    confidence = float(conv.get("confidence") or 0.95)
    data = comparison.data
    pairwise = pairwise_differences(
        [p.name for p in planned],
        data.evaluations,  # the tested figure, as the report's comparisons read it
        next(m for m in data.measures if m.trec_name == objective),
        {data.inputs.tokens[q] for q in report.not_in_all_systems},
        seed=int(conv.get("seed") or 0),
        resamples=int(conv.get("resamples") or 10_000),
        confidence=confidence,
    )
    nominal = sum(queries * min(p.config.depth, depth or p.config.depth) for p in planned)
    pairs = report.pool.judged + report.pool.unjudged
    strategy = "trials" if exp.trials is not None else "grid" if exp.grid else "configs"
    return ExperimentSummary(
        query_set=query_set,
        queries=queries,
        strategy=strategy,
        space=[str(g) for g in exp.grid],
        seed=exp.seed if exp.trials is not None else None,
        objective=objective,
        best=best,
        best_value=best_value,
        best_vs_baseline=_versus_baseline(report, best, objective),
        configurations=configurations,
        knobs=varying_knobs([p.config.params for p in planned]),
        heatmap=None,
        calls=calls,
        nominal_pairs=nominal,
        calls_ratio=round(calls / nominal, 6) if nominal else None,
        pairs=pairs,
        pairs_ratio=round(pairs / nominal, 6) if nominal else None,
        calls_this_run=calls_this_run,
        calls_per_pair=round(calls / pairs, 6) if pairs else None,
        depth=depth,
        pairwise=pairwise,
        tie_group=tie_group(best, pairwise, round(1.0 - confidence, 10)),
    )


def _with_heatmap(summary: ExperimentSummary, out: Path) -> tuple[ExperimentSummary, str | None]:
    """Draw ``heatmap.png`` into ``out`` when two knobs vary (else remove an old one); a heat
    map matplotlib cannot draw is a warning (returned), never a failed experiment."""
    png, warning = drawn_or_warning(lambda: heatmap_png(summary), "heat map")
    if png is not None:
        atomic_write_bytes(out / HEATMAP_FILE, png)
        return summary.model_copy(update={"heatmap": HEATMAP_FILE}), None
    (out / HEATMAP_FILE).unlink(missing_ok=True)
    return summary, warning


async def run_experiment(
    queries_path: str | os.PathLike[str],
    report_dir: str | os.PathLike[str],
    backend: Backend,
    config: JudgeConfig,
    *,
    experiment: ExperimentOptions,
    store: VerdictStore | None = None,
    options: SystemsOptions | None = None,
    pool_run: PoolRun | None = None,
) -> ComparisonReport:
    """Search, pool, judge, compare; the comparison report with its experiment section,
    written into ``report_dir`` (report.json / .md / .html, runs/, heatmap.png)."""
    opts = options or SystemsOptions()
    if opts.measures is None:
        opts = replace(opts, measures=EXPERIMENT_MEASURES)
    opts.check()
    measures = parse_measures(opts.measures)
    objective = measures[0]
    run = pool_run or PoolRun()
    if run.command == PoolRun.command:  # the default label: progress lines name the experiment
        run = replace(run, command=EXPERIMENT_COMMAND)
    knobs = experiment.check()
    check_pool_examples(run, opts, config)
    out = Path(report_dir)
    if out.exists() and not out.is_dir():
        raise InputError("the report directory is a file", path=str(out))
    qpath = Path(queries_path)
    if not qpath.exists():
        raise InputError("no such file", path=str(qpath), field="QUERIES")
    queries = read_queries(qpath, experiment.query_qrels)
    if not queries:
        raise InputError("the query set has no query", path=str(qpath))
    from judge.search import parse_overrides

    overrides = parse_overrides(list(experiment.overrides)) if experiment.overrides else None
    human, scale = read_human_labels(opts, config, {trec_token(q.id): q.query for q in queries})
    out.mkdir(parents=True, exist_ok=True)
    lock = lock_output(out, out / EXPERIMENT_LOCK, command="judge experiment", field="--output")
    trial_calls = 0
    created: Any = None
    try:
        key = experiment_key(queries, experiment, overrides, opts.depth)
        async with CallLedger(out, lambda: backend_calls(backend), key=key) as ledger:
            if experiment.trials is not None:
                base = _load(Path(experiment.configs[0]), overrides)
                if store is None:
                    # Trials judge as they go and the comparison reads those verdicts back: keep them.
                    from judge.store import SQLiteVerdictStore

                    store = created = SQLiteVerdictStore(out / "verdicts.sqlite")
                judging = _Judging(out, backend, config, store, run, opts, human, scale.level, objective)
                planned = await _run_trials(queries, base, knobs, experiment, judging)
                trial_calls = judging.calls
            else:
                planned = plan_configurations(experiment.configs, knobs, overrides)
                for p in planned:
                    p.run = await arun_search(
                        queries, p.config, run_path(out, p, queries), options=experiment.search
                    )
            systems = {p.name: Path(p.run.dataset_path) for p in planned if p.run is not None}
            comparison = await run_comparison(
                systems,
                out,
                backend,
                config,
                store=store,
                options=opts,
                pool_run=run,
                objective=objective.trec_name,
            )
            # A Ray engine's workers call their own backends: count what the pools reported.
            ledger.extra = max(0, trial_calls + comparison.report.pool.calls - ledger.this_run)
    except BaseException:
        lock.release()  # else held to the end of the report's writing, below
        raise
    finally:
        if created is not None:
            await created.aclose()
    summary = summarize_experiment(
        comparison,
        planned,
        query_set=str(qpath),
        queries=len(queries),
        exp=experiment,
        objective=objective.trec_name,
        calls=ledger.total,
        calls_this_run=ledger.this_run,
        depth=opts.depth,
    )
    summary, warning = await asyncio.to_thread(_with_heatmap, summary, out)
    warnings = [*comparison.report.warnings, *([warning] if warning is not None else [])]
    comparison.with_report(comparison.report.model_copy(update={"experiment": summary, "warnings": warnings}))
    await asyncio.to_thread(comparison.write)
    lock.release()
    return comparison


# ---------------------------------------------------------------------------- public API
async def aexperiment(
    queries: str | os.PathLike[str],
    configs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    output_dir: str | os.PathLike[str] = DEFAULT_EXPERIMENT_DIR,
    *,
    grid: Mapping[str, Any] | Sequence[str] | None = None,
    trials: int | None = None,
    set: Sequence[str] | None = None,  # the CLI's --set
    query_qrels: str | os.PathLike[str] | None = None,
    search_options: SearchOptions | None = None,
    **keywords: Unpack[PooledKeywords],
) -> SystemsReport:
    """Run the query set ``queries`` through several search configurations and compare them
    on one judged pool (``judge experiment``).

    ``configs``: one search configuration file or several (the first is the baseline);
    ``grid``: ``{"k1": [0.6, 0.9], "b": [0.3, 0.75]}`` (or the CLI's ``["k1=0.6,0.9", ...]``)
    applied to the first; ``trials``: that many TPE trials over the grid's space, where a
    ``(low, high)`` tuple is a range (``seed`` seeds the sampler and every test); ``set``:
    ``["k1=0.9"]`` params on every configuration; ``query_qrels``: a qrels file beside the
    query set. The other keywords are :func:`compare_systems`'s
    (:class:`~judge.systems.PooledKeywords`; ``stability_resamples`` defaults to 0 here, as
    on the command line: a sweep compares many configurations). Writes the report
    (``report.json`` with its ``experiment`` section, ``report.md``, ``report.html``), the
    runs (``runs/NAME.jsonl``: reused when the configuration's hash matches) and
    ``heatmap.png`` (two knobs vary) into ``output_dir``; returns the report. Every earlier
    judgment in the verdict cache is reused.
    """
    paths = (configs,) if isinstance(configs, str | os.PathLike) else tuple(configs)
    exp = ExperimentOptions(
        configs=tuple(Path(p) for p in paths),
        grid=parse_grid_items(grid) if grid is not None else (),
        trials=trials,
        seed=int(keywords.get("seed", 0)),
        overrides=tuple(set or ()),
        query_qrels=Path(query_qrels) if query_qrels is not None else None,
        search=search_options,
    )
    exp.check()
    async with pooled_call(
        keywords, name="experiment", stability_resamples=0, command=EXPERIMENT_COMMAND
    ) as call:
        comparison = await run_experiment(
            queries,
            output_dir,
            call.backend,
            call.config,
            experiment=exp,
            store=call.store,
            options=call.options,
            pool_run=call.run,
        )
        return comparison.report


def parse_grid_items(grid: Mapping[str, Any] | Sequence[str]) -> tuple[str, ...]:
    """A Python grid (mapping or CLI strings) as ``--grid`` items."""
    from judge.systems._sweep_space import _item_of

    if isinstance(grid, Mapping):
        return tuple(_item_of(name, spec) for name, spec in grid.items())
    if isinstance(grid, str):
        return (grid,)
    return tuple(str(g) for g in grid)


experiment = synchronous(aexperiment, "experiment")

__all__ = [
    "DEFAULT_EXPERIMENT_DIR",
    "EXPERIMENT_COMMAND",
    "EXPERIMENT_MEASURES",
    "ExperimentOptions",
    "Planned",
    "aexperiment",
    "experiment",
    "plan_configurations",
    "run_experiment",
    "summarize_experiment",
]
