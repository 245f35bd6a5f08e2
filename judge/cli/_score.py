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

from judge.cli._flags import add_call_flags, add_judge_flags, config_error, decision_kwargs
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
    p.add_argument("--rpm", type=float, default=None, help="requests per minute limit")
    p.add_argument("--tpm", type=float, default=None, help="tokens per minute limit")
    p.add_argument(
        "-k", type=int, nargs="+", default=[5, 10], metavar="K", help="NDCG/P cutoffs (default 5 10)"
    )
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
            "(names: id, query, retrieval_context, expected_ids, qrels, text, passage_id)"
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
        "--borderline-margin",
        type=float,
        default=0.02,
        metavar="P",
        help="count verdicts whose P(yes) is within P of the threshold as borderline (default 0.02)",
    )
    p.add_argument("--progress-interval", type=float, default=5.0, help=argparse.SUPPRESS)
    p.set_defaults(func=run_score)


def _config(args: argparse.Namespace, mode: str | None) -> Any:
    from judge.judging import JudgeConfig

    kwargs: dict[str, Any] = {"mode": mode or "binary", **decision_kwargs(args)}
    if args.language:
        kwargs["language"] = args.language
    if args.template:
        kwargs["template"] = args.template
    try:
        return JudgeConfig(**kwargs)
    except ValueError as exc:
        raise config_error(exc) from exc


def _positive(value: float | None, flag: str) -> None:
    if value is not None and value <= 0:
        raise InputError("must be > 0", field=flag)


def _mode_of_output(path: Path) -> str | None:
    from judge.store import recover_output

    records = recover_output(path)
    return str(records[0]["mode"]) if records else None


def run_score(args: argparse.Namespace) -> int:
    from judge.backends import describe_backend, ensure_resilient, resolve_backend
    from judge.batch import (
        BatchOptions,
        ProgressMode,
        default_output_path,
        read_output,
        retry_unjudged,
        score_dataset,
    )
    from judge.batch._export import write_qrels, write_run
    from judge.io._jsonl import DEFAULT_MAX_PASSAGE_CHARS, parse_field_map
    from judge.store import SQLiteVerdictStore, atomic_write_text

    if args.retry_unjudged and args.input:
        raise InputError(
            "give either INPUT or --retry-unjudged OUTPUT.jsonl, not both", field="--retry-unjudged"
        )
    if not args.retry_unjudged and not args.input:
        raise InputError("missing INPUT.jsonl (or --retry-unjudged OUTPUT.jsonl)", field="input")
    for value, flag in ((args.concurrency, "--concurrency"), (args.rpm, "--rpm"), (args.tpm, "--tpm")):
        _positive(value, flag)
    _positive(args.timeout, "--timeout")
    if not 0.0 <= args.borderline_margin <= 1.0:
        raise InputError("must be within [0, 1]", field="--borderline-margin")
    if args.max_passage_chars is not None and args.max_passage_chars < 1:
        raise InputError("must be >= 1", field="--max-passage-chars")
    if any(k < 1 for k in args.k):
        raise InputError("cutoffs must be positive integers", field="-k")
    field_map = parse_field_map(args.map)

    if args.retry_unjudged:
        output = Path(args.retry_unjudged)
        if not output.exists():
            raise InputError("no such file", path=str(output))
        mode = args.mode or _mode_of_output(output)
    else:
        output = Path(args.output) if args.output else default_output_path(args.input)
        mode = args.mode
    config = _config(args, mode)

    inner = resolve_backend(args.backend, base_url=args.base_url)
    if not args.quiet:
        print(describe_backend(inner), file=sys.stderr)
    concurrency = args.concurrency
    if concurrency is None:
        concurrency = 16
        if inner.max_concurrency is not None:
            concurrency = min(concurrency, inner.max_concurrency)
    backend = ensure_resilient(
        inner,
        max_retries=args.max_retries,
        timeout_s=args.timeout,
        rpm=args.rpm,
        tpm=args.tpm,
        concurrency=concurrency,
    )
    progress: ProgressMode = "quiet" if args.quiet else "auto"
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
        borderline_margin=args.borderline_margin,
        settings={
            "rpm": args.rpm,
            "tpm": args.tpm,
            "timeout_s": backend.timeout_s,
            "max_retries": args.max_retries,
            "cache": None if args.no_cache else str(args.cache or "default"),
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

    outcome = asyncio.run(go())
    summary = outcome.summary
    if args.export_qrels or args.export_run:
        records = read_output(outcome.output_path)
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
