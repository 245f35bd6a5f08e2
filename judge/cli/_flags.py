"""Command-line flags shared by several subcommands (not a subcommand itself)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from judge.backends import EMBEDDED_CONCURRENCY, EMBEDDED_MODEL_NAME
from judge.io import InputError

if TYPE_CHECKING:  # imported when used: `judge trec` never loads the backends
    from judge.backends import CallPolicy, ConfigError, ResilientBackend
    from judge.batch import RunSpec
    from judge.judging import JudgeConfig

#: ``{default:NAME}`` in a help text: the run setting's default (:func:`judge.batch.run_default`),
#: filled in when the help is shown, from where the default is defined.
_DEFAULT_MARK = re.compile(r"\{default:(\w+)\}")


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


class _RunDefaultsHelp(argparse.HelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text and "{default:" in text:
            from judge.batch import run_default

            text = _DEFAULT_MARK.sub(lambda m: _shown(run_default(m.group(1))), text)
        return text


def with_run_defaults(p: argparse.ArgumentParser) -> None:
    """Let ``p``'s help texts name run defaults as ``{default:NAME}`` (its formatter class
    gains the substitution; nothing is imported until the help is shown)."""
    cls: Any = p.formatter_class
    if not (isinstance(cls, type) and issubclass(cls, _RunDefaultsHelp)):
        p.formatter_class = type(f"RunDefaults{cls.__name__}", (_RunDefaultsHelp, cls), {})  # type: ignore[assignment]


def add_judge_flags(p: argparse.ArgumentParser, *, defaults: bool = True) -> None:
    """``--backend``, ``--base-url``, ``--mode``, ``--language``, ``--template`` and the decision
    flags. ``defaults=False`` leaves ``--mode`` and ``--language`` None when not given, for a
    command that must tell "not given" apart (``judge score`` resumes an output in its mode)."""
    p.add_argument(
        "--backend",
        default=None,
        help="backend spec, e.g. qwen:qwen-plus or qrels:FILE (default: $JUDGE_BACKEND, else "
        "qwen:qwen-plus with DASHSCOPE_API_KEY, openai:* with OPENAI_BASE_URL, else the embedded model "
        f"{EMBEDDED_MODEL_NAME}, local:qwen2.5-coder-1.5b-q4km)",
    )
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


def add_example_flags(p: argparse.ArgumentParser) -> None:
    """``--examples N`` and ``--examples-from same|nearest``: worked examples from the run's
    labels in each passage's prompt (None when not given: :class:`~judge.batch.RunSpec`
    holds the default, none)."""
    from judge.judging import MAX_EXAMPLES

    p.add_argument(
        "--examples",
        type=int,
        default=None,
        metavar="N",
        help=f"show up to N (0..{MAX_EXAMPLES}) labelled passages of the same query as worked examples "
        "before each passage (balanced yes/no, shortest first within a token budget); a labelled passage "
        "is never judged (it takes its label, no call), so never its own example; labels from the run's "
        "labels (--labels, --qrels), texts from the run's "
        "passages; needs a template with an ${examples} slot (every shipped one). Default 0",
    )
    p.add_argument(
        "--examples-from",
        choices=("same", "nearest"),
        default=None,
        help="same: the query's own labelled passages (default); nearest: those, then the labelled passages "
        "of the most similar labelled queries by the embedded BM25 (the summary says which); only with "
        "--examples N (alone it is exit 2)",
    )


ADAPT_HELP = (
    "let the run's labels (--labels, --qrels) teach a decision rule: the judge's log-odds, raw and "
    "centred on its query (with the 'dense' extra also the encoder's query similarity and relevance "
    "feedback), weighted by a logistic regression on the labels. Applied only when its "
    "leave-one-query-out kappa beats the judge alone's; every passage keeps p_yes and gains p_adapted, "
    "the summary's 'adaptation' block says what it learned and why it was (not) applied. Binary "
    "probability mode; not with --examples. On compare-systems and experiment the rule reads the "
    "log-odds only and was measured not to order configurations better. Measured in docs/agreement.md "
    "('Adapting the decision to a team's labels')"
)


def add_adapt_flag(p: argparse.ArgumentParser) -> None:
    """``--adapt``: the run's labels teach the decision rule (:attr:`RunSpec.adapt`)."""
    p.add_argument("--adapt", action="store_true", default=None, help=ADAPT_HELP)


