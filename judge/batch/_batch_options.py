"""The settings and outcome of a batch run, and the files beside its output.

:class:`BatchOptions` holds what a batch run needs beyond how one passage is judged,
:class:`BatchOutcome` what it did; ``default_output_path`` and ``sidecar_path`` name the
output and the files beside it (``OUT.summary.json``, ``OUT.rejects.jsonl``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judge.backends import DEFAULT_CONCURRENCY
from judge.batch._adapt_apply import FeatureFn
from judge.batch._executor import Executor
from judge.batch._ppi_summary import SampleLabelOptions
from judge.batch._progress import ProgressMode
from judge.batch._records import DEFAULT_QRELS_LEVEL
from judge.io import DEFAULT_MAX_PASSAGE_CHARS
from judge.judging import DEFAULT_BORDERLINE_MARGIN, ExampleBank, ExtraOptions
from judge.store import LabelSet

__all__ = ["BatchOptions", "BatchOutcome", "default_output_path", "sidecar_path"]


@dataclass(frozen=True)
class BatchOptions:
    """Settings of a batch run that are not about how one passage is judged.

    ``window``: passage tasks in flight (default ``2 * concurrency`` so that passages
    sleeping in a retry backoff do not starve the provider); ``concurrency`` is echoed in
    the summary, the provider-call bound itself lives in the backend wrapper.
    ``listwise``: judge each query's passages in one call (a listwise template: the
    default for the mode and language, or ``listwise_template``); generation only, so
    probability mode does not apply. ``executor``: who judges the passages the store does
    not have (default a :class:`~judge.batch._executor.LocalExecutor` over ``backend``
    with ``window``); the caller owns it (closes it). ``examples``: the run's labelled
    passages (:class:`~judge.judging.ExampleBank`, built by the caller from its labels and
    its passages' texts, with its ``--examples`` setting): each passage's prompt shows the
    worked examples it chooses; the summary's ``examples`` describes them. ``adapt`` (with
    ``labels``): the labels teach a decision rule (:func:`judge.batch.adapt_records`) that
    decides the passages where it beats the judge alone on held-out queries; the summary's
    ``adaptation`` says what it learned and whether it was applied (``judge score --adapt``).
    """

    k: tuple[int, ...] = (5, 10)
    concurrency: int = DEFAULT_CONCURRENCY  # the call policy's default (CallPolicy)
    window: int | None = None
    field_map: Mapping[str, str] = field(default_factory=dict)
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS
    strict: bool = False
    progress: ProgressMode = "auto"
    progress_interval_s: float = 5.0
    command: str = "judge score"  # the label of the progress lines: the command that runs
    rejects_path: Path | None = None
    summary_path: Path | None = None
    fsync: bool = True
    settings: Mapping[str, Any] = field(default_factory=dict)
    listwise: bool = False
    listwise_template: str | None = None
    executor: Executor | None = None
    measures: tuple[str, ...] = ()
    extras: ExtraOptions | None = None
    # verdicts this close to the P(yes) threshold are counted as "borderline" in the summary
    borderline_margin: float = DEFAULT_BORDERLINE_MARGIN
    # a graded ground truth meets the yes/no verdicts (agreement) at grade >= qrels_level
    qrels_level: int = DEFAULT_QRELS_LEVEL
    # human labels that override verdicts in the output and summary (judge.batch.apply_labels);
    # labels_level / labels_yes_grade: the stated mapping when their scale differs from the mode's
    labels: LabelSet | None = None
    labels_level: int | None = None
    labels_yes_grade: int | None = None
    # a random sample of human labels: the summary's prediction-powered figures (``ppi``)
    sample_labels: SampleLabelOptions | None = None
    examples: ExampleBank | None = None
    # ``--adapt``: decide the passages by the rule the labels teach (judge.batch.adapt_records)
    # when it beats the judge alone on held-out queries; ``adapt_features``: extra columns
    adapt: bool = False
    adapt_features: FeatureFn | None = None

    def passage_window(self) -> int:
        return max(1, self.window if self.window is not None else 2 * self.concurrency)


@dataclass
class BatchOutcome:
    """What a batch run did. ``summary`` is exactly what was saved to ``summary_path``."""

    output_path: Path
    summary_path: Path
    rejects_path: Path | None
    summary: dict[str, Any]
    scored_now: int
    skipped_done: int
    rejected: int


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def default_output_path(input_path: str | Path) -> Path:
    """``INPUT.judged.jsonl`` beside the input (``data/x.jsonl.gz`` -> ``data/x.judged.jsonl``)."""
    p = Path(input_path)
    return p.with_name(_stem(p) + ".judged.jsonl")


def sidecar_path(output_path: str | Path, kind: str, ext: str) -> Path:
    """``out.jsonl`` -> ``out.<kind>.<ext>`` (summary.json, rejects.jsonl)."""
    p = Path(output_path)
    return p.with_name(f"{_stem(p)}.{kind}.{ext}")
