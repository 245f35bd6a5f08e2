"""One run specification: :class:`RunSpec`, the settings of a run as one value.

A run is judged with a :class:`~judge.judging.JudgeConfig` (how one passage is judged), a
:class:`~judge.backends.CallPolicy` (how provider calls are made) and an engine (who
judges: this process, or a Ray cluster's ``workers`` actors with ``window`` passages
handed out at once). Every entry point builds one :class:`RunSpec` through the same
resolution (:func:`run_spec`), then hands it on unchanged to whatever runs it (the
executors, ``PoolRun``, the stability harness, the server's jobs):

* :func:`run_spec_from_args`: the command line (an ``argparse.Namespace`` of the shared
  judge, call and engine flags);
* :func:`run_spec_from_job_options`: a server job's options over the server's own spec;
* :func:`run_spec_from_kwargs`: Python keyword arguments (``judge.evaluate``,
  ``judge.compare_systems``).

Every default is written once: the call defaults in :mod:`judge.backends._policy`
(``DEFAULT_CONCURRENCY``, ``DEFAULT_MAX_RETRIES``, ``REMOTE_TIMEOUT_S``,
``LOCAL_TIMEOUT_S``), the judging defaults on :class:`~judge.judging.JudgeConfig`'s fields
(``grade_threshold``; ``p_yes_threshold=None``: the template's tuned threshold), the engine
defaults here (:data:`DEFAULT_WORKERS`, :data:`DEFAULT_WORKER_CPUS`; the window is twice the
run's concurrency). ``None`` means "not given: the default" in every builder and every
layer below it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from judge.backends import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_RETRIES,
    LOCAL_TIMEOUT_S,
    REMOTE_TIMEOUT_S,
    CallPolicy,
    ConfigError,
)
from judge.judging import ExampleSpec, JudgeConfig

if TYPE_CHECKING:
    from judge.backends import Backend

__all__ = [
    "ADAPT_FIELD",
    "CONFIG_FIELDS",
    "DEFAULT_WORKERS",
    "DEFAULT_WORKER_CPUS",
    "ENGINE_FIELDS",
    "EXAMPLE_FIELDS",
    "POLICY_FIELDS",
    "RUN_DEFAULTS",
    "Engine",
    "RunSpec",
    "run_default",
    "run_spec",
    "run_spec_from_args",
    "run_spec_from_job_options",
    "run_spec_from_kwargs",
]

Engine = Literal["local", "ray"]
ENGINES: tuple[Engine, ...] = get_args(Engine)

#: Judging actors of the Ray engine when nobody says otherwise.
DEFAULT_WORKERS = 2
#: CPUs per Ray actor (the embedded model's threads) when nobody says otherwise.
DEFAULT_WORKER_CPUS = 1.0

#: The settings of each part, by the name every builder uses.
CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JudgeConfig))
POLICY_FIELDS: tuple[str, ...] = ("concurrency", "timeout_s", "max_retries", "rpm", "tpm", "prices")
ENGINE_FIELDS: tuple[str, ...] = ("engine", "workers", "worker_cpus", "window", "address")
#: ``--adapt``: decide the passages by the rule the run's labels teach (where it helps).
ADAPT_FIELD = "adapt"
#: Worked examples from the run's labels (``--examples N``, ``--examples-from``): one
#: setting name per :class:`~judge.judging.ExampleSpec` field, all held by ``RunSpec.examples``.
EXAMPLE_FIELDS: Mapping[str, str] = {
    "examples": "n",
    "examples_from": "source",
    "examples_budget": "budget_tokens",
}


def _config_default(name: str) -> Any:
    return JudgeConfig.__dataclass_fields__[name].default


#: The defaults a user sees on every surface (CLI help, the server's schema, the Python
#: API's documentation), read from where each one is defined.
RUN_DEFAULTS: Mapping[str, Any] = {
    "concurrency": DEFAULT_CONCURRENCY,
    "max_retries": DEFAULT_MAX_RETRIES,
    "timeout_s": REMOTE_TIMEOUT_S,
    "local_timeout_s": LOCAL_TIMEOUT_S,
    "workers": DEFAULT_WORKERS,
    "worker_cpus": DEFAULT_WORKER_CPUS,
    "grade_threshold": _config_default("grade_threshold"),
    "p_yes_threshold": _config_default("p_yes_threshold"),
}


def run_default(name: str) -> Any:
    """The default of a run setting by name (:data:`RUN_DEFAULTS`, else the
    :class:`JudgeConfig` field's); KeyError for a name that is neither."""
    if name in RUN_DEFAULTS:
        return RUN_DEFAULTS[name]
    if name in CONFIG_FIELDS:
        return _config_default(name)
    raise KeyError(name)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class RunSpec:
    """The settings of one run (see the module docstring).

    ``config``: how passages are judged (a :class:`JudgeConfig`, automatic settings still
    ``None`` until :func:`~judge.judging.resolve_config` meets the backend). ``policy``: the
    call policy. ``engine``: ``local`` (this process) or ``ray``; ``workers``,
    ``worker_cpus`` and ``address`` are the Ray engine's. ``window``: passages handed out at
    once (None: twice the run's concurrency). ``examples``: worked examples from the run's
    labels shown before each passage (:class:`~judge.judging.ExampleSpec`; none by
    default). ``adapt``: the run's labels teach a decision rule that decides the passages
    where it beats the judge alone on held-out queries (:func:`judge.batch.adapt_records`;
    off by default). Invalid values raise :class:`~judge.backends.ConfigError` naming the field.
    """

    config: JudgeConfig = field(default_factory=JudgeConfig)
    policy: CallPolicy = field(default_factory=CallPolicy)
    engine: Engine = "local"
    workers: int = DEFAULT_WORKERS
    worker_cpus: float = DEFAULT_WORKER_CPUS
    window: int | None = None
    address: str | None = None
    examples: ExampleSpec = field(default_factory=ExampleSpec)
    adapt: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.adapt, bool):
            raise ConfigError(f"must be true or false, got {self.adapt!r}", field="adapt")
        if self.engine not in ENGINES:
            raise ConfigError(f"must be 'local' or 'ray', not {self.engine!r}", field="engine")
        if not _positive_int(self.workers):
            raise ConfigError(f"must be an integer >= 1, got {self.workers!r}", field="workers")
        cpus = self.worker_cpus
        if (
            isinstance(cpus, bool)
            or not isinstance(cpus, int | float)
            or not (math.isfinite(cpus) and cpus > 0)
        ):
            raise ConfigError(f"must be a number > 0, got {cpus!r}", field="worker_cpus")
        if self.window is not None and not _positive_int(self.window):
            raise ConfigError(f"must be an integer >= 1, got {self.window!r}", field="window")

    @property
    def ray(self) -> bool:
        return self.engine == "ray"

    def concurrency_for(self, backend: Backend) -> int:
        """Calls in flight of this run over ``backend`` (a resilient wrapper is looked
        through): the policy's cap for it; on Ray a backend limited per process (the
        embedded model) is multiplied by the workers, each of which has its own."""
        inner: Backend = getattr(backend, "inner", backend)
        limit = inner.max_concurrency
        if self.ray and limit is not None:
            return min(self.policy.ceiling(), limit * self.workers)
        return self.policy.concurrency_for(inner)

    def window_for(self, backend: Backend) -> int:
        """Passages handed out at once: ``window``, else twice :meth:`concurrency_for` (so
        that passages sleeping in a retry backoff do not starve the provider)."""
        return self.window if self.window is not None else 2 * self.concurrency_for(backend)

    def for_backend(self, backend: Backend) -> RunSpec:
        """This spec with the concurrency made concrete for ``backend`` (what a Ray
        cluster's one limiter enforces: it never sees the backend)."""
        return replace(self, policy=replace(self.policy, concurrency=self.concurrency_for(backend)))

    def engine_settings(self) -> dict[str, Any]:
        """The engine as a run's summary echoes it."""
        echo: dict[str, Any] = {"engine": self.engine}
        if self.ray:
            echo |= {"workers": self.workers, "worker_cpus": self.worker_cpus, "ray_address": self.address}
        return echo


