"""Result models of contextual recall and source quality.

Kept apart from :mod:`judge.judging._models` (which only imports them, for the optional
fields of ``JudgeResult``) so that they depend on nothing but pydantic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CheckLabel = Literal["yes", "no", "unjudged"]
ClaimStatus = Literal["supported", "unsupported", "unjudged"]
GradeOrigin = Literal["prior", "judge", "unjudged"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CallUsage(_Frozen):
    """What one dimension cost: backend ``calls`` (re-asks included, cache hits excluded),
    ``cached`` answers taken from the verdict store, tokens and cost of this run."""

    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: CallUsage) -> CallUsage:
        return CallUsage(
            calls=self.calls + other.calls,
            cached=self.cached + other.cached,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost=self.cost + other.cost,
        )


class ClaimCheck(_Frozen):
    """One claim judged against one passage (``passage_index``: its 0-based rank)."""

    passage_index: int
    verdict: CheckLabel
    reason: str = ""
    p_yes: float | None = None
    cached: bool = False
    error: str | None = None
    raw: str | None = None


class ClaimResult(_Frozen):
    """One claim of the reference answer. ``status`` is its status at the largest cutoff;
    ``support_rank`` the 1-based rank of the first passage supporting it (None: none);
    ``checks`` the verdicts asked, in rank order (asking stops at the first support)."""

    index: int
    claim: str
    status: ClaimStatus
    support_rank: int | None = None
    checks: list[ClaimCheck] = Field(default_factory=list)


class ContextualRecall(_Frozen):
    """Contextual recall of one query: how many claims of the reference answer the top-k
    passages support.

    ``recall[k]`` = supported / (supported + unsupported) at cutoff k (None when no claim is
    judged at k, e.g. the claims could not be extracted); ``supported``/``unsupported``/
    ``unjudged`` count claims per k; ``unsupported_claims`` lists the claims no passage of the
    top max(k) supports. ``error`` says why there are no claims (extraction failed: the
    reference is then *unjudged*, never a recall of 0). Template ids and hashes of both
    steps are recorded; ``claims_cached`` says the claims came from the verdict store.
    """

    reference: str
    claims: list[ClaimResult]
    recall: dict[int, float | None]
    supported: dict[int, int]
    unsupported: dict[int, int]
    unjudged: dict[int, int]
    unsupported_claims: list[str]
    claims_template_id: str
    claims_template_hash: str
    support_template_id: str
    support_template_hash: str
    claims_cached: bool = False
    error: str | None = None
    usage: CallUsage = CallUsage()
    conventions: dict[str, str] = Field(default_factory=dict)


class SiteGrade(_Frozen):
    """The source grade of one site: from the priors file (``origin="prior"``, with the
    matching ``prior_domain``) or from the judge (``"judge"``), or ``"unjudged"`` (no valid
    verdict; ``error`` says why, ``grade`` is None)."""

    site: str
    grade: int | None = Field(default=None, ge=0, le=3)
    reason: str = ""
    origin: GradeOrigin
    prior_domain: str | None = None
    cached: bool = False
    error: str | None = None


class SourceQuality(_Frozen):
    """Source quality of one query's ranking.

    ``sites``/``grades``: per passage (rank order) its site and 0-3 grade (None: no site, or
    its grade is unknown). ``quality[k]``: mean grade of the top-k passages with a known
    grade; ``low_share[k]``: share of those with grade <= 1; ``weighted_ndcg[k]``: NDCG with
    gain x (1 + q) / 4 (None when no passage has a relevance verdict); ``unknown``: passages
    without a grade. ``site_grades``: the grade of every site of this query.
    """

    sites: list[str | None]
    grades: list[int | None]
    site_grades: dict[str, SiteGrade]
    quality: dict[int, float | None]
    low_share: dict[int, float | None]
    weighted_ndcg: dict[int, float | None]
    unknown: int
    template_id: str
    template_hash: str
    usage: CallUsage = CallUsage()
    conventions: dict[str, str] = Field(default_factory=dict)
