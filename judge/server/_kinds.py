"""The job kinds the server runs, registered by name: the :class:`~judge.server._job_kind.JobKind`
the job manager dispatches a job on (its ``kind`` column), and the one check of a job's saved
input under the server's bounds."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from judge.io import dataset_limits
from judge.server._compare_job import COMPARE
from judge.server._experiment_job import EXPERIMENT
from judge.server._job_files import Validation
from judge.server._job_kind import JobKind, Runtime
from judge.server._score_job import SCORE

#: every kind of job, by the name a job's ``kind`` column holds
KINDS: dict[str, JobKind] = {kind.name: kind for kind in (SCORE, COMPARE, EXPERIMENT)}


class UnknownJobKind(LookupError):
    """A job of a kind this server does not run (a job database shared with another version
    of judge): the job fails naming its kind, and the queue goes on."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"this server does not run jobs of kind {name!r} (it runs {', '.join(sorted(KINDS))}); "
            "the job database is shared with another version of judge?"
        )
        self.kind = name


def job_kind(name: str) -> JobKind:
    """The registered kind ``name`` (:class:`UnknownJobKind`: none)."""
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownJobKind(str(name)) from None


def validate_job(kind: str, job_dir: Path, options: Mapping[str, Any], rt: Runtime) -> Validation:
    """A job's saved input checked as its run will read it, under the server's bounds; stops
    counting one record past ``max_records``. Blocking: call it in a worker thread."""
    with dataset_limits(rt.bounds.dataset()):
        return job_kind(kind).validate(job_dir, options, rt, stop_after=rt.bounds.max_records + 1)
