"""Batch scoring of JSONL datasets (``judge score``): concurrent, cached, resumable.

Every entry point that judges many passages runs through one driver
(:class:`BatchDriver`: plan -> execute -> commit); see :mod:`judge.batch._driver`.
"""

from typing import TYPE_CHECKING, Any

from judge.batch._adapt_apply import AdaptPair, FeatureFn, adapt_records, check_adapt, model_verdict_of
from judge.batch._batch_options import BatchOptions, BatchOutcome, default_output_path, sidecar_path
from judge.batch._driver import BatchDriver, Commit, DriverStats, KeyFn, Plan, QueryWork, cache_keys
from judge.batch._executor import Executor, FanOutExecutor, LocalExecutor, OnVerdict, PassageJob
from judge.batch._export import qrels_of, run_of, write_qrels, write_run
from judge.batch._label_apply import (
    LabelOutcome,
    agreement_items,
    apply_labels,
    comparison_review_queue,
    job_agreement,
    job_review_queue,
    label_for_passage,
    labelled_verdict,
    map_impacts,
    relabel_record,
)
from judge.batch._label_examples import dataset_example_bank
from judge.batch._plans import FeedPlan, InputPlan, RetryItem, RetryPlan
from judge.batch._ppi_summary import (
    SAMPLE_DESIGNS,
    SampleDraw,
    SampleItem,
    SampleLabelOptions,
    dataset_pairs,
    draw_sample,
    ppi_block,
    record_pairs,
    sample_frame,
    sample_queue,
)
from judge.batch._progress import ProgressMode, Snapshot, make_progress
from judge.batch._records import (
    build_record,
    ground_truth_metrics,
    human_label_counts,
    label_changed,
    summarize_records,
    truth_of,
)
from judge.batch._run_spec import (
    DEFAULT_WORKER_CPUS,
    DEFAULT_WORKERS,
    EXAMPLE_FIELDS,
    RUN_DEFAULTS,
    Engine,
    RunSpec,
    run_default,
    run_spec,
    run_spec_from_args,
    run_spec_from_job_options,
    run_spec_from_kwargs,
)
from judge.batch._runner import (
    check_examples,
    check_labels,
    executor_for,
    retry_unjudged,
    score_dataset,
    score_dataset_sync,
    strict_check,
)

if TYPE_CHECKING:
    from judge.batch._ray import BackendSpec, RayExecutor


def __getattr__(name: str) -> Any:
    """``RayExecutor``/``BackendSpec`` load on first use (the module imports ray only when
    a run starts, but stays out of ``import judge.batch`` altogether)."""
    if name in ("RayExecutor", "BackendSpec"):
        from judge.batch import _ray

        return getattr(_ray, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_WORKERS",
    "DEFAULT_WORKER_CPUS",
    "EXAMPLE_FIELDS",
    "RUN_DEFAULTS",
    "SAMPLE_DESIGNS",
    "AdaptPair",
    "BackendSpec",
    "BatchDriver",
    "BatchOptions",
    "BatchOutcome",
    "Commit",
    "DriverStats",
    "Engine",
    "Executor",
    "FanOutExecutor",
    "FeatureFn",
    "FeedPlan",
    "InputPlan",
    "KeyFn",
    "LabelOutcome",
    "LocalExecutor",
    "OnVerdict",
    "PassageJob",
    "Plan",
    "ProgressMode",
    "QueryWork",
    "RayExecutor",
    "RetryItem",
    "RetryPlan",
    "RunSpec",
    "SampleDraw",
    "SampleItem",
    "SampleLabelOptions",
    "Snapshot",
    "adapt_records",
    "agreement_items",
    "apply_labels",
    "build_record",
    "cache_keys",
    "check_adapt",
    "check_examples",
    "check_labels",
    "comparison_review_queue",
    "dataset_example_bank",
    "dataset_pairs",
    "default_output_path",
    "draw_sample",
    "executor_for",
    "ground_truth_metrics",
    "human_label_counts",
    "job_agreement",
    "job_review_queue",
    "label_changed",
    "label_for_passage",
    "labelled_verdict",
    "make_progress",
    "map_impacts",
    "model_verdict_of",
    "ppi_block",
    "qrels_of",
    "record_pairs",
    "relabel_record",
    "retry_unjudged",
    "run_default",
    "run_of",
    "run_spec",
    "run_spec_from_args",
    "run_spec_from_job_options",
    "run_spec_from_kwargs",
    "sample_frame",
    "sample_queue",
    "score_dataset",
    "score_dataset_sync",
    "sidecar_path",
    "strict_check",
    "summarize_records",
    "truth_of",
    "write_qrels",
    "write_run",
]
