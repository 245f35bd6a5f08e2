"""Command-line flags shared by several subcommands (not a subcommand itself)."""

from __future__ import annotations

import argparse
from typing import Any

from judge.io._errors import InputError


def add_judge_flags(p: argparse.ArgumentParser, *, defaults: bool = True) -> None:
    """``--backend``, ``--base-url``, ``--mode``, ``--language``, ``--template`` and the decision
    flags. ``defaults=False`` leaves ``--mode`` and ``--language`` None when not given, for a
    command that must tell "not given" apart (``judge score`` resumes an output in its mode)."""
    p.add_argument("--backend", default=None, help="backend spec, e.g. qwen:qwen-plus (default: auto)")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible server URL for openai:* backends")
    p.add_argument(
        "--mode",
        choices=("binary", "graded"),
        default="binary" if defaults else None,
        help="verdict kind (default binary)",
    )
    p.add_argument(
        "--language",
        choices=("zh", "en"),
        default="zh" if defaults else None,
        help="template language (default zh)",
    )
    p.add_argument("--template", default=None, help="template id or .toml path")
    add_decision_flags(p)


def add_call_flags(p: argparse.ArgumentParser) -> None:
    """``--concurrency``, ``--timeout``, ``--max-retries``: how provider calls are made."""
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="provider calls in flight (default 16, or the backend's limit)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per provider call (default 60; 600 for the embedded one-at-a-time model)",
    )
    p.add_argument(
        "--max-retries", type=int, default=5, help="retries per call on 5xx/timeouts/429 (default 5)"
    )


def add_decision_flags(p: argparse.ArgumentParser) -> None:
    """``--probability/--no-probability``, ``--p-yes-threshold``, ``--explain/--no-explain``."""
    p.add_argument(
        "--probability",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="verdicts from answer-token probabilities (default: on for the embedded model, off elsewhere)",
    )
    p.add_argument(
        "--p-yes-threshold",
        type=float,
        default=None,
        metavar="T",
        help="probability mode: yes iff P(yes) >= T (default: the template's tuned threshold)",
    )
    p.add_argument(
        "--explain",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="probability mode: also generate a short reason (default: on if probability mode is automatic)",
    )


def decision_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The JudgeConfig fields set by :func:`add_decision_flags` (None: automatic)."""
    return {
        "probability": args.probability,
        "p_yes_threshold": args.p_yes_threshold,
        "explain": args.explain,
    }


def config_error(exc: ValueError) -> InputError:
    """A :class:`JudgeConfig` refusal as bad input naming the flag (its messages start with
    the field name: ``p_yes_threshold must be in [0, 1], not 1.5`` -> ``--p-yes-threshold``)."""
    message = str(exc)
    name = message.split(" ", 1)[0]
    return InputError(message, field="--" + name.replace("_", "-") if name.isidentifier() else None)


def add_measure_flag(p: argparse.ArgumentParser) -> None:
    """``-m/--measure``: registry measures reported beside the standard figures."""
    p.add_argument(
        "-m",
        "--measure",
        dest="measures",
        action="append",
        default=[],
        metavar="MEASURE",
        help=(
            "also report this registry measure under the name given (P@3, ndcg_cut_5, AP(rel=2), "
            "rbp(p=0.8) ...; repeatable, or a comma list)"
        ),
    )


def checked_measures(texts: list[str]) -> tuple[str, ...]:
    """The ``-m`` arguments, checked against the measure registry before any work."""
    from judge.metrics import parse_named_measures

    try:
        parse_named_measures(texts)
    except ValueError as exc:
        raise InputError(str(exc), field="-m") from exc
    return tuple(texts)
