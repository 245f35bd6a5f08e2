"""``judge compare-systems``: judge the pooled passages of several systems once, score every
system against the pool as ``judge trec`` does, compare each with the first.

Exit codes: 0 done; 2 bad input or usage, or ``--strict`` refused an input (nothing
judged); 3 the backend failed permanently; 130 interrupted (rerun the same command: judged
pairs are kept and cost nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from judge.cli._flags import (
    add_batch_flags,
    add_dataset_flags,
    add_engine_flags,
    add_example_flags,
    call_settings,
    check_engine_flags,
    open_backend,
    run_spec_of,
)
from judge.io import InputError


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "compare-systems",
        help="pool several systems' results, judge each pair once, compare the systems fairly",
        description=(
            "Each NAME=PATH is a dataset in judge score's input format (gzip ok); the first "
            "is the baseline. Per query the union of all systems' passages (or each one's top "
            "--depth) is judged once (cached, resumable), every system is scored against that "
            "pool as judge trec scores a run against qrels, and each is compared with the "
            "baseline (randomization test, t-test, bootstrap CI, Holm, wins/ties/losses). "
            "Writes report.json, report.md, report.html, pool.judged.jsonl, pool.qrels and "
            "runs/NAME.run into REPORT_DIR."
        ),
        epilog=(
            "exit codes: 0 done; 2 bad input/usage or --strict refusal (nothing judged); "
            "3 backend failed permanently; 130 interrupted (rerun to resume)"
        ),
    )
    p.add_argument(
        "systems", nargs="+", metavar="NAME=PATH", help="a system's dataset; the first is the baseline"
    )
    p.add_argument(
        "-o", "--output", required=True, metavar="REPORT_DIR", help="directory for the report and pool"
    )
    p.add_argument(
        "--qrels", default=None, metavar="FILE", help="human labels (TREC qrels): judge only the holes"
    )
    p.add_argument(
        "--qrels-level",
        type=int,
        default=None,
        metavar="L",
        help="graded --qrels with a binary judge: grade >= L counts as relevant (default: -l when "
        "given, else the run is refused; the level is stated in the report)",
    )
    p.add_argument(
        "--qrels-yes-grade",
        type=int,
        default=None,
        metavar="G",
        help="0/1 --qrels with a graded judge (--mode graded): the grade a 1 stands for",
    )
    p.add_argument(
        "--depth", type=int, default=None, metavar="N", help="pool only each system's top N passages"
    )
    p.add_argument(
        "-m",
        "--measure",
        dest="measures",
        action="append",
        metavar="MEASURE",
        help="registry measure(s); repeatable (default: map, ndcg_cut_10, P_5, recall_10, recip_rank)",
    )
    p.add_argument(
        "-l",
        dest="level",
        type=int,
        default=None,
        help="minimum grade counted relevant (default 1; graded mode: the judge's grade threshold, 2); "
        "with a binary judge and graded --qrels, the default --qrels-level",
    )
    p.add_argument(
        "--seed",
        dest="resample_seed",  # not the judge's seed (a run setting of that name)
        type=int,
        default=0,
        help="random seed of every test and resample (default 0)",
    )
    p.add_argument("--resamples", type=int, default=10_000, help="resamples per test (default 10000)")
    p.add_argument(
        "--stability-resamples",
        type=int,
        default=1000,
        help="redraws of the pool from P(yes) for order_stability (default 1000; 0 skips)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="bootstrap CI level; with --until-decided also the confidence each decision must hold with "
        "(default 0.95)",
    )
    p.add_argument(
        "--until-decided",
        action="store_true",
        help="judge pooled pairs in rounds, those that most change a comparison first, and stop when every "
        "decision (which system is better, significant or not) holds with --confidence",
    )
    p.add_argument(
        "--budget", type=int, default=None, metavar="N", help="with --until-decided: judge at most N pairs"
    )
    p.add_argument(
        "--batch",
        type=int,
        default=None,
        metavar="N",
        help="with --until-decided: pairs judged per round (default max(8, pool/25))",
    )
    p.add_argument("--top-queries", type=int, default=10, help="queries shown in report.html (default 10)")
    add_batch_flags(p, defaults=False)
    add_engine_flags(p)
    p.add_argument(
        "--cascade",
        default=None,
        metavar="CHEAP,EXPENSIVE",
        help="two backend specs: the cheap judge first, the expensive one only where the cheap P(yes) is "
        "within --margin of the threshold (with --until-decided: the pairs the decisions still need)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.1,
        help="with --cascade: the cheap judge's unsure band (default 0.1)",
    )
    add_dataset_flags(
        p,
        strict_help="check every input first; refuse on any problem",
        map_help="read NAME from FIELD in every input (as judge score --map)",
    )
    p.add_argument(
        "--retry-unjudged",
        action="store_true",
        help="ask again for pooled pairs left unjudged by an earlier run",
    )
    p.add_argument("--json", action="store_true", help="print report.json instead of report.md")
    from judge.cli._label_commands import add_label_flags

    add_label_flags(p)
    add_example_flags(p)
    p.set_defaults(func=run_compare_systems_cli)


def run_compare_systems_cli(args: argparse.Namespace) -> int:
    from judge.backends import describe_backend
    from judge.cli._label_commands import label_set_of
    from judge.io import DEFAULT_MAX_PASSAGE_CHARS, parse_field_map
    from judge.store import SQLiteVerdictStore
    from judge.systems import (
        PoolRun,
        ReportFolder,
        SystemsOptions,
        check_pool_examples,
        parse_system_args,
        read_human_labels,
        run_comparison,
    )

    systems = parse_system_args(args.systems)
    if args.top_queries < 0:
        raise InputError("must be >= 0", field="--top-queries")
    out = Path(args.output)
    options = SystemsOptions(
        depth=args.depth,
        measures=tuple(args.measures) if args.measures else None,
        relevance_level=args.level,
        qrels=Path(args.qrels) if args.qrels else None,
        qrels_level=args.qrels_level,
        qrels_yes_grade=args.qrels_yes_grade,
        labels=label_set_of(args),
        labels_level=args.labels_level,
        labels_yes_grade=args.labels_yes_grade,
        seed=args.resample_seed,
        resamples=args.resamples,
        stability_resamples=args.stability_resamples,
        confidence=args.confidence,
        strict=bool(args.strict),
        field_map=parse_field_map(args.map),
        max_passage_chars=args.max_passage_chars or DEFAULT_MAX_PASSAGE_CHARS,
        top_queries=args.top_queries,
        until_decided=bool(args.until_decided),
        budget=args.budget,
        adaptive_batch=args.batch,
    )
    options.check()
    # Resume in the pool's mode unless one is given (as judge score does).
    check_engine_flags(args)
    spec = run_spec_of(args, mode=args.mode or ReportFolder(out).judged_mode())
    config = spec.config
    # Human labels and the judge on one scale, or exit 2 before a backend is opened.
    read_human_labels(options, config)
    check_pool_examples(
        PoolRun(spec=spec, listwise=bool(args.listwise or args.listwise_template)), options, config
    )

    backend_spec: Any = args.backend
    if args.cascade:
        from judge.backends import resolve_cascade
        from judge.cli._flags import flag_errors

        if args.backend:
            raise InputError("give either --backend or --cascade, not both", field="--cascade")
        with flag_errors({"cascade": "--cascade", "margin": "--margin", "backend": "--cascade"}):
            backend_spec = resolve_cascade(args.cascade, margin=args.margin, base_url=args.base_url)
    backend = open_backend(backend_spec, args.base_url, spec.policy)
    if not args.quiet:
        print(describe_backend(backend), file=sys.stderr)
    run = PoolRun(
        spec=spec,
        progress="quiet" if args.quiet else "auto",
        listwise=bool(args.listwise or args.listwise_template),
        listwise_template=args.listwise_template,
        retry_unjudged=bool(args.retry_unjudged),
        settings=call_settings(args, backend),
        ship=_ship(args, spec),
    )

    async def go() -> Any:
        store = None if args.no_cache else SQLiteVerdictStore(args.cache)
        try:
            return await run_comparison(
                systems, out, backend, config, store=store, options=options, pool_run=run
            )
        finally:
            if store is not None:
                await store.aclose()
            await backend.aclose()

    comparison = asyncio.run(go())
    report = comparison.report
    print(comparison.json_text() if args.json else comparison.markdown(), end="")
    if not args.quiet:
        pool = report.pool
        print(
            f"judge compare-systems: {len(report.systems)} systems, {pool.queries} queries, "
            f"{pool.unique_pairs} unique pairs ({pool.human_labels} human, {pool.judged} judged, "
            f"{pool.unjudged} unjudged), {pool.calls} LLM calls this run; "
            f"report {comparison.folder.html_path}",
            file=sys.stderr,
        )
        if report.adaptive is not None:
            a = report.adaptive
            print(
                f"judge compare-systems: --until-decided judged {a.judged_pairs} of {a.pool_pairs} "
                f"pooled pairs in {a.rounds} rounds; {a.decided} comparison(s) decided, "
                f"{a.undecided} undecided ({a.stop})",
                file=sys.stderr,
            )
    return 0


def _ship(args: argparse.Namespace, spec: Any) -> Any:
    """What the Ray engine's workers build their backend from: the backend's spec and base
    URL (never a pickled client); None for the local engine or a cascade (shipped as is)."""
    if not spec.ray or args.cascade:
        return None
    from judge.batch import BackendSpec

    return BackendSpec(args.backend, args.base_url)
