"""One protocol for every kind of job the server runs (a scoring job, a comparison of
systems, a search experiment): what the :class:`~judge.server._jobs.JobManager` and the
routes ask of a kind, and what every job runs with (:class:`Runtime`, its
:func:`job_spec`).

A kind is registered by its name (``score``, ``compare``, ``experiment``) in
:data:`judge.server._kinds.KINDS`; the manager dispatches a queued job on its ``kind``
column. Each kind keeps its files in the job's directory, and says which of them
(:meth:`JobKind.files`) holds the records whose appends are its progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from judge.backends import Backend
from judge.batch import RunSpec, run_spec_from_job_options
from judge.judging import JudgeConfig, VerdictStore
from judge.server._bounds import JobBounds
from judge.server._job_files import Validation
from judge.server._schemas import ADAPT_OPTION_KEYS, EXAMPLE_OPTION_KEYS, JUDGE_OPTION_KEYS
from judge.server._search_configs import RegisteredConfig
from judge.systems import ReportFolder


@dataclass
class Runtime:
    """What every job of this server shares: the backend (one call policy for all jobs),
    the verdict cache and the server's defaults. ``spec``: the server's
    :class:`~judge.batch.RunSpec` (its judge flags, call policy and engine); each job's
    judging options are laid over it (:func:`job_spec`). ``concurrency``: the calls in
    flight the backend enforces (the spec's, made concrete for the backend)."""

    backend: Backend
    store: VerdictStore | None
    jobs_dir: Path
    concurrency: int
    max_jobs: int = 1
    queue_size: int = 100
    settings: Mapping[str, Any] = field(default_factory=dict)
    bounds: JobBounds = field(default_factory=JobBounds)
    spec: RunSpec = field(default_factory=RunSpec)
    executor: Any = None
    """Who judges every job (``judge serve --engine ray``: one Ray executor for the server's
    life); None: each job's local engine over ``backend``."""
    search_configs: Mapping[str, RegisteredConfig] = field(default_factory=dict)
    """The search configurations experiments may run, by name (``judge serve
    --search-config NAME=FILE``); a request names one, never a path."""
    labels: Any = None
    """A scoring job's labels for ``examples``: ``labels(query_ids) -> (LabelSet, level,
    yes_grade)`` from the server's label store and its stated mapping (set with the review
    state); None: no labels, so no worked examples."""


def job_spec(options: Mapping[str, Any], base: RunSpec | None = None) -> RunSpec:
    """The :class:`~judge.batch.RunSpec` of a job: its judging options
    (:data:`~judge.server._schemas.JUDGE_OPTION_KEYS`; a job's other options, such as a
    comparison's resampling ``seed``, are not judge settings), its worked examples
    (:data:`~judge.server._schemas.EXAMPLE_OPTION_KEYS`) and ``adapt`` over ``base``, the
    server's."""
    keys = (*JUDGE_OPTION_KEYS, *EXAMPLE_OPTION_KEYS, *ADAPT_OPTION_KEYS)
    return run_spec_from_job_options({k: options.get(k) for k in keys}, base)


def config_of(options: Mapping[str, Any], base: RunSpec | None = None) -> JudgeConfig:
    """The JudgeConfig of a job's (merged, validated) options (:func:`job_spec`)."""
    return job_spec(options, base).config


@dataclass(frozen=True)
class JobFiles:
    """Where a job's judged records (appended as they finish: its progress and its results)
    and their input (the passages' texts) are."""

    records: Path
    dataset: Path


class PooledJobFiles:
    """What a pooled kind (a comparison, an experiment) shares: ``pooled`` set, and its records
    and dataset in the job directory's :class:`~judge.systems.ReportFolder` pool files."""

    pooled = True

    def files(self, job_dir: Path) -> JobFiles:
        folder = ReportFolder(job_dir)
        return JobFiles(folder.pool_judged, folder.pool_input)


class JobKind(Protocol):
    """A kind of job: how its saved input is checked, how it runs (and resumes: a restart runs
    it again over what its directory and the verdict cache hold), where its records are, and
    its rejected lines and report."""

    name: str
    pooled: bool
    """Its records are a pool's judged verdicts (a comparison's, an experiment's): the review
    queue weighs them as a pool's and their reasons are asked on request."""

    def files(self, job_dir: Path) -> JobFiles:
        """The job's judged records and the dataset their passages' texts come from."""
        ...

    def validate(
        self, job_dir: Path, options: Mapping[str, Any], rt: Runtime, *, stop_after: int | None
    ) -> Validation:
        """Check the saved input once, as the run will read it, against what the server has
        (``rt``: its bounds, its registered search configurations); InputError naming the
        field: refused outright, nothing run. ``stop_after``: stop counting once that many
        records were read."""
        ...

    async def run(self, rt: Runtime, job: Mapping[str, Any], job_dir: Path) -> dict[str, Any]:
        """Run (or resume) the job; its summary."""
        ...

    def rejects(self, job_dir: Path) -> list[dict[str, Any]]:
        """The input's rejected lines, each naming its file, line and field."""
        ...

    def report(self, job_dir: Path, fmt: str) -> str | None:
        """The finished job's report as ``json`` (and, where the kind has them, ``md`` or
        ``html``); None: not written yet, or no such format."""
        ...
