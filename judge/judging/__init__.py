"""Relevance judging: templates, verdict parsing, the judging core and ``RelevancyJudge``.

``RelevancyJudge`` and ``ContextualRecallJudge`` (deepeval metrics) are imported lazily so
that importing this package does not import deepeval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from judge.io import language_of
from judge.judging._config import (
    LANGUAGE_RULE,
    LANGUAGES,
    JudgeConfig,
    Language,
    Passage,
    VerdictStore,
    bind_language,
    check_templates,
    resolve_config,
    template_for,
)
from judge.judging._core import (
    as_passage,
    cached_verdict,
    check_probability,
    generate_summary,
    judge_passage,
    judge_query,
    verdict_cache_key,
)
from judge.judging._examples import (
    DEFAULT_EXAMPLE_BUDGET,
    EXAMPLE_SOURCES,
    MAX_EXAMPLES,
    NEAREST_QUERIES,
    Example,
    ExampleBank,
    ExampleChoice,
    ExampleSource,
    ExampleSpec,
    bank_of,
    check_example_slot,
    check_examples_config,
    examples_hash,
    examples_note,
    examples_seen,
    render_examples,
    select_examples,
    twin_key,
)
from judge.judging._examples_caution import EXAMPLES_MEASURED, examples_caution
from judge.judging._expected_verdicts import (
    DEFAULT_BORDERLINE_MARGIN,
    borderline_verdicts,
    expected_metrics,
    is_borderline,
    mean_expected,
)
from judge.judging._extra_judgments import ExtraOptions, judge_extras, with_extras
from judge.judging._listwise import ListwiseResult, judge_listwise, load_listwise_template
from judge.judging._models import (
    AdaptedBy,
    ExampleRef,
    ExamplesSeen,
    JudgeResult,
    LLMGrade,
    LLMVerdict,
    Mode,
    PassageVerdict,
    ReplacedVerdict,
    TokenUsage,
    UsageSummary,
    VerdictLabel,
)
from judge.judging._parse import (
    VerdictParseError,
    extract_json_object,
    grade_from_object,
    parse_grade,
    parse_verdict,
    verdict_from_object,
)
from judge.judging._recall import RECALL_CONVENTIONS
from judge.judging._review_queue import (
    AUDIT_EVERY,
    QueueCandidate,
    QueueItem,
    apply_label,
    candidates_from_comparison,
    candidates_from_records,
    flip_probability,
    judge_verdict_of,
    model_verdict_of,
    rank_discount,
    review_queue,
    threshold_of,
)
from judge.judging._source_grades import SOURCE_CONVENTIONS
from judge.judging._summary import fallback_reason, judged_list, measure_conventions, summarize, with_measures
from judge.judging._templates import (
    PromptTemplate,
    TemplateError,
    default_template_id,
    list_templates,
    load_template,
    templates_dir,
)

if TYPE_CHECKING:
    from judge.judging._deepeval_metric import RelevancyJudge
    from judge.judging._deepeval_recall_metric import ContextualRecallJudge

__all__ = [
    "AUDIT_EVERY",
    "DEFAULT_BORDERLINE_MARGIN",
    "DEFAULT_EXAMPLE_BUDGET",
    "EXAMPLES_MEASURED",
    "EXAMPLE_SOURCES",
    "LANGUAGES",
    "LANGUAGE_RULE",
    "MAX_EXAMPLES",
    "NEAREST_QUERIES",
    "RECALL_CONVENTIONS",
    "SOURCE_CONVENTIONS",
    "AdaptedBy",
    "ContextualRecallJudge",
    "Example",
    "ExampleBank",
    "ExampleChoice",
    "ExampleRef",
    "ExampleSource",
    "ExampleSpec",
    "ExamplesSeen",
    "ExtraOptions",
    "JudgeConfig",
    "JudgeResult",
    "LLMGrade",
    "LLMVerdict",
    "Language",
    "ListwiseResult",
    "Mode",
    "Passage",
    "PassageVerdict",
    "PromptTemplate",
    "QueueCandidate",
    "QueueItem",
    "RelevancyJudge",
    "ReplacedVerdict",
    "TemplateError",
    "TokenUsage",
    "UsageSummary",
    "VerdictLabel",
    "VerdictParseError",
    "VerdictStore",
    "apply_label",
    "as_passage",
    "bank_of",
    "bind_language",
    "borderline_verdicts",
    "cached_verdict",
    "candidates_from_comparison",
    "candidates_from_records",
    "check_example_slot",
    "check_examples_config",
    "check_probability",
    "check_templates",
    "default_template_id",
    "examples_caution",
    "examples_hash",
    "examples_note",
    "examples_seen",
    "expected_metrics",
    "extract_json_object",
    "fallback_reason",
    "flip_probability",
    "generate_summary",
    "grade_from_object",
    "is_borderline",
    "judge_extras",
    "judge_listwise",
    "judge_passage",
    "judge_query",
    "judge_verdict_of",
    "judged_list",
    "language_of",
    "list_templates",
    "load_listwise_template",
    "load_template",
    "mean_expected",
    "measure_conventions",
    "model_verdict_of",
    "parse_grade",
    "parse_verdict",
    "rank_discount",
    "render_examples",
    "resolve_config",
    "review_queue",
    "select_examples",
    "summarize",
    "template_for",
    "templates_dir",
    "threshold_of",
    "twin_key",
    "verdict_cache_key",
    "verdict_from_object",
    "with_extras",
    "with_measures",
]


def __getattr__(name: str) -> Any:
    if name == "RelevancyJudge":
        from judge.judging._deepeval_metric import RelevancyJudge

        return RelevancyJudge
    if name == "ContextualRecallJudge":
        from judge.judging._deepeval_recall_metric import ContextualRecallJudge

        return ContextualRecallJudge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
