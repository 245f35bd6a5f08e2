"""``judge experiment``: run a query set through several search configurations (files, a
grid, or TPE trials), judge the pooled results once, compare every configuration with the
first.

Exit codes: 0 done; 2 bad input or usage (a bad ``--grid``, config or query set: nothing
searched or judged); 3 the judge backend failed permanently; 130 interrupted (rerun the
same command: runs and judged pairs are kept and cost nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from judge.cli._flags import open_backend, run_spec_of
from judge.cli._pooled_flags import add_pooled_flags, open_pool, pooled_options, run_pooled
from judge.io import InputError
from judge.metrics import EXACT_LIMIT


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "experiment",
        help="compare search configurations (files, a grid, trials) on one judged pool",
        description=(
            "Search QUERIES with every configuration: the --config files (the first is the baseline), "
            "every point of --grid applied to the first --config, or --trials points sampled with optuna's "
            "TPE over --grid's space. Runs go to OUTPUT/runs/ and are reused when the configuration's hash "
            "matches. Per query the union of every configuration's results is judged once (verdict cache, "
            "--qrels labels, --until-decided, --cascade, --backend qrels:FILE as in compare-systems); each "
            "configuration is compared with the baseline. Writes report.json (with an 'experiment' "
            "section), report.md, report.html, calls.json (the judge's calls over every run of it) "
            "and, when two knobs vary, heatmap.png into OUTPUT."
        ),
        epilog=(
            "exit codes: 0 done; 2 bad input/usage (nothing searched or judged); 3 backend failed "
            "permanently; 130 interrupted (rerun to resume)"
        ),
    )
    p.add_argument(
        "queries", metavar="QUERIES", help="query set: JSONL {id, query[, qrels]} or TSV qid<TAB>query"
    )
    p.add_argument(
        "--config",
        dest="configs",
        action="append",
        default=[],
        metavar="C.toml",
        help="a search configuration (repeatable; the first is the baseline and the base of --grid)",
    )
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KNOB=V1,V2|KNOB=LOW:HIGH",
        help="a knob's values (repeatable: the grid is their product; its first point is the baseline, so "
        "list the configuration's own values first); LOW:HIGH ranges need --trials",
    )
    p.add_argument("--trials", type=int, default=None, metavar="N", help="N TPE trials over --grid's space")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="set a [params] knob on every configuration (as judge search --set)",
    )
    p.add_argument("--query-qrels", default=None, metavar="FILE", help="a qrels file beside the query set")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for runs and the report")
    add_pooled_flags(
        p,
        default_measures="ndcg_cut_10, map, P_5, recall_10, recip_rank",
        stability_resamples=0,
        seed_help="seed of the TPE sampler and of every resample (default 0); the randomization test "
        f"uses it only past {EXACT_LIMIT} non-zero per-query differences (up to there it is exact)",
    )
    p.add_argument(
        "--search-concurrency", type=int, default=None, metavar="N", help="queries in flight per engine"
    )
    p.add_argument(
        "--search-timeout", type=float, default=None, metavar="S", help="seconds per search request"
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run_experiment_cli)


def _search_options(args: argparse.Namespace) -> Any:
    from judge.search import SearchOptions

    values: dict[str, Any] = {}
    if args.search_concurrency is not None:
        if args.search_concurrency < 1:
            raise InputError("must be >= 1", field="--search-concurrency")
        values["concurrency"] = args.search_concurrency
    if args.search_timeout is not None:
        if not args.search_timeout > 0:
            raise InputError("must be > 0", field="--search-timeout")
        values["timeout_s"] = args.search_timeout
    return SearchOptions(**values)


def run_experiment_cli(args: argparse.Namespace) -> int:
    from judge.systems import (
        EXPERIMENT_COMMAND,
        ExperimentOptions,
        ReportFolder,
        run_experiment,
    )

    out = Path(args.output)
    experiment = ExperimentOptions(
        configs=tuple(Path(c) for c in args.configs),
        grid=tuple(args.grid),
        trials=args.trials,
        seed=args.resample_seed,
        overrides=tuple(args.overrides),
        query_qrels=Path(args.query_qrels) if args.query_qrels else None,
        search=_search_options(args),
    )
    experiment.check()  # a bad --grid or --trials is exit 2 before anything opens
    options = pooled_options(args)
    spec = run_spec_of(args, mode=args.mode or ReportFolder(out).judged_mode())
    backend, run = open_pool(args, spec, options, command=EXPERIMENT_COMMAND)
    comparison = run_pooled(
        args,
        backend,
        lambda store: run_experiment(
            args.queries,
            out,
            backend,
            spec.config,
            experiment=experiment,
            store=store,
            options=options,
            pool_run=run,
        ),
    )
    report = comparison.report
    print(comparison.json_text() if args.json else comparison.markdown(), end="")
    for warning in report.warnings:  # --examples measured to hurt, --adapt refused, a plot not drawn
        if warning.startswith(("--examples:", "--adapt:", "the heat map")):
            print(f"judge experiment: warning: {warning}", file=sys.stderr)
    e = report.experiment
    if not args.quiet and e is not None:
        searched = sum(c.queries_searched for c in e.configurations)
        best = "—" if e.best_value is None else f"{e.best_value:.4f}"
        print(
            f"judge experiment: {len(e.configurations)} configurations, {e.queries} queries, "
            f"{searched} searches this run; {e.pairs} pairs judged of {e.nominal_pairs} nominal, "
            f"{e.calls} judge calls over the experiment ({e.calls_this_run} this run); "
            f"best {e.best} ({e.objective} {best}); report {comparison.folder.html_path}",
            file=sys.stderr,
        )
    return 0


def run_search_nightly_cli(args: argparse.Namespace) -> int:
    """``judge nightly CONFIG`` when CONFIG has a ``[search]`` section (see
    :mod:`judge.systems` ``load_search_nightly``): exit 0 pass (or the first night, which
    stores the baseline run), 1 a measure dropped significantly."""
    from judge.batch import run_spec
    from judge.cli._flags import flag_errors
    from judge.store import SQLiteVerdictStore
    from judge.systems import PoolRun, load_search_nightly, run_search_nightly

    cfg = load_search_nightly(args.config)
    with flag_errors(
        {
            "mode": "mode",
            "examples": "search.examples",
            "examples_from": "search.examples_from",
            "adapt": "search.adapt",
        }
    ):
        spec = run_spec(
            None, mode=cfg.mode, examples=cfg.examples, examples_from=cfg.examples_from, adapt=cfg.adapt
        )
    backend = open_backend(cfg.backend, cfg.base_url, spec.policy)
    if not args.quiet:
        print(f"judge: using judge {backend.name}", file=sys.stderr)

    async def go() -> Any:
        store = SQLiteVerdictStore(None)
        try:
            return await run_search_nightly(
                cfg, backend, spec.config, store=store, pool_run=PoolRun(spec=spec)
            )
        finally:
            await store.aclose()
            await backend.aclose()

    outcome = asyncio.run(go())
    entry = outcome.entry
    for measure, row in entry["measures"].items():
        mark = "  DROP" if row["dropped"] else ""
        if row.get("undecided"):
            mark = "  UNDECIDED (p within Monte Carlo error of the level; raise resamples)"
        print(
            f"{measure}: baseline {row['baseline']:.4f} current {row['current']:.4f} "
            f"diff {row['diff']:+.4f} (Holm p {row['p_holm']:.4g}){mark}"
        )
    status = entry["status"]
    print(
        f"judge nightly: {status.upper() if status == 'alert' else status}; {entry['calls']} judge calls; "
        f"report {outcome.report_dir}; history {outcome.history}"
        + (f"; trend {outcome.trend_plot}" if outcome.trend_plot else ""),
        file=sys.stderr,
    )
    for warning in outcome.warnings:  # a trend plot that could not be drawn
        print(f"judge nightly: warning: {warning}", file=sys.stderr)
    return 0 if outcome.passed else 1