def adapt_features_of(
    path: str,
    *,
    quiet: bool,
    field_map: Mapping[str, str] | None = None,
    max_passage_chars: int | None = None,
) -> Any:
    """``--adapt``'s extra columns (a :data:`judge.batch.FeatureFn`): the encoder's query
    similarity and relevance feedback over the dataset's texts when the bundled encoder (the
    ``dense`` extra) is installed; None otherwise (said on stderr unless ``quiet``)."""
    import sys

    from judge.io import DEFAULT_MAX_PASSAGE_CHARS
    from judge.systems import dataset_features

    features = dataset_features(
        path, field_map=field_map, max_passage_chars=max_passage_chars or DEFAULT_MAX_PASSAGE_CHARS
    )
    if features is None and not quiet:
        print("judge: --adapt without the encoder's features (pip install 'judge[dense]')", file=sys.stderr)
    return features


def add_call_flags(p: argparse.ArgumentParser) -> None:
    """The call policy's flags: ``--concurrency``, ``--timeout``, ``--max-retries``, ``--rpm``,
    ``--tpm`` (None when not given: :class:`~judge.backends.CallPolicy` holds the defaults)."""
    with_run_defaults(p)
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="provider calls in flight (default {default:concurrency}, or the backend's limit if lower: "
        f"{EMBEDDED_CONCURRENCY} for the embedded model, the reasons it decodes together; the run's "
        "summary records the concurrency in force)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per provider call (default {default:timeout_s}; {default:local_timeout_s} for the "
        "embedded one-at-a-time model)",
    )
    p.add_argument(
        "--max-retries",
        type=int,
        default=None,
        help="retries per call on 5xx/timeouts/429 (default {default:max_retries})",
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
    # RunSpec (the engine)
    "engine": "--engine",
    "workers": "--workers",
    "worker_cpus": "--worker-cpus",
    "address": "--ray-address",
    # RunSpec (worked examples)
    "examples": "--examples",
    "examples_from": "--examples-from",
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
    from judge.backends import ConfigError

    try:
        yield
    except ConfigError as exc:
        raise config_error(exc, flags) from exc


def run_spec_of(args: argparse.Namespace, *, mode: str | None = None) -> RunSpec:
    """The :class:`~judge.batch.RunSpec` of a command's judge, call and engine flags
    (:func:`judge.batch.run_spec_from_args`); ``mode`` decided by the caller (a resumed
    output keeps its mode). A bad value names its flag (exit 2), the engine flags' checks
    (:func:`check_engine_flags`) included when the command has them."""
    from judge.batch import run_spec_from_args

    if hasattr(args, "ray_address"):
        check_engine_flags(args)
    with flag_errors():
        return run_spec_from_args(args, mode=mode)


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


def judge_config(args: argparse.Namespace, mode: str | None = None) -> JudgeConfig:
    """The :class:`~judge.judging.JudgeConfig` of a command's judge flags (:func:`run_spec_of`)."""
    return run_spec_of(args, mode=mode).config


def add_cache_flags(p: argparse.ArgumentParser) -> None:
    """``--no-cache`` and ``--cache``: the verdict cache of a batch command."""
    p.add_argument("--no-cache", action="store_true", help="do not read or write the verdict cache")
    p.add_argument("--cache", default=None, help="verdict cache file (default $JUDGE_HOME/cache.sqlite)")


def add_dataset_flags(p: argparse.ArgumentParser, *, strict_help: str, map_help: str) -> None:
    """How a batch command reads and judges its dataset(s): ``--listwise``,
    ``--listwise-template``, ``--strict``, ``--quiet``, ``--map``, ``--max-passage-chars``."""
    p.add_argument(
        "--listwise",
        action="store_true",
        help="judge all passages of a query in one call (fewer calls and tokens; generated verdicts)",
    )
    p.add_argument("--listwise-template", default=None, help="listwise template id or .toml path")
    p.add_argument("--strict", action="store_true", help=strict_help)
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--map", action="append", default=[], metavar="NAME=FIELD", help=map_help)
    p.add_argument(
        "--max-passage-chars", type=int, default=None, help="truncate longer passages (default 8000)"
    )


def add_batch_flags(p: argparse.ArgumentParser, *, defaults: bool = True, engine: bool = False) -> None:
    """The flags of every batch command (``judge score``, ``judge compare-systems``,
    ``judge serve``): the judge flags (:func:`add_judge_flags`), the call flags
    (:func:`add_call_flags`) and the cache flags (:func:`add_cache_flags`); ``engine``: the
    engine flags too (:func:`add_engine_flags`, checked by :func:`run_spec_of`, shipped to
    Ray workers by :func:`ray_ship`)."""
    add_judge_flags(p, defaults=defaults)
    add_call_flags(p)
    add_cache_flags(p)
    if engine:
        add_engine_flags(p)


def cache_setting(args: argparse.Namespace) -> str | None:
    """The verdict cache as a run's summary echoes it."""
    return None if args.no_cache else str(args.cache or "default")


def call_settings(args: argparse.Namespace, backend: ResilientBackend) -> dict[str, Any]:
    """The call settings in force as a run's summary echoes them (the backend's timeout and
    retries: the defaults made concrete) and the cache."""
    return {
        "rpm": args.rpm,
        "tpm": args.tpm,
        "timeout_s": backend.timeout_s,
        "max_retries": backend.max_retries,
        "cache": cache_setting(args),
    }


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """``--engine``, ``--ray-address``, ``--workers``, ``--worker-cpus`` (None when not given:
    :class:`~judge.batch.RunSpec` holds the defaults)."""
    with_run_defaults(p)
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default=None,
        help="who judges: this process (local, default) or a Ray cluster's actors (needs judge[ray])",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="--engine ray: join this cluster (auto, HOST:PORT); default: start a local one",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="--engine ray: judging actors (default {default:workers})"
    )
    p.add_argument(
        "--worker-cpus",
        type=float,
        default=None,
        help="--engine ray: CPUs per actor (the embedded model's threads; default {default:worker_cpus})",
    )


