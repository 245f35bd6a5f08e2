"""Relevance judging: templates, verdict parsing, the judging core and ``RelevancyJudge``.

``RelevancyJudge`` (a deepeval metric) is imported lazily so that importing this package
does not import deepeval.
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
    from judge.judging._metric import RelevancyJudge

__all__ = [
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
    "RelevancyJudge",
    "TemplateError",
    "TokenUsage",
    "UsageSummary",
    "VerdictLabel",
    "VerdictParseError",
    "VerdictStore",
    "bind_language",
    "check_templates",
    "default_template_id",
    "extract_json_object",
    "fallback_reason",
    "generate_summary",
    "grade_from_object",
    "judge_listwise",
    "judge_passage",
    "judge_query",
    "language_of",
    "list_templates",
    "load_template",
    "parse_grade",
    "parse_verdict",
    "resolve_config",
    "summarize",
    "template_for",
    "templates_dir",
    "verdict_cache_key",
    "verdict_from_object",
]


def __getattr__(name: str) -> Any:
    if name == "RelevancyJudge":
        from judge.judging._metric import RelevancyJudge

        return RelevancyJudge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
