"""``judge trec`` (trec_eval-compatible evaluation) and ``judge compare`` (significance tests)."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judge.io import (
    InputError,
    Qrels,
    Run,
    SubtopicQrels,
    join_run_qrels,
    join_run_subtopic_qrels,
    read_qrels,
    read_run,
    read_subtopic_qrels,
)
from judge.metrics import (
    EXACT_LIMIT,
    PERMUTATION_CONVENTION,
    Comparison,
    Evaluation,
    JudgedQuery,
    Measure,
    compare_scores,
    evaluate,
    format_trec_eval,
    holm_adjust,
    parse_measure_args,
)

_DEFAULT_TREC_MEASURES = ("official",)
_DEFAULT_COMPARE_MEASURES = ("map", "ndcg_cut_10", "P_10", "recip_rank")
_TIES = "score descending, then docno descending (trec_eval)"
_QRELS_HELP = "qrels file: qid iter docno grade (with diversity measures: qid subtopic docno grade)"


def register(subparsers: Any) -> None:
    trec = subparsers.add_parser(
        "trec",
        help="evaluate a TREC run against qrels exactly as trec_eval does",
        description=(
            "Evaluate RUN against QRELS with trec_eval's semantics and output layout. "
            "Measures: trec_eval names (map, P_5, ndcg_cut_10, P.5,10, all_trec, official) "
            "or short forms (AP, AP(rel=2), nDCG@10, P@5, R@100, MRR). Diversity measures "
            "(alpha_nDCG@10, alpha_nDCG(alpha=0.3)@10, ERR_IA@10, P_IA@10, StRecall@10; a bare "
            "name gives ndeval's @5,10,20) read QRELS as diversity qrels: qid subtopic docno grade."
        ),
    )
    trec.add_argument("qrels", metavar="QRELS", help=_QRELS_HELP)
    trec.add_argument("run", metavar="RUN", help="run file: qid Q0 docno rank score tag")
    _common_options(trec, default_measures=_DEFAULT_TREC_MEASURES)
    trec.add_argument("-q", dest="per_query", action="store_true", help="also print every query")
    trec.add_argument("--json", action="store_true", help='print {"all": ..., "per_query": ...} as JSON')
    trec.set_defaults(func=run_trec)

    compare = subparsers.add_parser(
        "compare",
        help="compare runs against the first with paired significance tests",
        description=(
            "Compare each later run with the first, per measure: both means, the difference, "
            "a two-sided paired randomization test, a paired t-test, a bootstrap CI of the "
            "difference, and Holm's correction across every comparison made."
        ),
    )
    compare.add_argument("qrels", metavar="QRELS", help=_QRELS_HELP)
    compare.add_argument("runs", metavar="RUN", nargs="+", help="run files; the first is the baseline")
    _common_options(compare, default_measures=_DEFAULT_COMPARE_MEASURES)
    compare.add_argument(
        "--seed",
        type=int,
        default=0,
        help=f"random seed (default 0) of the bootstrap CI, and of the randomization test past {EXACT_LIMIT} "
        "non-zero differences (up to there it counts every sign assignment)",
    )
    compare.add_argument(
        "--resamples",
        type=int,
        default=10_000,
        help=f"resamples of the bootstrap CI, and of the randomization test past {EXACT_LIMIT} non-zero "
        "differences (default 10000)",
    )
    compare.add_argument("--confidence", type=float, default=0.95, help="bootstrap CI level (default 0.95)")
    compare.add_argument("--json", action="store_true", help="print the comparisons as JSON")
    compare.set_defaults(func=run_compare)


def _common_options(parser: argparse.ArgumentParser, *, default_measures: Sequence[str]) -> None:
    parser.add_argument(
        "-m",
        "--measure",
        dest="measures",
        action="append",
        metavar="MEASURE",
        help=f"measure(s) to compute; repeatable (default: {', '.join(default_measures)})",
    )
    parser.add_argument(
        "-l", dest="level", type=int, default=1, help="minimum grade counted relevant (default 1)"
    )
    parser.add_argument(
        "-c",
        dest="complete",
        action="store_true",
        help="average over every qrels query; missing ones score 0",
    )
    parser.add_argument(
        "-M", dest="max_docs", type=int, default=None, help="use at most N documents per query"
    )
    parser.set_defaults(default_measures=tuple(default_measures))


def _measures(args: argparse.Namespace) -> tuple[Measure, ...]:
    texts: Sequence[str] = args.measures or args.default_measures
    try:
        return parse_measure_args(texts)
    except ValueError as exc:
        raise InputError(str(exc), field="-m") from None


def _check_options(args: argparse.Namespace) -> None:
    if args.level < 0:
        raise InputError(f"relevance level must be >= 0, got {args.level}", field="-l")
    if args.max_docs is not None and args.max_docs < 1:
        raise InputError(f"-M must be a positive integer, got {args.max_docs}", field="-M")


def _conventions(args: argparse.Namespace) -> dict[str, object]:
    return {
        "relevance_level": args.level,
        "complete": bool(args.complete),
        "missing_queries": "scored 0 (-c)" if args.complete else "skipped (only queries in both files)",
        "max_docs_per_query": args.max_docs,
        "ties": _TIES,
        "ap_denominator": "qrels",
        "idcg": "qrels",
        "gain": "linear",
        "unjudged": "nonrelevant",
    }


def _read_judgements(path: str, measures: Sequence[Measure]) -> Qrels | SubtopicQrels:
    """QRELS as diversity qrels (qid subtopic docno grade) when a diversity measure is asked
    for, else as ordinary qrels; the ordinary measures then use each document's largest grade."""
    if any(m.is_diversity for m in measures):
        return read_subtopic_qrels(path)
    try:
        return read_qrels(path)
    except InputError as exc:
        if not exc.message.startswith("duplicate judgement"):
            raise
        hint = "; diversity qrels (qid subtopic docno grade) are read when a diversity measure is asked for"
        raise InputError(exc.message + hint, path=exc.path, line=exc.line, field=exc.field) from None


