"""Batch scoring of JSONL datasets (``judge score``): concurrent, cached, resumable."""

from judge.batch._export import qrels_of, run_of, write_qrels, write_run
from judge.batch._progress import ProgressMode, Snapshot, make_progress
from judge.batch._records import build_record, ground_truth_metrics, summarize_records
from judge.batch._runner import (
    BatchOptions,
    BatchOutcome,
    default_output_path,
    read_output,
    retry_unjudged,
    retry_unjudged_sync,
    score_dataset,
    score_dataset_sync,
    sidecar_path,
    strict_check,
)

__all__ = [
    "BatchOptions",
    "BatchOutcome",
    "ProgressMode",
    "Snapshot",
    "build_record",
    "default_output_path",
    "ground_truth_metrics",
    "make_progress",
    "qrels_of",
    "read_output",
    "retry_unjudged",
    "retry_unjudged_sync",
    "run_of",
    "score_dataset",
    "score_dataset_sync",
    "sidecar_path",
    "strict_check",
    "summarize_records",
    "write_qrels",
    "write_run",
]
