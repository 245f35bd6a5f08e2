"""Input/output: TREC qrels and runs (trec_eval semantics), JSONL datasets, and the one
bad-input exception, :class:`InputError`."""

from judge.io._errors import InputError
from judge.io._language import CJK_SHARE, language_of
from judge.io._trec import (
    JudgedRanking,
    Qrels,
    Run,
    SubtopicQrels,
    join_run_qrels,
    join_run_subtopic_qrels,
    read_qrels,
    read_run,
    read_subtopic_qrels,
    write_qrels,
    write_run,
)

__all__ = [
    "CJK_SHARE",
    "InputError",
    "JudgedRanking",
    "Qrels",
    "RejectsReporter",
    "Run",
    "SitePriors",
    "SubtopicQrels",
    "error_record",
    "join_run_qrels",
    "join_run_subtopic_qrels",
    "language_of",
    "open_binary",
    "read_qrels",
    "read_run",
    "read_site_priors",
    "read_subtopic_qrels",
    "source_site",
    "text_docno",
    "write_qrels",
    "write_run",
]

# JSONL datasets.
from judge.io._jsonl import (
    DEFAULT_MAX_PASSAGE_CHARS,
    MAPPABLE_FIELDS,
    MAX_ID_CHARS,
    MAX_JSON_DEPTH,
    DatasetLimits,
    DatasetPassage,
    DatasetRecord,
    RejectsReporter,
    count_lines,
    dataset_limits,
    deep_field,
    error_record,
    id_problem,
    iter_dataset,
    json_problem,
    open_binary,
    parse_field_map,
    read_dataset,
    text_docno,
)
from judge.io._sites import SitePriors, read_site_priors, source_site

__all__ += [
    "DEFAULT_MAX_PASSAGE_CHARS",
    "MAPPABLE_FIELDS",
    "MAX_ID_CHARS",
    "MAX_JSON_DEPTH",
    "DatasetLimits",
    "DatasetPassage",
    "DatasetRecord",
    "count_lines",
    "dataset_limits",
    "deep_field",
    "id_problem",
    "iter_dataset",
    "json_problem",
    "parse_field_map",
    "read_dataset",
]

from judge.io._sample_labels import SampleLabel, SampleLabels, read_sample_labels  # noqa: E402

__all__ += ["SampleLabel", "SampleLabels", "read_sample_labels"]
