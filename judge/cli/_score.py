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
    adapt_features_of,
    add_adapt_flag,
    add_batch_flags,
    add_dataset_flags,
    add_engine_flags,
    add_example_flags,
    add_measure_flag,
    add_sample_label_flags,
    call_settings,
    check_engine_flags,
    checked_measures,
    open_backend,
    ray_ship,
    run_spec_of,
    sample_label_options,
)
from judge.cli._label_commands import add_label_flags, calibrated_threshold, label_set_of
from judge.io import InputError


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
    p.add_argument(
        "-o",
        "--output",
        help="output JSONL (default: INPUT.judged.jsonl beside the input); one record per query, "
        "appended as each query finishes (so a kill loses nothing), each with its input line "
        "number in 'line': sort by it for input order (the server's results and viewer do)",
    )
    add_batch_flags(p, defaults=False)
    add_dataset_flags(
        p,
        strict_help="check the whole file first; refuse it on any problem",
        map_help=(
            "read NAME from FIELD "
            "(names: id, query, retrieval_context, expected_ids, qrels, expected_output, text, "
            "passage_id, url)"
        ),
    )
    p.add_argument(
        "-k", type=int, nargs="+", default=[5, 10], metavar="K", help="NDCG/P cutoffs (default 5 10)"
    )
    add_measure_flag(p)
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
    add_engine_flags(p)
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
    add_sample_label_flags(p, confidence=True)
    add_example_flags(p)
    add_adapt_flag(p)
    p.add_argument(
        "--calibration",
        default=None,
        metavar="NAME",
        help="use the P(yes) threshold of a named calibration (judge calibrate) for this template",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the summary JSON on stdout even on a terminal (a terminal gets a short table "
        "and the summary file's path; a pipe or a file always gets the JSON)",
    )
    p.add_argument("--progress-interval", type=float, default=5.0, help=argparse.SUPPRESS)
    p.set_defaults(func=run_score)


def _extras(args: argparse.Namespace) -> Any:
    from judge.io import read_site_priors
    from judge.judging import ExtraOptions

    priors = read_site_priors(args.site_priors) if args.site_priors else None
    return ExtraOptions(
        recall=not args.no_recall, source_quality=bool(args.source_quality), site_priors=priors
    )


def _mode_of_output(path: Path) -> str | None:
    from judge.store import iter_output

    first = next(iter_output(path, repair=False), None)  # one line read, not the file
    return str(first[1]["mode"]) if first is not None else None


def _check_args(args: argparse.Namespace) -> None:
    """Usage and value checks that need no file and no backend (exit 2)."""
    if args.retry_unjudged and args.input:
        raise InputError(
            "give either INPUT or --retry-unjudged OUTPUT.jsonl, not both", field="--retry-unjudged"
        )
    if not args.retry_unjudged and not args.input:
        raise InputError("missing INPUT.jsonl (or --retry-unjudged OUTPUT.jsonl)", field="input")
    if not 0.0 <= args.borderline_margin <= 1.0:
        raise InputError("must be within [0, 1]", field="--borderline-margin")
    if not 1 <= args.qrels_level <= 3:
        raise InputError(f"must be in 1..3, got {args.qrels_level}", field="--qrels-level")
    if args.max_passage_chars is not None and args.max_passage_chars < 1:
        raise InputError("must be >= 1", field="--max-passage-chars")
    if any(k < 1 for k in args.k):
        raise InputError("cutoffs must be positive integers", field="-k")
    check_engine_flags(args)


def _output_and_mode(args: argparse.Namespace) -> tuple[Path, str | None]:
    """The output file and the mode (``--mode``, else a resumed output's)."""
    from judge.batch import default_output_path

    if args.retry_unjudged:
        output = Path(args.retry_unjudged)
        if not output.exists():
            raise InputError("no such file", path=str(output))
        return output, args.mode or _mode_of_output(output)
    return (Path(args.output) if args.output else default_output_path(args.input)), args.mode


def _options(args: argparse.Namespace, spec: Any, backend: Any, executor: Any, given: dict[str, Any]) -> Any:
    """The batch options of the command line (``given``: what was read before the backend
    was opened), the run spec and the opened backend."""
    from judge.batch import BatchOptions
    from judge.io import DEFAULT_MAX_PASSAGE_CHARS

    return BatchOptions(
        k=tuple(dict.fromkeys(args.k)),
        concurrency=spec.concurrency_for(backend),
        window=spec.window,
        max_passage_chars=args.max_passage_chars or DEFAULT_MAX_PASSAGE_CHARS,
        strict=bool(args.strict),
        progress="quiet" if args.quiet else "auto",
        progress_interval_s=args.progress_interval,
        listwise=bool(args.listwise or args.listwise_template),
        listwise_template=args.listwise_template,
        executor=executor,
        borderline_margin=args.borderline_margin,
        qrels_level=args.qrels_level,
        adapt=spec.adapt,
        adapt_features=_adapt_features(args, spec, given),
        **given,
        settings={
            **spec.engine_settings(),
            **call_settings(args, backend),
            "contextual_recall": not args.no_recall,
            "source_quality": "judge" if args.source_quality else ("priors" if args.site_priors else None),
            "site_priors": args.site_priors,
            "calibration": args.calibration,
        },
    )


def _adapt_features(args: argparse.Namespace, spec: Any, given: dict[str, Any]) -> Any:
    """``--adapt``'s extra columns over INPUT's texts (:func:`adapt_features_of`)."""
    if not spec.adapt or not args.input:
        return None
    return adapt_features_of(
        args.input, quiet=args.quiet, field_map=given["field_map"], max_passage_chars=args.max_passage_chars
    )


def _exports(args: argparse.Namespace, outcome: Any) -> None:
    """``--export-qrels``/``--export-run``: write them and note them in the summary."""
    from judge.batch import write_qrels, write_run
    from judge.store import atomic_write_text, recover_output

    if not (args.export_qrels or args.export_run):
        return
    summary = outcome.summary
    records = recover_output(outcome.output_path)
    exports = dict(summary.get("exports", {}))
    if args.export_qrels:
        exports["qrels"] = {"path": args.export_qrels, "lines": write_qrels(records, args.export_qrels)}
    if args.export_run:
        exports["run"] = {"path": args.export_run, "lines": write_run(records, args.export_run, args.run_tag)}
    summary["exports"] = exports
    atomic_write_text(outcome.summary_path, json.dumps(summary, ensure_ascii=False, indent=2) + "\n")


def _report(args: argparse.Namespace, outcome: Any) -> None:
    """The summary on stdout: the JSON when stdout is not a terminal (a pipe, a file: what
    scripts read) or with ``--json``, else a short table with where the JSON was written; on
    stderr (unless ``--quiet``) one closing line when stdout is not the terminal's."""
    summary = outcome.summary
    if sys.stdout.isatty() and not args.json:
        from judge.cli._summary_table import summary_table

        print(summary_table(summary, outcome.output_path, outcome.summary_path))
        return
    print(json.dumps(summary, ensure_ascii=False, indent=2))
    refused = (summary.get("adaptation") or {}).get("warning")
    if refused:  # the rule inverted the judge and was not applied: said even with --quiet
        print(f"judge score: warning: --adapt: {summary['adaptation']['reason']}. {refused}", file=sys.stderr)
    if args.quiet:
        return
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


def _example_bank(
    args: argparse.Namespace, spec: Any, config: Any, given: dict[str, Any], labels: dict[str, Any]
) -> Any:
    """``--examples``: the labelled passages of INPUT (``nearest``: with their neighbours),
    checked before any call (exit 2: no labels, a template without the slot, listwise,
    ``--retry-unjudged``)."""
    from judge.batch import BatchOptions, check_examples, dataset_example_bank
    from judge.io import DEFAULT_MAX_PASSAGE_CHARS
    from judge.systems import with_neighbours

    if not spec.examples.active:
        return None
    if args.retry_unjudged:
        raise InputError(
            "cannot be used with --retry-unjudged (the output holds no labelled passage's text): "
            "score INPUT into a new output instead",
            field="--examples",
        )
    bank = dataset_example_bank(
        args.input,
        labels["labels"],
        spec.examples,
        config.mode,
        grade_threshold=config.grade_threshold,
        level=labels["labels_level"],
        yes_grade=labels["labels_yes_grade"],
        field_map=given["field_map"],
        max_passage_chars=args.max_passage_chars or DEFAULT_MAX_PASSAGE_CHARS,
    )
    check_examples(
        BatchOptions(examples=bank, listwise=bool(args.listwise or args.listwise_template)), config
    )
    return with_neighbours(bank) if bank is not None else None


def run_score(args: argparse.Namespace) -> int:
    from judge.backends import describe_backend
    from judge.batch import (
        BatchOptions,
        check_adapt,
        check_labels,
        executor_for,
        retry_unjudged,
        score_dataset,
    )
    from judge.io import parse_field_map
    from judge.store import SQLiteVerdictStore

    _check_args(args)
    given: dict[str, Any] = {
        "field_map": parse_field_map(args.map),
        "measures": checked_measures(args.measures),
        "extras": _extras(args),
    }
    output, mode = _output_and_mode(args)
    spec = run_spec_of(args, mode=mode)
    config = calibrated_threshold(args.calibration, spec.config, args.labels_store)
    labels = {
        "labels": label_set_of(args),
        "labels_level": args.labels_level,
        "labels_yes_grade": args.labels_yes_grade,
        "sample_labels": sample_label_options(args),
    }
    check_labels(BatchOptions(**labels), config)  # a scale mismatch: exit 2 before any call
    if spec.adapt:
        check_adapt(config, labels=labels["labels"], examples_active=spec.examples.active)
    given["examples"] = _example_bank(args, spec, config, given, labels)

    backend = open_backend(args.backend, args.base_url, spec.policy)
    if not args.quiet:
        print(describe_backend(backend), file=sys.stderr)
    from judge.judging import examples_caution

    caution = examples_caution(given["examples"], config, backend.name)
    if caution is not None:  # also in the summary's examples.warning
        print(f"judge score: warning: --examples: {caution}", file=sys.stderr)
    executor = executor_for(spec, backend, ray_ship(args, spec))
    options = _options(args, spec, backend, executor, given | labels)

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
    _exports(args, outcome)
    _report(args, outcome)
    return 0
