"""``judge stability`` and ``judge nightly``: re-run the judge and check that mAP holds still.

Exit codes: 0 the relative spread is within the threshold (or ``--compare-settings``
finished: it measures, each setting's pass/fail is in its table); 1 breach; 2 bad input or
usage (nothing judged); 3 the backend failed permanently; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from judge.cli._flags import (
    adapt_features_of,
    add_adapt_flag,
    add_call_flags,
    add_judge_flags,
    open_backend,
    run_spec_of,
)
from judge.io import InputError

EXIT_PASS = 0
EXIT_BREACH = 1


def _judge_flags(p: argparse.ArgumentParser) -> None:
    add_judge_flags(p)
    p.add_argument(
        "--samples",
        type=int,
        default=None,
        metavar="N",
        help="majority vote over N samples per passage (default {default:samples})",
    )
    p.add_argument(
        "--temperature", type=float, default=None, help="sampling temperature (default {default:temperature})"
    )
    seed = p.add_mutually_exclusive_group()
    seed.add_argument(
        "--seed", type=int, default=None, help="seed sent to the backend (default {default:seed})"
    )
    seed.add_argument("--no-seed", action="store_true", help="send no seed")
    add_call_flags(p)


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "stability",
        help="judge a dataset K times (cache bypassed) and check that mAP moves less than a threshold",
        description=(
            "Judge every passage of DATASET.jsonl --runs times with the verdict cache bypassed, "
            "keep every run's verdicts (REPORT_DIR/runs/run-<i>.jsonl), and report per-run mAP, "
            "mean score and NDCG@k, their relative spread ((max-min)/mean) and CV across runs, the "
            "verdict flip rate, Fleiss' kappa and Krippendorff's alpha across runs, a bootstrap CI "
            "over queries beside the run-to-run spread, and the least stable queries and passages "
            "(REPORT_DIR/report.json, report.md, *.png). With --labels, a labelled passage has its "
            "label in every run; with --adapt, every run is first decided by the rule the same labels "
            "teach (one labels_sha256 for the report), so the figures measure the adapted verdicts."
        ),
        epilog="exit codes: 0 pass; 1 breach (spread > threshold); 2 bad input/usage; 3 backend failed",
    )
    p.add_argument("dataset", help="dataset JSONL (or .jsonl.gz): id, query, retrieval_context")
    p.add_argument("--runs", type=int, default=3, metavar="K", help="judgments of the dataset (default 3)")
    _judge_flags(p)
    p.add_argument(
        "--threshold", type=float, default=0.01, help="largest relative spread allowed (default 0.01)"
    )
    p.add_argument(
        "--metric",
        default="map",
        help=(
            "checked figure: map (default), expected_map (probability-weighted), score, ndcg@K "
            "or any registry measure (P@3, AP(rel=2) ...)"
        ),
    )
    p.add_argument(
        "--borderline-margin",
        type=float,
        default=0.02,
        metavar="P",
        help="list verdicts whose P(yes) is within P of the threshold as borderline (default 0.02)",
    )
    p.add_argument(
        "-k", type=int, nargs="+", default=[5, 10], metavar="K", help="NDCG cutoffs (default 5 10)"
    )
    p.add_argument("-o", "--output", default=None, metavar="REPORT_DIR", help="report directory")
    p.add_argument("--top", type=int, default=10, help="least stable queries/passages to list (default 10)")
    p.add_argument(
        "--bootstrap", type=int, default=2000, metavar="N", help="bootstrap resamples (default 2000)"
    )
    p.add_argument("--bootstrap-seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument(
        "--compare-settings",
        action="store_true",
        help="run the harness once per variance-reduction setting and tabulate the spreads",
    )
    p.add_argument(
        "--settings",
        default="baseline,t0-seed,vote,probability",
        help="settings for --compare-settings (default baseline,t0-seed,vote,probability)",
    )
    p.add_argument("--vote-samples", type=int, default=5, help="samples of the vote setting (default 5)")
    p.add_argument(
        "--sampled-temperature",
        type=float,
        default=0.7,
        help="temperature of the baseline/vote settings when --temperature is 0 (default 0.7)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    from judge.cli._label_commands import add_label_flags

    add_label_flags(p)
    add_adapt_flag(p)
    p.set_defaults(func=run_stability_command)

    n: argparse.ArgumentParser = subparsers.add_parser(
        "nightly",
        help="the nightly stability job: run the harness from a config, append history, redraw the trend",
        description=(
            "Run the stability harness as CONFIG (JSON or TOML) says, write the night's report into "
            "a new dated directory under report_dir, append the result to the history JSONL and redraw "
            "the trend plot. Prints a BREACH line on stderr and exits 1 when the spread is over the "
            "threshold. A config with a [search] section watches a search engine instead: each night "
            "searches the query set, judges only new pairs, compares with the baseline run by the "
            "paired test and exits 1 (ALERT) when a measure drops significantly."
        ),
        epilog="exit codes: 0 pass; 1 breach, or a significant drop of a [search] section; "
        "2 bad config/input; 3 backend failed",
    )
    n.add_argument("config", help="nightly config (.json or .toml)")
    n.add_argument("--quiet", action="store_true", help="no progress lines")
    n.set_defaults(func=run_nightly_command)


def _nightly_policy(cfg: Any, path: str) -> Any:
    """The call policy of a nightly config; a bad setting names the config file and key."""
    from judge.backends import ConfigError
    from judge.batch import run_spec

    try:
        spec = run_spec(
            concurrency=cfg.options.concurrency, timeout_s=cfg.timeout_s, max_retries=cfg.max_retries
        )
    except ConfigError as exc:
        raise InputError(exc.message, path=path, field=exc.field) from exc
    return spec.policy


def _describe(backend: Any) -> str:
    from judge.backends import describe_backend

    text = str(describe_backend(backend))
    return text.removeprefix("judge: using judge ")


class _QueryProgress:
    """A progress line at most every ``interval_s`` seconds: run i, queries done."""

    def __init__(self, quiet: bool, runs: int, interval_s: float = 30.0) -> None:
        self.quiet, self.runs, self.interval_s = quiet, runs, interval_s
        self.last = time.monotonic()

    def __call__(self, run_index: int, done: int, total: int) -> None:
        now = time.monotonic()
        if self.quiet or now - self.last < self.interval_s:
            return
        self.last = now
        print(
            f"judge stability: run {run_index + 1}/{self.runs}: {done}/{total} queries judged",
            file=sys.stderr,
            flush=True,
        )


def _progress(quiet: bool, runs: int, label: str = "") -> Any:
    def on_run(run: Any) -> None:
        if quiet:
            return
        from judge.stability import parse_metric

        value = run.figure(parse_metric("map", ()))
        print(
            f"judge stability: {label}run {run.index + 1}/{runs} done: "
            f"mAP {value:.4f} ({run.elapsed_s:.1f} s)",
            file=sys.stderr,
            flush=True,
        )

    return on_run


def _check_adapt(args: argparse.Namespace, spec: Any, options: Any) -> None:
    """``--adapt``: refused before any call where it cannot learn (as ``judge score``
    refuses it: no labels, graded, no P(yes)) and with ``--compare-settings`` (exit 2)."""
    from judge.batch import check_adapt

    if args.compare_settings:
        raise InputError(
            "cannot be used with --compare-settings: its baseline, t0-seed and vote settings have no "
            "P(yes) to adapt, and adapting one setting would compare unlike verdicts; measure the "
            "adapted verdicts with judge stability --adapt --probability instead",
            field="--adapt",
        )
    check_adapt(spec.config, labels=options.labels, examples_active=spec.examples.active)


def run_stability_command(args: argparse.Namespace) -> int:
    from judge.cli._label_commands import label_set_of
    from judge.stability import (
        StabilityOptions,
        compare_settings,
        load_records,
        require_plots,
        run_stability,
        summary_lines,
        variance_settings,
        write_report,
    )

    require_plots()  # the report's plots: fail before any judging when matplotlib is missing

    options = StabilityOptions(
        runs=args.runs,
        threshold=args.threshold,
        metric=args.metric,
        k=tuple(dict.fromkeys(args.k)),
        bootstrap_resamples=args.bootstrap,
        bootstrap_seed=args.bootstrap_seed,
        top=args.top,
        borderline_margin=args.borderline_margin,
        labels=label_set_of(args),
        labels_level=args.labels_level,
        labels_yes_grade=args.labels_yes_grade,
    )
    spec = run_spec_of(args)
    config = spec.config
    if spec.adapt:
        _check_adapt(args, spec, options)
    settings = None
    if args.compare_settings:
        from judge.batch import run_default

        names = [s.strip() for s in args.settings.split(",") if s.strip()]
        settings = variance_settings(
            config,
            names=names,
            vote_samples=args.vote_samples,
            sampled_temperature=args.sampled_temperature,
            seed=config.seed if config.seed is not None else run_default("seed"),
        )
    records = load_records(args.dataset)  # bad input fails here, before any backend work
    if spec.adapt:  # the encoder's column over DATASET's texts (None without the dense extra)
        options = replace(options, adapt_features=adapt_features_of(args.dataset, quiet=args.quiet))
    out_dir = Path(args.output) if args.output else Path(f"{Path(args.dataset).name.split('.')[0]}.stability")
    backend = open_backend(args.backend, args.base_url, spec.policy)
    description = _describe(backend)
    if not args.quiet:
        print(f"judge: using judge {description}", file=sys.stderr)

    async def go() -> Any:
        try:
            if settings is not None:
                return await compare_settings(
                    backend,
                    records,
                    settings,
                    options,
                    out_dir,
                    dataset=args.dataset,
                    backend_description=description,
                    on_run=lambda name, run: _progress(args.quiet, options.runs, f"{name}: ")(run),
                    on_query=_QueryProgress(args.quiet, options.runs),
                )
            return await run_stability(
                backend,
                records,
                spec,
                options,
                dataset=args.dataset,
                backend_description=description,
                runs_dir=out_dir / "runs",
                on_run=_progress(args.quiet, options.runs),
                on_query=_QueryProgress(args.quiet, options.runs),
            )
        finally:
            await backend.aclose()

    result = asyncio.run(go())
    if settings is not None:
        print((out_dir / "settings.md").read_text(encoding="utf-8"))
        for outcome in result:  # a plot of a setting's report that could not be drawn
            for warning in outcome.report.data.get("warnings", ()) if outcome.report is not None else ():
                print(f"judge stability: warning: {outcome.setting.name}: {warning}", file=sys.stderr)
        print(f"judge stability: settings table in {out_dir / 'settings.md'}", file=sys.stderr)
        return EXIT_PASS
    report = result
    paths = write_report(report, out_dir)
    print("\n".join(summary_lines(report)))
    for run in (report.data.get("adaptation") or {}).get("runs", []):
        if run.get("warning"):  # the rule inverted the judge and was not applied
            print(
                f"judge stability: warning: --adapt, run {run['run']}: {run['reason']}. {run['warning']}",
                file=sys.stderr,
            )
    for warning in report.data.get("warnings", ()):  # a plot that could not be drawn
        print(f"judge stability: warning: {warning}", file=sys.stderr)
    print(f"judge stability: report in {paths['markdown']} and {paths['json']}", file=sys.stderr)
    if not report.passed:
        print(_breach_line(report), file=sys.stderr)
    return int(report.exit_code)


def _breach_line(report: Any, name: str = "") -> str:
    d = report.data
    chk = d["check"]
    spread = "inf" if chk["relative_spread"] is None else f"{chk['relative_spread']:.2%}"
    who = f" [{name}]" if name else ""
    return (
        f"BREACH{who}: judge stability: {chk['metric']} relative spread {spread} > threshold "
        f"{chk['threshold']:.2%} over {d['settings']['runs']} runs "
        f"(dataset {d['dataset']['path']}, backend {d['backend']})"
    )


def run_nightly_command(args: argparse.Namespace) -> int:
    from judge.stability import load_nightly_config, load_records, require_plots, run_nightly, summary_lines
    from judge.systems import has_search_section

    if has_search_section(args.config):
        from judge.cli._experiment import run_search_nightly_cli

        return run_search_nightly_cli(args)

    require_plots()  # the trend plot: fail before any judging when matplotlib is missing
    cfg = load_nightly_config(args.config)
    records = load_records(cfg.dataset)
    backend = open_backend(cfg.backend, cfg.base_url, _nightly_policy(cfg, args.config))
    description = _describe(backend)
    if not args.quiet:
        print(f"judge: using judge {description}", file=sys.stderr)

    async def go() -> Any:
        try:
            return await run_nightly(
                cfg,
                backend,
                records=records,
                backend_description=description,
                on_run=_progress(args.quiet, cfg.options.runs),
                on_query=_QueryProgress(args.quiet, cfg.options.runs),
            )
        finally:
            await backend.aclose()

    outcome = asyncio.run(go())
    print("\n".join(summary_lines(outcome.report)))
    for warning in outcome.warnings:  # a plot that could not be drawn
        print(f"judge nightly: warning: {warning}", file=sys.stderr)
    print(
        f"judge nightly: report {outcome.report_dir}; history {outcome.history} "
        f"({outcome.entry['status']}); trend {outcome.trend_plot}",
        file=sys.stderr,
    )
    if outcome.entry.get("fingerprint_changed"):
        print(
            f"judge nightly: the backend fingerprint changed since the last night "
            f"({outcome.entry['previous_fingerprint']} -> {outcome.entry['backend_fingerprint']}): "
            "figures may move because of the machine or the llama.cpp build, not the judge",
            file=sys.stderr,
        )
    if not outcome.passed:
        print(_breach_line(outcome.report, cfg.name), file=sys.stderr, flush=True)
        return EXIT_BREACH
    return EXIT_PASS