def _evaluate(
    args: argparse.Namespace, measures: Sequence[Measure], qrels: Qrels | SubtopicQrels, run: Run
) -> Evaluation:
    conventions = _conventions(args)
    if isinstance(qrels, SubtopicQrels):
        from judge.metrics import DIVERSITY_CONVENTIONS

        conventions["diversity"] = DIVERSITY_CONVENTIONS
        joined: Iterable[JudgedQuery] = join_run_subtopic_qrels(
            qrels, run, complete=args.complete, max_docs=args.max_docs
        )
    else:
        joined = join_run_qrels(qrels, run, complete=args.complete, max_docs=args.max_docs)
    try:
        return evaluate(
            measures,
            joined,
            run_id=run.run_id,
            relevance_level=args.level,
            conventions=conventions,
        )
    except ValueError as exc:
        raise InputError(f"{exc} (qrels: {qrels.path})", path=run.path) from None


def run_trec(args: argparse.Namespace) -> int:
    _check_options(args)
    measures = _measures(args)
    qrels = _read_judgements(args.qrels, measures)
    run = read_run(args.run)
    evaluation = _evaluate(args, measures, qrels, run)
    if args.json:
        print(json.dumps(evaluation.to_json(per_query=args.per_query), ensure_ascii=False, indent=1))
    else:
        print(format_trec_eval(evaluation, per_query=args.per_query), end="")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    _check_options(args)
    if len(args.runs) < 2:
        raise InputError("compare needs at least two runs (the first is the baseline)", field="RUN")
    if args.resamples < 1:
        raise InputError(f"--resamples must be >= 1, got {args.resamples}", field="--resamples")
    if not 0.0 < args.confidence < 1.0:
        raise InputError(f"--confidence must be in (0, 1), got {args.confidence}", field="--confidence")
    measures = _measures(args)
    for m in measures:
        if m.aggregate not in ("mean", "sum") or m.is_string:
            raise InputError(f"{m.trec_name} has no per-query mean to compare", field="-m")
    qrels = _read_judgements(args.qrels, measures)
    runs = [read_run(path) for path in args.runs]
    evaluations = [_evaluate(args, measures, qrels, run) for run in runs]
    names = [Path(path).name for path in args.runs]
    comparisons: list[Comparison] = []
    base = evaluations[0]
    for name, run, other in zip(names[1:], runs[1:], evaluations[1:], strict=True):
        evaluated = set(other.qids)
        common = [q for q in base.qids if q in evaluated]
        if not common:
            raise InputError(f"no query evaluated in both {names[0]} and {name}", path=run.path)
        base_index = {q: i for i, q in enumerate(base.qids)}
        other_index = {q: i for i, q in enumerate(other.qids)}
        a_idx = np.array([base_index[q] for q in common])
        b_idx = np.array([other_index[q] for q in common])
        for m in measures:
            comparisons.append(
                compare_scores(
                    base.query_scores(m)[a_idx],
                    other.query_scores(m)[b_idx],
                    measure=m.trec_name,
                    baseline_name=names[0],
                    system_name=name,
                    resamples=args.resamples,
                    seed=args.seed,
                    confidence=args.confidence,
                )
            )
    comparisons = holm_adjust(comparisons)
    settings: dict[str, object] = {
        "baseline": names[0],
        "runs": {name: run.run_id for name, run in zip(names, runs, strict=True)},
        "seed": args.seed,
        "resamples": args.resamples,
        "permutation_test": PERMUTATION_CONVENTION,
        "t_test": "scipy.stats.ttest_rel (two-sided)",
        "bootstrap": f"percentile, {args.confidence:g} CI of the mean difference (system - baseline)",
        "multiple_comparisons": f"Holm over {len(comparisons)} comparisons (runs x measures)",
        **_conventions(args),
    }
    if args.json:
        out = {"conventions": settings, "comparisons": [c.to_json() for c in comparisons]}
        print(json.dumps(out, ensure_ascii=False, indent=1))
    else:
        print(_format_comparisons(comparisons, settings), end="")
    return 0


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "nan"
    return f"{x:.4f}"


def _format_comparisons(comparisons: Sequence[Comparison], settings: dict[str, object]) -> str:
    lines = [
        f"# baseline {settings['baseline']}; seed {settings['seed']}; {settings['resamples']} resamples; "
        f"{settings['multiple_comparisons']}; relevance level {settings['relevance_level']}",
    ]
    header = ("system", "measure", "n", "mean_base", "mean_sys", "diff", "ci_low", "ci_high", "p_perm",
              "p_perm_holm", "t", "p_t", "p_t_holm", "p_perm_method")  # fmt: skip
    rows = [header]
    for c in comparisons:
        rows.append(
            (
                c.system,
                c.measure,
                str(c.n),
                _fmt(c.mean_baseline),
                _fmt(c.mean_system),
                _fmt(c.difference),
                _fmt(c.ci_low),
                _fmt(c.ci_high),
                _fmt(c.p_permutation),
                _fmt(c.p_permutation_holm),
                _fmt(c.t_statistic),
                _fmt(c.p_t_test),
                _fmt(c.p_t_test_holm),
                c.p_permutation_method
                if c.p_permutation_method == "exact"
                else f"monte carlo, se {_fmt(c.p_permutation_se)}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "".join(line + "\n" for line in lines)
