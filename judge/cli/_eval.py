"""``judge eval``: judge one query's passages from the shell (a one-off check).

    judge eval --query "小狗贫血的表现" --context "段落一" --context "段落二" [--mode graded] [--json]

Prints on stderr which judge it uses, then a table of verdicts, reasons and metrics (or
the :class:`JudgeResult` as JSON with ``--json``). Exit codes: 0 done (unjudged passages,
if any, are shown); 2 bad input or usage; 3 the backend failed permanently.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from judge.cli._flags import (
    add_call_flags,
    add_judge_flags,
    add_measure_flag,
    checked_measures,
    open_backend,
    run_spec_of,
)
from judge.io import InputError


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "eval",
        help="judge the passages of one query and print verdicts, reasons and metrics",
        description=(
            "Judge each --context passage (in rank order) for --query with the LLM judge; print a "
            "table of verdicts with reasons, the share of relevant passages, AP and NDCG@k."
        ),
        epilog="exit codes: 0 done; 2 bad input/usage; 3 backend failed permanently",
    )
    p.add_argument("--query", "-q", required=True, help="the search query")
    p.add_argument(
        "--context",
        "-c",
        action="append",
        required=True,
        metavar="PASSAGE",
        help="a retrieved passage; repeat in rank order",
    )
    add_judge_flags(p)
    add_call_flags(p)
    p.add_argument(
        "-k", type=int, nargs="+", default=[5, 10], metavar="K", help="NDCG cutoffs (default 5 10)"
    )
    add_measure_flag(p)
    p.add_argument("--no-summary", action="store_true", help="skip the summary reason (one call fewer)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    from judge.backends import describe_backend, run_sync
    from judge.judging import judge_query, with_measures

    if not args.query.strip():
        raise InputError("must not be empty", field="--query")
    for i, text in enumerate(args.context, start=1):
        if not text.strip():
            raise InputError(f"passage #{i} is empty", field="--context")
    if any(value < 1 for value in args.k):
        raise InputError("cutoffs must be positive integers", field="-k")
    measures = checked_measures(args.measures)
    spec = run_spec_of(args)
    config = spec.config
    backend = open_backend(args.backend, args.base_url, spec.policy)
    print(describe_backend(backend), file=sys.stderr)

    async def go() -> Any:
        try:
            return await judge_query(
                backend, args.query, args.context, config, k=args.k, with_summary=not args.no_summary
            )
        finally:
            await backend.aclose()

    result = with_measures(run_sync(go()), measures)
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        _print_table(result)
    return 0


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _print_table(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(soft_wrap=False)
    table = Table(title=Text(f"query: {result.query}"), show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("verdict")
    if result.mode == "graded":
        table.add_column("grade", justify="right")
    probability = any(v.p_yes is not None for v in result.verdicts)
    if probability:
        table.add_column("P(yes)", justify="right")
    expected = any(v.expected_grade is not None for v in result.verdicts)
    if expected:
        table.add_column("E(grade)", justify="right")
    table.add_column("reason", overflow="fold")
    for v in result.verdicts:
        row = [str(v.index + 1), v.verdict]
        if result.mode == "graded":
            row.append("-" if v.grade is None else str(v.grade))
        if probability:
            row.append(_fmt(v.p_yes))
        if expected:
            row.append("-" if v.expected_grade is None else f"{v.expected_grade:.2f}")
        row.append(v.reason if v.judged else f"[unjudged] {v.error or ''}")
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    ndcg = "  ".join(f"NDCG@{c} {_fmt(x)}" for c, x in result.ndcg.items())
    chosen = "".join(f"  {name} {_fmt(x)}" for name, x in result.measures.items())
    console.print(
        f"score {_fmt(result.score)}  AP {_fmt(result.ap)}  {ndcg}{chosen}  unjudged {result.unjudged}",
        highlight=False,
        markup=False,
    )
    usage = result.usage
    console.print(
        f"calls {usage.calls}  tokens {usage.prompt_tokens}+{usage.completion_tokens}  "
        f"cost {usage.cost:.4f} {usage.currency}",
        highlight=False,
        markup=False,
    )
    if result.reason:
        console.print(f"summary: {result.reason}", highlight=False, markup=False)
