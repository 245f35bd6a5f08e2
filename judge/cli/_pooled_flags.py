"""The flag group ``judge compare-systems`` and ``judge experiment`` share (one pooled
comparison each), and what turns it into options, a backend and a pool run.

Adding a flag to both commands: one ``add_argument`` in :func:`add_pooled_flags`, its
keyword in :func:`pooled_keywords` (the Python API's :class:`judge.systems.PooledKeywords`
builds the options of both, see ``judge/systems/_pooled_call.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from judge.cli._flags import (
    add_adapt_flag,
    add_batch_flags,
    add_example_flags,
    add_sample_label_flags,
    call_settings,
    flag_errors,
    open_backend,
    sample_label_options,
)
from judge.io import InputError
from judge.metrics import EXACT_LIMIT

if TYPE_CHECKING:
    from judge.backends import ResilientBackend
    from judge.batch import RunSpec
    from judge.judging import VerdictStore
    from judge.systems import PoolRun, SystemsOptions

T = TypeVar("T")


def add_pooled_flags(
    p: argparse.ArgumentParser, *, default_measures: str, stability_resamples: int, seed_help: str
) -> None:
    """Human labels, pool depth, measures, tests, adaptive judging, the cascade, the judge's
    batch flags (:func:`~judge.cli._flags.add_batch_flags`), ``--retry-unjudged``,
    ``--top-queries``, ``--json`` and the worked examples
    (:func:`~judge.cli._flags.add_example_flags`: run settings, read by ``run_spec_of``)."""
    from judge.systems import DEFAULT_TEST_FIGURE, TEST_FIGURES

    p.add_argument(
        "--qrels",
        default=None,
        metavar="FILE",
        help="human labels: judge only the holes. TREC qrels, or a Quepid/SRW judgment list (the "
        "query,docid,rating CSV, SRW's JSON; query texts matched to the run's queries), told by content",
    )
    p.add_argument(
        "--qrels-scale",
        choices=("quepid-0-3", "quepid-1-10", "srw-0-1", "graded-0-3", "binary"),
        default=None,
        metavar="SCALE",
        help="the ratings' scale of a CSV/SRW --qrels: quepid-0-3, quepid-1-10, srw-0-1, graded-0-3 "
        "or binary (default: detected where unambiguous; "
        "docs/guides/judgments-exchange.md states each mapping)",
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
    p.add_argument("--depth", type=int, default=None, metavar="N", help="pool only each run's top N passages")
    p.add_argument(
        "-m",
        "--measure",
        dest="measures",
        action="append",
        metavar="MEASURE",
        help=f"registry measure(s); repeatable; the first is the primary (default: {default_measures})",
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
        help=seed_help,
    )
    p.add_argument(
        "--resamples",
        type=int,
        default=10_000,
        help="resamples of the bootstrap intervals, and of the randomization test only past "
        f"{EXACT_LIMIT} non-zero per-query differences (up to there it counts every sign assignment exactly; "
        "default 10000)",
    )
    p.add_argument(
        "--stability-resamples",
        type=int,
        default=stability_resamples,
        help=f"redraws of the pool from P(yes) for order_stability (default {stability_resamples}; 0 skips)",
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
        "decision (which is better, significant or not) holds with --confidence",
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
    p.add_argument(
        "--test-figure",
        choices=TEST_FIGURES,
        default=DEFAULT_TEST_FIGURE,
        help="what the comparisons rank and test: expected (the judge's P(yes) as each passage's relevance, "
        "nothing lost to the threshold; thresholded when the judge gives no P(yes)) or thresholded (the "
        f"verdicts cut at the threshold); both are reported (default {DEFAULT_TEST_FIGURE})",
    )
    p.add_argument("--top-queries", type=int, default=10, help="queries shown in report.html (default 10)")
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
    p.add_argument(
        "--retry-unjudged",
        action="store_true",
        help="ask again for pooled pairs left unjudged by an earlier run",
    )
    p.add_argument("--json", action="store_true", help="print report.json instead of report.md")
    add_batch_flags(p, defaults=False)
    add_sample_label_flags(p)
    add_example_flags(p)
    add_adapt_flag(p)


def pooled_keywords(args: argparse.Namespace) -> dict[str, Any]:
    """The shared flags as :class:`judge.systems.PooledKeywords` (the options' part)."""
    return {
        "depth": args.depth,
        "measures": tuple(args.measures) if args.measures else None,
        "relevance_level": args.level,
        "qrels": args.qrels or None,
        "qrels_level": args.qrels_level,
        "qrels_yes_grade": args.qrels_yes_grade,
        "qrels_scale": args.qrels_scale,
        "seed": args.resample_seed,
        "resamples": args.resamples,
        "stability_resamples": args.stability_resamples,
        "confidence": args.confidence,
        "until_decided": bool(args.until_decided),
        "budget": args.budget,
        "batch": args.batch,
        "test_figure": args.test_figure,
    }


def pooled_options(args: argparse.Namespace, **extra: Any) -> SystemsOptions:
    """The :class:`~judge.systems.SystemsOptions` of the shared flags, through the Python
    API's builder (``extra``: a command's own fields); a bad value names its flag (exit 2)."""
    from judge.systems import systems_options_of

    if args.top_queries < 0:
        raise InputError("must be >= 0", field="--top-queries")
    return systems_options_of(
        pooled_keywords(args),
        top_queries=args.top_queries,
        sample_labels=sample_label_options(args),
        **extra,
    )


def open_pooled_backend(args: argparse.Namespace, spec: RunSpec) -> ResilientBackend:
    """``--backend`` or ``--cascade`` (not both) under the spec's call policy; named on
    stderr unless ``--quiet``."""
    from judge.backends import describe_backend

    backend_spec: Any = args.backend
    if args.cascade:
        from judge.backends import resolve_cascade

        if args.backend:
            raise InputError("give either --backend or --cascade, not both", field="--cascade")
        with flag_errors({"cascade": "--cascade", "margin": "--margin", "backend": "--cascade"}):
            backend_spec = resolve_cascade(args.cascade, margin=args.margin, base_url=args.base_url)
    backend = open_backend(backend_spec, args.base_url, spec.policy)
    if not args.quiet:
        print(describe_backend(backend), file=sys.stderr)
    return backend


def pooled_run(
    args: argparse.Namespace, spec: RunSpec, backend: ResilientBackend, *, command: str, **extra: Any
) -> PoolRun:
    """How the pool is judged: progress lines labelled ``command``, ``--retry-unjudged``, the
    call settings echoed in the summary (``extra``: a command's own fields)."""
    from judge.systems import PoolRun

    return PoolRun(
        spec=spec,
        progress="quiet" if args.quiet else "auto",
        command=command,
        retry_unjudged=bool(args.retry_unjudged),
        settings=call_settings(args, backend),
        **extra,
    )


def open_pool(
    args: argparse.Namespace,
    spec: RunSpec,
    options: SystemsOptions,
    *,
    command: str,
    listwise: bool = False,
    **extra: Any,
) -> tuple[ResilientBackend, PoolRun]:
    """The backend and the pool run of a pooled command, once the pool is known to honour
    ``--examples`` and ``--adapt`` (exit 2 before a backend opens; ``--adapt``'s ordering note
    on stderr unless ``--quiet``). ``extra``: the command's own :func:`pooled_run` fields."""
    from judge.systems import ADAPT_ORDER_NOTE, PoolRun, check_pool_adapt, check_pool_examples

    planned = PoolRun(spec=spec, listwise=listwise)
    check_pool_examples(planned, options, spec.config)
    check_pool_adapt(planned, options, spec.config)
    if spec.adapt and not args.quiet:
        print(f"judge: warning: {ADAPT_ORDER_NOTE}", file=sys.stderr)
    backend = open_pooled_backend(args, spec)
    return backend, pooled_run(args, spec, backend, command=command, listwise=listwise, **extra)


def run_pooled(
    args: argparse.Namespace,
    backend: ResilientBackend,
    work: Callable[[VerdictStore | None], Awaitable[T]],
) -> T:
    """``work(store)`` with the verdict cache of ``--cache``/``--no-cache``; the cache and
    the backend closed after it."""
    from judge.store import SQLiteVerdictStore

    async def go() -> T:
        store = None if args.no_cache else SQLiteVerdictStore(args.cache)
        try:
            return await work(store)
        finally:
            if store is not None:
                await store.aclose()
            await backend.aclose()

    return asyncio.run(go())
