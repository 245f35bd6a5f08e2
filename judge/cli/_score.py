"""``judge score``: batch-score a JSONL dataset (concurrent, rate-limited, cached, resumable).

Exit codes: 0 done (unjudged passages, if any, are in the output and the summary);
2 bad input or usage, or ``--strict`` refused the file (nothing judged); 3 the backend
failed permanently (auth, unknown model); 130 interrupted (every finished query is kept;
rerun the same command to resume).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from judge.cli._flags import (
    add_call_flags,
    add_judge_flags,
    add_measure_flag,
    call_policy,
    checked_measures,
    judge_config,
    open_backend,
)
from judge.cli._labels import add_label_flags, calibrated_threshold, label_set_of
from judge.io._errors import InputError


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "score",
        help="judge every passage of a JSONL dataset; write one line per query and a summary",
        description=(
            "Judge every retrieved passage of every query in INPUT.jsonl (gzip ok) and write one "
            "JSON line per query to OUTPUT (default: INPUT.judged.jsonl beside the input), then "
            "OUTPUT.summary.json. Rerunning the same command resumes; the verdict cache makes "
            "already-judged passages free."
        ),
        epilog=(
            "exit codes: 0 done; 2 bad input/usage or --strict refusal (nothing judged); "
            "3 backend failed permanently; 130 interrupted (finished queries kept, rerun to resume)"
        ),
    )
    p.add_argument("input", nargs="?", help="dataset JSONL (or .jsonl.gz); one query per line")
    p.add_argument("-o", "--output", help="output JSONL (default: INPUT.judged.jsonl beside the input)")
    add_judge_flags(p, defaults=False)
    p.add_argument(
        "--listwise",
        action="store_true",
        help="judge all passages of a query in one call (fewer calls and tokens; generated verdicts)",
    )
    p.add_argument("--listwise-template", default=None, help="listwise template id or .toml path")
    add_call_flags(p)
    p.add_argument(
        "-k", type=int, nargs="+", default=[5, 10], metavar="K", help="NDCG/P cutoffs (default 5 10)"
    )
    add_measure_flag(p)
    p.add_argument("--no-cache", action="store_true", help="do not read or write the verdict cache")
    p.add_argument("--cache", default=None, help="verdict cache file (default $JUDGE_HOME/cache.sqlite)")
    p.add_argument(
        "--strict", action="store_true", help="check the whole file first; refuse it on any problem"
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="NAME=FIELD",
        help=(
            "read NAME from FIELD "
            "(names: id, query, retrieval_context, expected_ids, qrels, expected_output, text, "
            "passage_id, url)"
        ),
    )
    p.add_argument(
        "--max-passage-chars", type=int, default=None, help="truncate longer passages (default 8000)"
    )
    p.add_argument("--export-qrels", default=None, metavar="FILE", help="write the verdicts as TREC qrels")
    p.add_argument("--export-run", default=None, metavar="FILE", help="write the input ranking as a TREC run")
    p.add_argument("--run-tag", default="judge", help="tag column of --export-run (default judge)")
    p.add_argument(
        "--retry-unjudged",
        default=None,
        metavar="OUTPUT.jsonl",
        help="re-ask only the unjudged passages of an output file and rewrite it atomically",
    )
    p.add_argument(
        "--no-recall",
        action="store_true",
        help="skip contextual recall (computed by default for lines with expected_output)",
    )
    p.add_argument(
        "--source-quality",
        action="store_true",
        help="grade each passage's source (url/site/source) 0-3, once per site (cached)",
    )
    p.add_argument(
        "--site-priors",
        default=None,
        metavar="FILE",
        help="domain -> grade 0-3 (TSV 'domain<TAB>grade[<TAB>note]' or a JSON object); overrides "
        "the judge for the sites it covers (subdomains included); alone, grades from it only",
    )
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="who judges: this process (local, default) or a Ray cluster's actors (needs judge[ray])",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="--engine ray: join this cluster (auto, HOST:PORT); default: start a local one",
    )
    p.add_argument("--workers", type=int, default=None, help="--engine ray: judging actors (default 2)")
    p.add_argument(
        "--worker-cpus",
        type=float,
        default=1.0,
        help="--engine ray: CPUs per actor (the embedded model's threads; default 1)",
    )
    p.add_argument(
        "--borderline-margin",
        type=float,
        default=0.02,
        metavar="P",
        help="count verdicts whose P(yes) is within P of the threshold as borderline (default 0.02)",
    )
    p.add_argument(
        "--qrels-level",
        type=int,
        default=1,
        metavar="L",
        help="graded ground truth (qrels) against the yes/no verdicts (agreement): grade >= L is "
        "relevant (default 1; stated in every record and the summary)",
    )
    add_label_flags(p)
    p.add_argument(
        "--calibration",
        default=None,
        metavar="NAME",
        help="use the P(yes) threshold of a named calibration (judge calibrate) for this template",
    )
    p.add_argument("--progress-interval", type=float, default=5.0, help=argparse.SUPPRESS)
    p.set_defaults(func=run_score)


def _extras(args: argparse.Namespace) -> Any:
    from judge.io._sites import read_site_priors
    from judge.judging._extras import ExtraOptions

    priors = read_site_priors(args.site_priors) if args.site_priors else None
    return ExtraOptions(
        recall=not args.no_recall, source_quality=bool(args.source_quality), site_priors=priors
    )


def _mode_of_output(path: Path) -> str | None:
    from judge.store import iter_output

    first = next(iter_output(path, repair=False), None)  # one line read, not the file
    return str(first[1]["mode"]) if first is not None else None


def run_score(args: argparse.Namespace) -> int:
    from judge.backends import DEFAULT_CONCURRENCY, describe_backend
    from judge.batch import (
        BatchOptions,
        ProgressMode,
        check_labels,
        default_output_path,
        retry_unjudged,
        score_dataset,
    )
    from judge.batch._export import write_qrels, write_run
    from judge.io._jsonl import DEFAULT_MAX_PASSAGE_CHARS, parse_field_map
    from judge.store import SQLiteVerdictStore, atomic_write_text, recover_output

    if args.retry_unjudged and args.input:
        raise InputError(
            "give either INPUT or --retry-unjudged OUTPUT.jsonl, not both", field="--retry-unjudged"
        )
    if not args.retry_unjudged and not args.input:
        raise InputError("missing INPUT.jsonl (or --retry-unjudged OUTPUT.jsonl)", field="input")
    policy = call_policy(args)
    if not 0.0 <= args.borderline_margin <= 1.0:
        raise InputError("must be within [0, 1]", field="--borderline-margin")
    if not 1 <= args.qrels_level <= 3:
        raise InputError(f"must be in 1..3, got {args.qrels_level}", field="--qrels-level")
    if args.max_passage_chars is not None and args.max_passage_chars < 1:
        raise InputError("must be >= 1", field="--max-passage-chars")
    if any(k < 1 for k in args.k):
        raise InputError("cutoffs must be positive integers", field="-k")
    field_map = parse_field_map(args.map)
    measures = checked_measures(args.measures)
    extras = _extras(args)

    if args.retry_unjudged:
        output = Path(args.retry_unjudged)
        if not output.exists():
            raise InputError("no such file", path=str(output))
        mode = args.mode or _mode_of_output(output)
    else:
        output = Path(args.output) if args.output else default_output_path(args.input)
        mode = args.mode
    config = calibrated_threshold(args.calibration, judge_config(args, mode), args.labels_store)
    labels = label_set_of(args)
    label_options = {
        "labels": labels,
        "labels_level": args.labels_level,
        "labels_yes_grade": args.labels_yes_grade,
    }
    check_labels(BatchOptions(**label_options), config)  # a scale mismatch: exit 2 before any call

    backend = open_backend(args.backend, args.base_url, policy)
    if not args.quiet:
        print(describe_backend(backend), file=sys.stderr)
    ray_engine = args.engine == "ray"
    if not ray_engine and (args.ray_address or args.workers is not None):
        raise InputError("needs --engine ray", field="--ray-address" if args.ray_address else "--workers")
    workers = args.workers if args.workers is not None else 2
    if workers < 1:
        raise InputError("must be >= 1", field="--workers")
    if args.worker_cpus <= 0:
        raise InputError("must be > 0", field="--worker-cpus")
    concurrency = policy.concurrency_for(backend.inner)  # the cap the backend enforces
    if ray_engine and backend.inner.max_concurrency is not None:
        # Ray: every actor has its own backend (one embedded model each).
        cap = policy.concurrency or DEFAULT_CONCURRENCY
        concurrency = min(cap, backend.inner.max_concurrency * workers)
    progress: ProgressMode = "quiet" if args.quiet else "auto"
    executor = None
    engine: dict[str, Any] = {"engine": args.engine}
    if ray_engine:
        from judge.batch._ray import BackendSpec, RayExecutor

        executor = RayExecutor(
            BackendSpec(args.backend, args.base_url),
            workers=workers,
            cpus_per_worker=args.worker_cpus,
            concurrency=concurrency,
            rpm=args.rpm,
            tpm=args.tpm,
            max_retries=policy.max_retries,
            timeout_s=args.timeout,
            address=args.ray_address,
        )
        engine |= {"workers": workers, "worker_cpus": args.worker_cpus, "ray_address": args.ray_address}
    options = BatchOptions(
        k=tuple(dict.fromkeys(args.k)),
        concurrency=concurrency,
        field_map=field_map,
        max_passage_chars=args.max_passage_chars or DEFAULT_MAX_PASSAGE_CHARS,
        strict=bool(args.strict),
        progress=progress,
        progress_interval_s=args.progress_interval,
        listwise=bool(args.listwise or args.listwise_template),
        listwise_template=args.listwise_template,
        measures=measures,
        extras=extras,
        executor=executor,
        borderline_margin=args.borderline_margin,
        qrels_level=args.qrels_level,
        **label_options,
        settings={
            **engine,
            "rpm": args.rpm,
            "tpm": args.tpm,
            "timeout_s": backend.timeout_s,
            "max_retries": backend.max_retries,
            "cache": None if args.no_cache else str(args.cache or "default"),
            "contextual_recall": not args.no_recall,
            "source_quality": "judge" if args.source_quality else ("priors" if args.site_priors else None),
            "site_priors": args.site_priors,
            "calibration": args.calibration,
        },
    )

    async def go() -> Any:
        store = None if args.no_cache else SQLiteVerdictStore(args.cache)
        try:
            if args.retry_unjudged:
                return await retry_unjudged(output, backend, config, store=store, options=options)
            return await score_dataset(args.input, output, backend, config, store=store, options=options)
        finally:
            if store is not None:
                await store.aclose()
            await backend.aclose()
            if executor is not None:
                await executor.aclose()

    outcome = asyncio.run(go())
    summary = outcome.summary
    if args.export_qrels or args.export_run:
        records = recover_output(outcome.output_path)
        if args.export_qrels:
            n = write_qrels(records, args.export_qrels)
            summary["exports"] = {
                **summary.get("exports", {}),
                "qrels": {"path": args.export_qrels, "lines": n},
            }
        if args.export_run:
            n = write_run(records, args.export_run, args.run_tag)
            summary["exports"] = {
                **summary.get("exports", {}),
                "run": {"path": args.export_run, "lines": n},
            }
        atomic_write_text(outcome.summary_path, json.dumps(summary, ensure_ascii=False, indent=2) + "\n")
    print(json.dumps(summary, ensure_ascii=False, indent=2))
    if not args.quiet:
        judge = summary["judge"]
        ndcg = ", ".join(f"NDCG@{c} {v:.4f}" for c, v in judge["ndcg"].items() if v is not None)
        map_ = judge["map"]
        print(
            f"judge score: {summary['queries']} queries, mAP {map_:.4f}, {ndcg}; "
            f"unjudged {summary['unjudged']}; output {outcome.output_path}; "
            f"summary {outcome.summary_path}"
            if map_ is not None
            else f"judge score: {summary['queries']} queries, no judged passage; {outcome.output_path}",
            file=sys.stderr,
        )
    return 0
