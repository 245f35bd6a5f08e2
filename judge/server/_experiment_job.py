"""Experiment jobs (``POST /v1/experiments``): ``judge experiment`` over a search
configuration the server registered, run in the job's directory by the one experiment
runner of :mod:`judge.systems` (:func:`judge.systems.run_experiment`).

The job's directory is the experiment's folder: ``queries.jsonl`` (the submitted query set,
one JSON object a line), ``human.qrels`` and ``sample.qrels`` when given, then what the
runner writes (``runs/``, the pool's files, ``calls.json``, ``report.json``/``.md``/``.html``,
``heatmap.png``). A restart runs it again: the runs are reused (their configuration hash and
query set match), the pool's judged records and the verdict cache hold what was judged, and
``calls.json`` keeps the judge's calls of every run, so nothing is judged twice.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from judge.io import InputError, read_sample_labels
from judge.search import SearchFailed, read_queries
from judge.server._comparisons import _pool_run, human_labels, systems_options
from judge.server._job_files import SAMPLE_LABELS, Validation
from judge.server._job_kind import PooledJobFiles, Runtime, job_spec
from judge.server._search_configs import RegisteredConfig, check_knobs, check_points
from judge.store import trec_token
from judge.systems import ExperimentOptions, ReportFolder, parse_grid, run_experiment

QUERIES_NAME = "queries.jsonl"


def write_queries(job_dir: Path, queries: Sequence[Mapping[str, Any]] | str) -> None:
    """The request's query set as the job's ``queries.jsonl``: NDJSON text as given, or one
    line per ``{"id", "query"}`` object (ASCII escapes: a bad string is refused by its line)."""
    with open(job_dir / QUERIES_NAME, "w", encoding="utf-8") as fh:
        if isinstance(queries, str):
            fh.write(queries if not queries or queries.endswith("\n") else queries + "\n")
        else:
            for q in queries:
                fh.write(json.dumps(dict(q)) + "\n")


def grid_items(grid: Mapping[str, Any]) -> tuple[str, ...]:
    """A request's grid as ``--grid`` items: a list of values (``k1=0.6,1.2``) or, for trials,
    a range ``{"low", "high"}`` (``k1=0.6:1.5``)."""
    items = []
    for name, spec in grid.items():
        if isinstance(spec, Mapping):
            items.append(f"{name}={_text(spec['low'])}:{_text(spec['high'])}")
        else:
            items.append(f"{name}=" + ",".join(_text(v) for v in spec))
    return tuple(items)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, int | float) else str(value)


def experiment_options(registered: RegisteredConfig, options: Mapping[str, Any]) -> ExperimentOptions:
    """The experiment's :class:`~judge.systems.ExperimentOptions`: the registered file (an
    embedded index resolved relative to it), the grid or trials, the seed."""
    return ExperimentOptions(
        configs=(registered.path,),
        grid=grid_items(options.get("grid") or {}),
        trials=options.get("trials"),
        seed=int(options.get("seed") or 0),
    )


def check_experiment(registered: RegisteredConfig, options: Mapping[str, Any]) -> ExperimentOptions:
    """The grid (or trials) checked as ``judge experiment`` checks ``--grid``, and every point
    against the registered configuration first (InputError naming ``grid``/``grid.KNOB``/
    ``trials``): a point outside its index is named as such, whatever else is wrong."""
    grid = options.get("grid") or {}
    check_knobs(registered, grid, "grid")
    exp = experiment_options(registered, options)
    with _as_request_fields():
        knobs = parse_grid(exp.grid, trials=exp.trials is not None)
    if exp.trials is None:
        points = [dict(p) for p in itertools.product(*[[(k.name, v) for v in k.values or ()] for k in knobs])]
    else:
        points = [
            {k.name: v}
            for k in knobs
            for v in (k.values if k.values is not None else (k.low, k.high))
            if v is not None
        ]
    check_points(registered, points, "grid")
    with _as_request_fields():
        exp.check()  # then the command line's checks: two configurations or more, trials
    return exp


@contextlib.contextmanager
def _as_request_fields() -> Iterator[None]:
    """An InputError naming ``--grid``/``--trials`` as the request names them."""
    try:
        yield
    except InputError as err:
        field = {"--grid": "grid", "--trials": "trials", "--config": "grid"}.get(err.field or "", "grid")
        message = err.message.replace("--grid", "grid").replace("--trials", "trials")
        if err.field == "--config":  # no grid: the one registered configuration alone
            message = "an experiment compares two configurations or more: give a knob two values or more"
        raise InputError(message, field=field) from None


def validate_experiment(
    job_dir: Path, options: Mapping[str, Any], registered: RegisteredConfig, *, max_query_chars: int
) -> Validation:
    """Read the saved query set, labels and grid once, as the run will: the queries to
    search; an InputError naming the field (``queries`` with its line, ``grid``,
    ``options.qrels`` with its line, ``options.qrels_scale``, ``options.qrels_level``,
    ``options.sample_labels``) refuses the experiment."""
    check_experiment(registered, options)
    try:
        queries = read_queries(job_dir / QUERIES_NAME)
    except InputError as err:
        raise InputError(
            err.message, line=err.line, field="queries" + (f".{err.field}" if err.field else "")
        ) from None
    for i, q in enumerate(queries, 1):
        if len(q.query) > max_query_chars:
            raise InputError(
                f"query of {len(q.query)} characters; at most {max_query_chars} "
                "(judge serve --max-query-chars)",
                line=i,
                field="queries.query",
            )
    # the labels as --qrels reads them (a judgment list's query texts are the query set's),
    # on the judge's scale as the run will put them
    human_labels(job_dir, options, {trec_token(q.id): q.query for q in queries})
    if (job_dir / SAMPLE_LABELS).exists():
        try:
            read_sample_labels(job_dir / SAMPLE_LABELS)
        except InputError as err:
            raise InputError(err.message, line=err.line, field="options.sample_labels") from None
    return Validation(queries=len(queries), passages=0, rejects=[])


class ExperimentJob(PooledJobFiles):
    """``judge experiment`` over a registered configuration in the job's directory."""

    name = "experiment"

    def validate(
        self, job_dir: Path, options: Mapping[str, Any], rt: Runtime, *, stop_after: int | None
    ) -> Validation:
        registered = rt.search_configs.get(str(options.get("config")))
        if registered is None:
            raise InputError(f"no registered search configuration {options.get('config')!r}", field="config")
        check = validate_experiment(job_dir, options, registered, max_query_chars=rt.bounds.max_query_chars)
        if stop_after is not None and check.queries >= stop_after:
            raise InputError(
                f"more than {stop_after - 1} queries (judge serve --max-records)", field="queries"
            )
        return check

    async def run(self, rt: Runtime, job: Mapping[str, Any], job_dir: Path) -> dict[str, Any]:
        opts = job["options"]
        registered = rt.search_configs.get(str(opts.get("config")))
        if registered is None:  # the server restarted without it
            raise InputError(
                f"the search configuration {opts.get('config')!r} is not registered on this server "
                "(judge serve --search-config NAME=FILE)",
                field="config",
            )
        spec = job_spec(opts, rt.spec)
        run = _pool_run(
            opts,
            spec,
            concurrency=rt.concurrency,
            settings={**rt.settings, "job": job["id"]},
            executor=rt.executor,
            retry=job["phase"] == "retry",  # POST /v1/jobs/{id}/retry-unjudged: the pool's unjudged again
        )
        try:
            comparison = await run_experiment(
                job_dir / QUERIES_NAME,
                job_dir,
                rt.backend,
                spec.config,
                experiment=experiment_options(registered, opts),
                store=rt.store,
                options=systems_options(job_dir, opts),
                pool_run=run,
            )
        except SearchFailed as exc:  # the engine failed part way: the failure names the configuration
            raise SearchFailed(f"search configuration {registered.name!r}: {exc}") from exc
        return experiment_summary(comparison.report.to_json())

    def rejects(self, job_dir: Path) -> list[dict[str, Any]]:
        return []

    def report(self, job_dir: Path, fmt: str) -> str | None:
        return ReportFolder(job_dir).view(fmt)


def experiment_summary(data: Mapping[str, Any]) -> dict[str, Any]:
    """A finished experiment job's summary: the answer (best, its value, against the
    baseline), the configurations' objectives, the pool and the judge's calls."""
    e = data.get("experiment") or {}
    pool = data.get("pool") or {}
    return {
        "schema": data.get("schema"),
        "objective": e.get("objective"),
        "best": e.get("best"),
        "best_value": e.get("best_value"),
        "best_vs_baseline": e.get("best_vs_baseline"),
        "baseline": (data.get("conventions") or {}).get("baseline"),
        "configurations": {c["name"]: c.get("objective") for c in e.get("configurations") or []},
        "queries": e.get("queries"),
        "passages": int(pool.get("judged", 0)) + int(pool.get("unjudged", 0)),
        "unjudged": int(pool.get("unjudged", 0)),
        "pool": pool,
        "calls": e.get("calls"),
        "warnings": data.get("warnings") or [],
    }


EXPERIMENT = ExperimentJob()

__all__ = ["EXPERIMENT", "QUERIES_NAME", "check_experiment", "write_queries"]
