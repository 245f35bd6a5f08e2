"""Data models for verdicts and results.

``LLMVerdict`` / ``LLMGrade`` are what a model's reply must parse into: strict on the
verdict or grade itself, lenient on harmless extras (unknown keys are kept in
:attr:`~LLMReply.extras`, not refused; a null or missing ``reason`` is an empty reason).
``PassageVerdict`` is
what `judge` records for one passage, whatever happened: a judged verdict with its grade,
reason and provenance, or an explicit *unjudged* record that keeps the raw reply and the
error. ``JudgeResult`` is one query's verdicts plus the metrics computed from them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from judge.judging._dimension_models import ContextualRecall, SourceQuality

Mode = Literal["binary", "graded"]
VerdictLabel = Literal["yes", "no", "unjudged"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class LLMReply(BaseModel):
    """What every verdict reply shares: a ``reason`` (a string; null or missing means an
    empty reason; any other type is refused) and the harmless extras. Keys the model adds
    beyond the verdict and the reason (``{"verdict": "no", "reason": "...", "grade": 0}``)
    are ignored for the verdict and kept in :attr:`extras`, never a reason to re-ask."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    reason: str = ""

    @field_validator("reason", mode="before")
    @classmethod
    def _null_reason(cls, value: Any) -> Any:
        return "" if value is None else value

    @property
    def extras(self) -> dict[str, Any]:
        """The reply's keys beyond the verdict/grade and the reason (empty when none)."""
        return dict(self.model_extra or {})


class LLMVerdict(LLMReply):
    """A binary reply: ``{"verdict": "yes"|"no", "reason": "..."}`` (the verdict is strict)."""

    verdict: Literal["yes", "no"]


class LLMGrade(LLMReply):
    """A graded reply: ``{"grade": 0..3, "reason": "..."}`` (the grade is strict)."""

    grade: int = Field(ge=0, le=3)


class TokenUsage(_Strict):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


VerdictSource = Literal["judge", "human"]


class ExampleRef(_Strict):
    """One worked example a verdict was shown: its query id, passage id and label (on the
    judge's scale: binary 0/1, graded 0-3)."""

    query_id: str
    id: str
    label: int


class ExamplesSeen(_Strict):
    """The worked examples a verdict was shown (``--examples``), in prompt order, and the
    hash of what they showed (part of the verdict's cache key)."""

    hash: str
    items: list[ExampleRef]


class AdaptedBy(_Strict):
    """How a verdict was decided by a rule learned from the run's labels (``--adapt``): the
    rule's ``method``, the SHA-256 of the labels it learned from (``labels_sha256``) and the
    judge's own verdict at its threshold (``judge_verdict``), which the rule replaced."""

    method: str
    labels_sha256: str
    judge_verdict: VerdictLabel


class ReplacedVerdict(_Strict):
    """The judge's verdict that a human label replaced (kept on the overridden verdict)."""

    verdict: VerdictLabel
    grade: int | None = None
    p_yes: float | None = None
    expected_grade: float | None = None
    confidence: float | None = None
    probs: dict[str, float] | None = None
    reason: str = ""