def check_engine_flags(args: argparse.Namespace) -> None:
    """The Ray engine's flags need ``--engine ray`` (exit 2 before any work)."""
    if getattr(args, "engine", None) != "ray":
        for flag, value in (("--ray-address", args.ray_address), ("--workers", args.workers)):
            if value is not None:
                raise InputError("needs --engine ray", field=flag)


def ray_ship(args: argparse.Namespace, spec: RunSpec) -> Any:
    """What the Ray engine's workers build their backend from: ``--backend`` and
    ``--base-url`` as a :class:`~judge.batch.BackendSpec` (never a pickled client); None for
    the local engine, and for a backend that is no spec (``--backend-factory``,
    ``--cascade``: shipped as it is, pickled)."""
    if not spec.ray or getattr(args, "backend_factory", None) or getattr(args, "cascade", None):
        return None
    from judge.batch import BackendSpec

    return BackendSpec(args.backend, args.base_url)


def add_sample_label_flags(p: argparse.ArgumentParser, *, confidence: bool = False) -> None:
    """``--sample-labels FILE`` and ``--sample-level L`` (prediction-powered figures from a
    random sample of human labels); ``confidence=True`` also adds ``--confidence`` (for a
    command that has none of its own)."""
    p.add_argument(
        "--sample-labels",
        default=None,
        metavar="FILE",
        help="TREC qrels of pairs drawn uniformly at random from the run's pairs and labelled by "
        "people (a 5th column: each pair's inclusion probability, for a weighted sample): the "
        "summary/report gains 'ppi', the judge's figures corrected by them with intervals; a pair "
        "not in the run is refused (exit 2) before any call",
    )
    p.add_argument(
        "--sample-level",
        type=int,
        default=None,
        metavar="L",
        help="--sample-labels: a grade >= L is relevant (yes) (default 1; stated in the output)",
    )
    p.add_argument(
        "--allow-unlabelled",
        action="store_true",
        help="--sample-labels: give the intervals though drawn pairs the file names as left unlabelled "
        "(grade -1) miss their labels, as a conservative bound that holds whatever labels they have "
        "(the counts are the labelled pairs'; default: the estimate without an interval)",
    )
    if confidence:
        p.add_argument(
            "--confidence",
            type=float,
            default=0.95,
            help="--sample-labels: interval level (default 0.95)",
        )


def sample_label_options(args: argparse.Namespace) -> Any:
    """The :class:`~judge.batch.SampleLabelOptions` of ``--sample-labels`` (None when not
    given); the file is read and checked here (exit 2 naming its line). ``--sample-level``
    or ``--allow-unlabelled`` without ``--sample-labels`` is refused (exit 2): it would do
    nothing."""
    if not getattr(args, "sample_labels", None):
        for flag, value in (
            ("--sample-level", args.sample_level),
            ("--allow-unlabelled", args.allow_unlabelled),
        ):
            if value not in (None, False):
                raise InputError(f"{flag} is only used with --sample-labels", field=flag)
        return None
    from judge.batch import SampleLabelOptions
    from judge.io import read_sample_labels

    return SampleLabelOptions(
        read_sample_labels(args.sample_labels),
        level=1 if args.sample_level is None else args.sample_level,
        confidence=float(getattr(args, "confidence", 0.95)),
        allow_unlabelled=bool(args.allow_unlabelled),
    )
