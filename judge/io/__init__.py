"""Input/output: TREC qrels and runs (trec_eval semantics), JSONL datasets, and the one
bad-input exception, :class:`InputError`."""

from judge.io._errors import InputError
from judge.io._trec import (
    JudgedRanking,
    Qrels,
    Run,
    join_run_qrels,
    read_qrels,
    read_run,
    write_qrels,
    write_run,
)

__all__ = [
    "InputError",
    "JudgedRanking",
    "Qrels",
    "Run",
    "join_run_qrels",
    "read_qrels",
    "read_run",
    "write_qrels",
    "write_run",
]

# JSONL datasets.
from judge.io._jsonl import (
    DEFAULT_MAX_PASSAGE_CHARS,
    MAPPABLE_FIELDS,
    MAX_JSON_DEPTH,
    DatasetLimits,
    DatasetPassage,
    DatasetRecord,
    count_lines,
    dataset_limits,
    deep_field,
    iter_dataset,
    json_problem,
    parse_field_map,
    read_dataset,
)

__all__ += [
    "DEFAULT_MAX_PASSAGE_CHARS",
    "MAPPABLE_FIELDS",
    "MAX_JSON_DEPTH",
    "DatasetLimits",
    "DatasetPassage",
    "DatasetRecord",
    "count_lines",
    "dataset_limits",
    "deep_field",
    "iter_dataset",
    "json_problem",
    "parse_field_map",
    "read_dataset",
]
