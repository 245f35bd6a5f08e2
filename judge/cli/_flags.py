"""Command-line flags shared by several subcommands (not a subcommand itself)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from judge.io._errors import InputError

if TYPE_CHECKING:  # imported when used: `judge trec` never loads the backends
    from judge.backends import CallPolicy, ConfigError, ResilientBackend
    from judge.judging import JudgeConfig


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
        choices=("auto", "zh", "en"),
        default="auto" if defaults else None,
        help="template language (default auto: per query, zh when >= 20%% of the letters of the query "
        "and its passages are CJK ideographs, else en; the template chosen is recorded per verdict)",
    )
    p.add_argument("--template", default=None, help="template id or .toml path")
    add_decision_flags(p)


def add_call_flags(p: argparse.ArgumentParser) -> None:
    """The call policy's flags: ``--concurrency``, ``--timeout``, ``--max-retries``, ``--rpm``,
    ``--tpm`` (None when not given: :class:`~judge.backends.CallPolicy` holds the defaults)."""
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="provider calls in flight (default 16, or the backend's limit: 1 for the embedded model)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per provider call (default 60; 600 for the embedded one-at-a-time model)",
    )
    p.add_argument(
        "--max-retries", type=int, default=None, help="retries per call on 5xx/timeouts/429 (default 5)"
    )
    p.add_argument("--rpm", type=float, default=None, help="requests per minute limit")
    p.add_argument("--tpm", type=float, default=None, help="tokens per minute limit")


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


#: Config-object field -> the flag that sets it. Errors carry the field
#: (:class:`~judge.backends.ConfigError`); the CLI names the flag from this table, never
#: from the message text. A field no flag sets keeps its own name.
FLAG_FOR_FIELD: dict[str, str] = {
    # CallPolicy
    "concurrency": "--concurrency",
    "timeout_s": "--timeout",
    "max_retries": "--max-retries",
    "rpm": "--rpm",
    "tpm": "--tpm",
    # backend resolution
    "backend": "--backend",
    "base_url": "--base-url",
    # JudgeConfig
    "mode": "--mode",
    "language": "--language",
    "template": "--template",
    "probability": "--probability",
    "p_yes_threshold": "--p-yes-threshold",
    "explain": "--explain",
    "samples": "--samples",
    "temperature": "--temperature",
    "seed": "--seed",
}


def config_error(exc: ConfigError, flags: Mapping[str, str] | None = None) -> InputError:
    """A config object's refusal as bad input naming the flag: ``exc.field`` looked up in
    ``flags`` (a command's own additions) and :data:`FLAG_FOR_FIELD`."""
    field = exc.field
    flag = None
    if field is not None:
        flag = (flags or {}).get(field) or FLAG_FOR_FIELD.get(field) or field
    return InputError(exc.message, field=flag)


@contextmanager
def flag_errors(flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Inside: a :class:`~judge.backends.ConfigError` (a JudgeConfig, a CallPolicy, a
    backend spec) becomes an :class:`InputError` naming the flag (exit code 2)."""
    from judge.backends._base import ConfigError

    try:
        yield
    except ConfigError as exc:
        raise config_error(exc, flags) from exc


def call_policy(args: argparse.Namespace) -> CallPolicy:
    """The :class:`~judge.backends.CallPolicy` the call flags ask for (errors name the flag)."""
    from judge.backends import CallPolicy

    settings = {
        "concurrency": getattr(args, "concurrency", None),
        "timeout_s": getattr(args, "timeout", None),
        "max_retries": getattr(args, "max_retries", None),
        "rpm": getattr(args, "rpm", None),
        "tpm": getattr(args, "tpm", None),
    }
    with flag_errors():
        return CallPolicy(**{k: v for k, v in settings.items() if v is not None})


def open_backend(spec: Any, base_url: str | None, policy: CallPolicy) -> ResilientBackend:
    """The resilient backend for ``--backend``/``--base-url`` under ``policy``, through the
    one factory (:func:`judge.backends.make_backend`); a bad spec names ``--backend``."""
    from judge.backends import make_backend

    with flag_errors():
        return make_backend(spec, policy=policy, base_url=base_url)


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


def judge_config(args: argparse.Namespace, mode: str | None) -> JudgeConfig:
    """The :class:`~judge.judging.JudgeConfig` of a batch command's judge flags; ``mode``
    decided by the caller (a resumed output keeps its mode), binary when None."""
    from judge.judging import JudgeConfig

    kwargs: dict[str, Any] = {"mode": mode or "binary", **decision_kwargs(args)}
    if args.language:
        kwargs["language"] = args.language
    if args.template:
        kwargs["template"] = args.template
    with flag_errors():
        return JudgeConfig(**kwargs)
