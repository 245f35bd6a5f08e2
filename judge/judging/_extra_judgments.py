"""Contextual recall and source quality for one judged query, as every entry point asks
for them (the Python API, ``judge score``, the deepeval metric)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from judge.backends import Backend
from judge.io import SitePriors, source_site
from judge.judging._config import JudgeConfig, Passage, VerdictStore
from judge.judging._dimension_models import ContextualRecall, SourceQuality
from judge.judging._models import JudgeResult, PassageVerdict
from judge.judging._recall import contextual_recall
from judge.judging._source_grades import source_quality


@dataclass(frozen=True)
class ExtraOptions:
    """Which dimensions to add. ``recall``: contextual recall for queries with a reference
    answer; ``source_quality``: grade the passages' sources (implied by ``site_priors``);
    ``site_priors``: domain -> grade overrides; ``*_template``: template ids or paths
    (default: the built-in ones for the config's language)."""

    recall: bool = True
    source_quality: bool = False
    site_priors: SitePriors | None = None
    claims_template: str | None = None
    support_template: str | None = None
    source_template: str | None = None

    @property
    def wants_sources(self) -> bool:
        return self.source_quality or self.site_priors is not None


async def judge_extras(
    backend: Backend,
    query: str,
    passages: Sequence[Passage],
    verdicts: Sequence[PassageVerdict],
    config: JudgeConfig,
    options: ExtraOptions,
    *,
    expected_output: str | None = None,
    store: VerdictStore | None = None,
    k: Sequence[int] = (5, 10),
    sites: Sequence[str | None] | None = None,
) -> tuple[ContextualRecall | None, SourceQuality | None]:
    """The recall (when ``options.recall`` and a non-blank reference answer) and the source
    quality (when asked for) of one query whose relevance ``verdicts`` are known. ``sites``:
    each passage's site (default: from ``Passage.url``, a URL or a site's name)."""

    async def recall() -> ContextualRecall | None:
        if not options.recall or expected_output is None or not expected_output.strip():
            return None
        return await contextual_recall(
            backend,
            query,
            passages,
            expected_output,
            config,
            store=store,
            k=k,
            claims_template=options.claims_template,
            support_template=options.support_template,
        )

    async def sources() -> SourceQuality | None:
        if not options.wants_sources:
            return None
        found = list(sites) if sites is not None else [source_site(p.url, p.url) for p in passages]
        return await source_quality(
            backend if options.source_quality else None,
            found,
            config,
            relevance=verdicts,
            priors=options.site_priors,
            store=store,
            k=k,
            template=options.source_template,
        )

    found_recall, found_sources = await asyncio.gather(recall(), sources())
    return found_recall, found_sources


def with_extras(
    result: JudgeResult, recall: ContextualRecall | None, sources: SourceQuality | None
) -> JudgeResult:
    """``result`` with the dimensions attached and their calls, tokens and cost added to its usage."""
    if recall is None and sources is None:
        return result
    usage = result.usage
    for part in (recall, sources):
        if part is None:
            continue
        u = part.usage
        usage = usage.model_copy(
            update={
                "calls": usage.calls + u.calls,
                "cached": usage.cached + u.cached,
                "prompt_tokens": usage.prompt_tokens + u.prompt_tokens,
                "completion_tokens": usage.completion_tokens + u.completion_tokens,
                "cost": usage.cost + u.cost,
            }
        )
    return result.model_copy(update={"contextual_recall": recall, "source_quality": sources, "usage": usage})
