"""Input/output: TREC qrels and runs (trec_eval semantics), JSONL datasets, the one
bad-input exception (:class:`InputError`), and the rules below every package that reads
input or writes output: the id check (:func:`id_problem`), the number check
(:func:`number_problem`), the secrets registry and redaction (:func:`register_secret`,
:func:`redact`) and one writer per output (:class:`WriterLock`, :func:`lock_output`)."""

from judge.io._errors import InputError
from judge.io._language import CJK_SHARE, language_of
from judge.io._numbers import INT64_MAX, INT64_MIN, number_problem
from judge.io._secrets import RedactingFilter, redact, register_secret
from judge.io._trec import (
    MIN_INCLUSION,
    JudgedRanking,
    Qrels,
    QrelsLines,
    Run,
    join_run_qrels,
    qrels_escape,
    qrels_unescape,
    read_qrels,
    read_qrels_lines,
    read_run,
    write_qrels,
    write_run,
)
from judge.io._trec_subtopic import SubtopicQrels, join_run_subtopic_qrels, read_subtopic_qrels
from judge.io._writer_lock import (
    LockBusy,
    OutputBusy,
    WriterLock,
    holder_text,
    lock_output,
    output_lock_path,
)

__all__ = [
    "CJK_SHARE",
    "INT64_MAX",
    "INT64_MIN",
    "MIN_INCLUSION",
    "InputError",
    "JudgedRanking",
    "LockBusy",
    "OutputBusy",
    "Qrels",
    "QrelsLines",
    "RedactingFilter",
    "RejectsReporter",
    "Run",
    "SitePriors",
    "SubtopicQrels",
    "WriterLock",
    "error_record",
    "holder_text",
    "join_run_qrels",
    "join_run_subtopic_qrels",
    "language_of",
    "lock_output",
    "number_problem",
    "open_binary",
    "output_lock_path",
    "qrels_escape",
    "qrels_unescape",
    "read_qrels",
    "read_qrels_lines",
    "read_run",
    "read_site_priors",
    "read_subtopic_qrels",
    "redact",
    "register_secret",
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

from judge.io._sample_labels import UNLABELLED, SampleLabel, SampleLabels, read_sample_labels  # noqa: E402

__all__ += ["UNLABELLED", "SampleLabel", "SampleLabels", "read_sample_labels"]

# Judgment lists of other tools (Quepid, SRW, RRE) and their rating scales.
from judge.io._judgment_formats import (  # noqa: E402
    CSV_HEADER,
    JUDGMENT_FORMATS,
    Judgment,
    JudgmentFile,
    JudgmentFormat,
    csv_guard,
    csv_unguard,
    detect_judgment_format,
    judgments_by_qid,
    read_judgments,
    shared_text,
    write_judgments,
)
from judge.io._judgment_scales import (  # noqa: E402
    EXCHANGE_SCALES,
    ExchangeScale,
    ScaleRule,
    detect_scale,
    scale_rule,
)
from judge.io._rated_pairs import RatedPairs  # noqa: E402

__all__ += [
    "CSV_HEADER",
    "EXCHANGE_SCALES",
    "JUDGMENT_FORMATS",
    "ExchangeScale",
    "Judgment",
    "JudgmentFile",
    "JudgmentFormat",
    "RatedPairs",
    "ScaleRule",
    "csv_guard",
    "csv_unguard",
    "detect_judgment_format",
    "detect_scale",
    "judgments_by_qid",
    "read_judgments",
    "scale_rule",
    "shared_text",
    "write_judgments",
]