class PassageVerdict(_Strict):
    """The record of one passage's judgment.

    ``verdict`` is ``unjudged`` when no valid reply could be had; then ``grade`` is None,
    ``raw`` holds the last reply (if any) and ``error`` says why. ``confidence`` is the
    probability of the chosen verdict in probability mode (the share of samples that agree
    with it when ``samples > 1``; None otherwise); ``expected_grade`` the probability-weighted
    (or sample-averaged) grade in graded mode; ``probs`` the renormalised probabilities of the
    candidate answers in probability mode. ``attempts`` counts the backend calls made for
    this passage (re-asks and samples included), ``reasks`` the calls made because a reply
    was invalid, ``retries`` the provider-level retries (timeouts, 5xx, 429) the resilient
    wrapper made underneath them. ``decided_by``: with a cascade of judges, the judge whose
    answer this is (None otherwise). ``source`` is ``human`` when a reviewer's label
    replaced the judge's verdict (``reviewer`` names them, ``replaced`` keeps the judge's
    verdict; :func:`judge.judging.apply_label`). ``cached`` says this verdict came from the
    verdict store (its tokens, cost and latency are those of the original judgment and are
    not counted again in usage). ``examples``: the worked examples the prompt showed
    (``--examples``; None for a zero-shot verdict). ``p_adapted``: with ``--adapt`` applied,
    the probability of relevance from the rule learned from the run's labels (``p_yes`` stays
    the model's), and ``adapted`` how the verdict was decided by it.
    """

    index: int
    passage_id: str | None = None
    verdict: VerdictLabel
    grade: int | None = Field(default=None, ge=0, le=3)
    reason: str = ""
    p_yes: float | None = None
    confidence: float | None = None
    expected_grade: float | None = None
    probs: dict[str, float] | None = None
    template_id: str
    template_hash: str
    backend: str
    latency_s: float = 0.0
    tokens: TokenUsage = TokenUsage()
    cost: float = 0.0
    attempts: int = 1
    reasks: int = 0
    retries: int = 0
    cached: bool = False
    raw: str | None = None
    error: str | None = None
    truncated: bool = False
    source: VerdictSource = "judge"
    reviewer: str | None = None
    replaced: ReplacedVerdict | None = None
    decided_by: str | None = None
    examples: ExamplesSeen | None = None
    p_adapted: float | None = None
    adapted: AdaptedBy | None = None

    @model_serializer(mode="wrap")
    def _without_unadapted(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``p_adapted`` and ``adapted`` are written only when ``--adapt`` decided the verdict,
        so a run without it writes exactly what it wrote before they existed."""
        out: dict[str, Any] = handler(self)
        for name in ("p_adapted", "adapted"):
            if out.get(name, 0) is None:
                del out[name]
        return out

    @property
    def judged(self) -> bool:
        return self.verdict != "unjudged"


class UsageSummary(_Strict):
    """What one result cost. ``calls``: backend requests made (cache hits excluded, re-asks
    and the summary call included); ``cached``: verdicts taken from the store; ``retries``:
    provider-level retries underneath the calls; ``reasks``: calls made because a reply was
    invalid. Tokens and cost are those spent by this run (cached verdicts add nothing)."""

    calls: int = 0
    cached: int = 0
    retries: int = 0
    reasks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    currency: str = "CNY"


class JudgeResult(_Strict):
    """One query's verdicts (in input order) and the metrics computed from them.

    ``score``: share of judged passages whose verdict is yes (deepeval's ``score``); None
    when no passage could be judged. ``ap``: average precision with the no-ground-truth
    denominator (relevant among the judged retrieved); 0.0 when passages were judged but
    none relevant, None only when no passage could be judged. ``ndcg``: graded NDCG per
    cutoff k (IDCG from the judged list, or from qrels when given); empty when no passage
    could be judged. ``unjudged``: number of passages with no verdict, dropped from the ranking
    as the ``conventions`` record says. ``conventions`` echoes every metric convention used.
    ``measures``: the user-chosen registry measures (``measures=["P@3"]``) under the names
    given, None when no passage could be judged; ``measure_conventions``: every parameter
    each of them was computed with (label-free conventions, see :mod:`judge.metrics`).
    ``contextual_recall`` (given a reference answer) and ``source_quality`` (when asked for)
    are the optional dimensions of :mod:`judge.judging._recall` and :mod:`judge.judging._source_grades`.
    """

    query: str
    mode: Mode
    backend: str
    verdicts: list[PassageVerdict]
    score: float | None
    ap: float | None
    ndcg: dict[int, float]
    unjudged: int
    reason: str = ""
    usage: UsageSummary = UsageSummary()
    conventions: dict[str, str | int | float] = Field(default_factory=dict)
    measures: dict[str, float | None] = Field(default_factory=dict)
    measure_conventions: dict[str, dict[str, Any]] = Field(default_factory=dict)
    contextual_recall: ContextualRecall | None = None
    source_quality: SourceQuality | None = None
