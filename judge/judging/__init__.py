"""Relevance judging: templates, verdict parsing, the judging core and ``RelevancyJudge``.

``RelevancyJudge`` and ``ContextualRecallJudge`` (deepeval metrics) are imported lazily so
that importing this package does not import deepeval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from judge.judging._config import (
    JudgeConfig,
    Language,
    Passage,
    VerdictStore,
    bind_language,
    check_templates,
    language_of,
    resolve_config,
    template_for,
)
from judge.judging._core import generate_summary, judge_passage, judge_query, verdict_cache_key
from judge.judging._listwise import ListwiseResult, judge_listwise
from judge.judging._models import (
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
from judge.judging._review_queue import (
    AUDIT_EVERY,
    QueueCandidate,
    QueueItem,
    apply_label,
    candidates_from_comparison,
    candidates_from_records,
    flip_probability,
    judge_verdict_of,
    rank_discount,
    review_queue,
    threshold_of,
)
from judge.judging._summary import fallback_reason, summarize
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
    "ContextualRecallJudge",
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
    "bind_language",
    "candidates_from_comparison",
    "candidates_from_records",
    "check_templates",
    "default_template_id",
    "extract_json_object",
    "fallback_reason",
    "flip_probability",
    "generate_summary",
    "grade_from_object",
    "judge_listwise",
    "judge_passage",
    "judge_query",
    "judge_verdict_of",
    "language_of",
    "list_templates",
    "load_template",
    "parse_grade",
    "parse_verdict",
    "rank_discount",
    "resolve_config",
    "review_queue",
    "summarize",
    "template_for",
    "templates_dir",
    "threshold_of",
    "verdict_cache_key",
    "verdict_from_object",
]


def __getattr__(name: str) -> Any:
    if name == "RelevancyJudge":
        from judge.judging._deepeval_metric import RelevancyJudge

        return RelevancyJudge
    if name == "ContextualRecallJudge":
        from judge.judging._deepeval_recall_metric import ContextualRecallJudge

        return ContextualRecallJudge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
