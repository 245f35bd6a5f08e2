"""``judge compare-systems``: judge the pooled passages of several systems once, score every
system against the pool as ``judge trec`` does, compare each with the first.

Exit codes: 0 done; 2 bad input or usage, or ``--strict`` refused an input (nothing
judged); 3 the backend failed permanently; 130 interrupted (rerun the same command: judged
pairs are kept and cost nothing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from judge.cli._flags import add_dataset_flags, add_engine_flags, ray_ship, run_spec_of
from judge.cli._pooled_flags import add_pooled_flags, open_pool, pooled_options, run_pooled
from judge.metrics import EXACT_LIMIT


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
    add_pooled_flags(
        p,
        default_measures="map, ndcg_cut_10, P_5, recall_10, recip_rank",
        stability_resamples=1000,
        seed_help="random seed of every resample (default 0); the randomization test uses it only past "
        f"{EXACT_LIMIT} non-zero per-query differences (up to there it is exact)",
    )
    add_engine_flags(p)
    add_dataset_flags(
        p,
        strict_help="check every input first; refuse on any problem",
        map_help="read NAME from FIELD in every input (as judge score --map)",
    )
    from judge.cli._label_commands import add_label_flags

    add_label_flags(p)
    p.set_defaults(func=run_compare_systems_cli)


def run_compare_systems_cli(args: argparse.Namespace) -> int:
    from judge.cli._label_commands import label_set_of
    from judge.io import DEFAULT_MAX_PASSAGE_CHARS, parse_field_map
    from judge.systems import (
        ReportFolder,
        parse_system_args,
        read_human_labels,
        run_comparison,
        systems_query_texts,
    )

    systems = parse_system_args(args.systems)
    out = Path(args.output)
    options = pooled_options(
        args,
        labels=label_set_of(args),
        labels_level=args.labels_level,
        labels_yes_grade=args.labels_yes_grade,
        strict=bool(args.strict),
        field_map=parse_field_map(args.map),
        max_passage_chars=args.max_passage_chars or DEFAULT_MAX_PASSAGE_CHARS,
    )
    # Resume in the pool's mode unless one is given (as judge score does).
    spec = run_spec_of(args, mode=args.mode or ReportFolder(out).judged_mode())
    config = spec.config
    # Human labels and the judge on one scale, or exit 2 before a backend is opened.
    read_human_labels(options, config, systems_query_texts(systems, options))
    backend, run = open_pool(
        args,
        spec,
        options,
        command="judge compare-systems",
        listwise=bool(args.listwise or args.listwise_template),
        listwise_template=args.listwise_template,
        ship=ray_ship(args, spec),
    )
    comparison = run_pooled(
        args,
        backend,
        lambda store: run_comparison(
            systems, out, backend, config, store=store, options=options, pool_run=run
        ),
    )
    report = comparison.report
    print(comparison.json_text() if args.json else comparison.markdown(), end="")
    for warning in report.warnings:  # --examples measured to hurt, --adapt refused: on stderr too
        if warning.startswith(("--examples:", "--adapt:")):
            print(f"judge compare-systems: warning: {warning}", file=sys.stderr)
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