def _split(
    settings: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    config: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    examples: dict[str, Any] = {}
    for key, value in settings.items():
        if value is None:
            continue  # not given: the base's value, else the default
        if key in EXAMPLE_FIELDS:
            examples[EXAMPLE_FIELDS[key]] = value
        elif key in CONFIG_FIELDS:
            config[key] = value
        elif key in POLICY_FIELDS:
            policy[key] = value
        elif key in ENGINE_FIELDS or key == ADAPT_FIELD:
            engine[key] = value
        else:
            raise ConfigError("is not a run setting", field=key)
    return config, policy, engine, examples


def run_spec(base: RunSpec | None = None, /, **settings: Any) -> RunSpec:
    """The one resolution: ``settings`` by field name (of :class:`JudgeConfig`,
    :class:`CallPolicy` or the engine) laid over ``base`` (default: every default). A
    setting that is ``None`` is not given. Errors: :class:`ConfigError` naming the field
    (``examples_from`` given where the result shows no examples is one: it would be
    ignored)."""
    spec = base if base is not None else RunSpec()
    config, policy, engine, examples = _split(settings)
    out = replace(
        spec,
        config=replace(spec.config, **config) if config else spec.config,
        policy=replace(spec.policy, **policy) if policy else spec.policy,
        examples=replace(spec.examples, **examples) if examples else spec.examples,
        **engine,
    )
    if "source" in examples and not out.examples.active:
        # --examples-from alone would be ignored without a word: refused, naming it
        raise ConfigError(
            "is only used with examples (--examples N, N >= 1): give both, or drop it", field="examples_from"
        )
    return out


#: Command-line destinations whose name is not the setting's.
_ARG_NAMES: Mapping[str, str] = {"timeout": "timeout_s", "ray_address": "address"}


def run_spec_from_args(args: Any, *, mode: str | None = None, base: RunSpec | None = None) -> RunSpec:
    """The spec of a command's flags (an ``argparse.Namespace``): every attribute named as
    a setting (``--timeout`` is ``timeout_s``, ``--ray-address`` ``address``), absent or
    None when the flag was not given. ``mode``: decided by the caller (a resumed output
    keeps its mode) over ``--mode``. ``--no-seed`` sends no seed."""
    settings: dict[str, Any] = {}
    for name, value in vars(args).items():
        key = _ARG_NAMES.get(name, name)
        if key in (*CONFIG_FIELDS, *POLICY_FIELDS, *ENGINE_FIELDS, *EXAMPLE_FIELDS, ADAPT_FIELD):
            settings[key] = value
    if mode is not None:
        settings["mode"] = mode
    if getattr(args, "no_seed", False):
        base = run_spec(base)
        base = replace(base, config=replace(base.config, seed=None))
        settings.pop("seed", None)
    return run_spec(base, **settings)


def run_spec_from_job_options(options: Mapping[str, Any], base: RunSpec | None = None) -> RunSpec:
    """The spec of a server job: its judging options (the ``JudgeConfig`` fields among
    ``options``; others, such as ``k`` or ``map``, are the job's own) over ``base``, the
    server's spec (its call policy and engine serve every job); ``examples``,
    ``examples_from`` and ``adapt`` are the job's own too."""
    names = (*CONFIG_FIELDS, *EXAMPLE_FIELDS, ADAPT_FIELD)
    return run_spec(base, **{k: options.get(k) for k in names if k in options})


def run_spec_from_kwargs(
    *,
    config: JudgeConfig | None = None,
    mode: str | None = None,
    policy: CallPolicy | None = None,
    **settings: Any,
) -> RunSpec:
    """The spec of Python keyword arguments: ``config`` and ``policy`` objects as the base
    (``mode`` over ``config.mode``), then any setting by name (``concurrency=8``,
    ``max_retries=0``, ``engine="ray"`` ...). ``policy`` and call settings together are
    refused (give one)."""
    given = sorted(k for k in POLICY_FIELDS if settings.get(k) is not None)
    if policy is not None and given:
        raise ConfigError(f"and {', '.join(given)}= were both given: give one", field="policy")
    base = RunSpec(
        config=config if config is not None else JudgeConfig(),
        policy=policy if policy is not None else CallPolicy(),
    )
    return run_spec(base, mode=mode, **settings)
