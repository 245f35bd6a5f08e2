"""What a stability run takes and gives: its options (checked when made), one run's results,
the finished report, and where a run's verdicts are written."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from judge.batch import FeatureFn
from judge.io import DatasetRecord, InputError
from judge.judging import DEFAULT_BORDERLINE_MARGIN, JudgeConfig, JudgeResult
from judge.stability._figures import StabilityMetric, parse_metric
from judge.store import LabelSet

__all__ = [
    "REPORT_SCHEMA",
    "RunResult",
    "StabilityOptions",
    "StabilityReport",
    "run_file_name",
]

REPORT_SCHEMA = "judge.stability/1"
"""The ``schema`` value of ``report.json``; bumped when a key changes meaning or goes away."""


@dataclass(frozen=True, slots=True)
class StabilityOptions:
    """How a stability run is made and checked.

    ``runs``: judgments of the whole dataset (>= 2). ``threshold``: the largest allowed
    relative spread of ``metric`` (``map``, ``score``, ``ndcg@K`` or a registry measure such as
    ``P@3``). ``k``: NDCG cutoffs.
    ``concurrency``: queries in flight over all runs (default: the backend's
    ``max_concurrency``, else 16). ``confidence``/``bootstrap_resamples``/``bootstrap_seed``:
    the bootstrap over queries. ``top``: how many least stable queries and passages to list.
    """

    runs: int = 3
    threshold: float = 0.01
    metric: str = "map"
    k: tuple[int, ...] = (5, 10)
    concurrency: int | None = None
    confidence: float = 0.95
    bootstrap_resamples: int = 2000
    bootstrap_seed: int = 0
    top: int = 10
    borderline_margin: float = DEFAULT_BORDERLINE_MARGIN
    # human labels decide their passages in every run (the judge's verdict is replaced, so
    # they neither flip nor move the figures); level / yes_grade: the stated scale mapping
    labels: LabelSet | None = None
    labels_level: int | None = None
    labels_yes_grade: int | None = None
    # ``RunSpec.adapt``: extra feature columns of the labels' rule (judge.batch.FeatureFn;
    # the CLI's is the encoder's relevance feedback); None: the judge's log-odds only
    adapt_features: FeatureFn | None = None

    def __post_init__(self) -> None:
        if isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 2:
            raise InputError("a stability run needs at least 2 runs", field="--runs")
        if not math.isfinite(self.threshold) or self.threshold < 0:
            raise InputError("must be a finite number >= 0", field="--threshold")
        if not self.k or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in self.k):
            raise InputError("cutoffs must be positive integers", field="-k")
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError("must be >= 1", field="--concurrency")
        if not 0.0 < self.confidence < 1.0:
            raise InputError("must be in (0, 1)", field="--confidence")
        if self.bootstrap_resamples < 1:
            raise InputError("must be >= 1", field="--bootstrap")
        if self.top < 0:
            raise InputError("must be >= 0", field="--top")
        if not 0.0 <= self.borderline_margin <= 1.0:
            raise InputError("must be within [0, 1]", field="--borderline-margin")
        parse_metric(self.metric, self.k)

    @property
    def checked(self) -> StabilityMetric:
        return parse_metric(self.metric, self.k)


@dataclass(frozen=True, slots=True)
class RunResult:
    """One judgment of the whole dataset: results in dataset order."""

    index: int
    results: tuple[JudgeResult, ...]
    elapsed_s: float

    def figure(self, metric: StabilityMetric) -> float:
        """Mean of the per-query values over the queries that have one (nan if none)."""
        values = [v for v in (metric.per_query(r) for r in self.results) if v is not None]
        return float(np.mean(values)) if values else math.nan


@dataclass(frozen=True)
class StabilityReport:
    """A finished stability run. ``data`` is exactly what ``report.json`` holds."""

    data: dict[str, Any]
    runs: tuple[RunResult, ...]
    records: tuple[DatasetRecord, ...]
    config: JudgeConfig
    options: StabilityOptions
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.data["check"]["passed"])

    @property
    def exit_code(self) -> int:
        """0 when the check passed, 1 on a breach."""
        return 0 if self.passed else 1

    @property
    def spread(self) -> float:
        """Relative spread of the checked figure (``inf`` when unbounded)."""
        value = self.data["check"]["relative_spread"]
        return math.inf if value is None else float(value)


def run_file_name(index: int) -> str:
    return f"run-{index}.jsonl"
