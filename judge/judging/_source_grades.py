"""Source quality: how authoritative are the sites the passages come from?

Each passage's site comes from its ``url`` (else its ``site``/``source`` field; see
:func:`judge.io._sites.source_site`). Each distinct site gets a 0-3 grade, once:

1. from the site priors (``--site-priors FILE``; longest matching domain suffix), which
   override the judge: a site they cover is never asked about;
2. else from the judge: template ``source_quality.<language>.v1`` (only the site is shown),
   a graded verdict with a Chinese reason (3 official, government, academic, encyclopedic
   or established media; 2 professional; 1 forums, blogs, self-media; 0 content farms, ads,
   spam), cached per (site, template, backend, settings) under the key kind
   ``source_quality``. No valid verdict after the re-asks -> the site is *unjudged* and its
   passages have no grade (they are left out of quality@k, never counted as low).

Per query: ``quality[k]`` (mean grade of the top k with a grade), ``low_share[k]`` (share of
them with grade <= 1) and ``weighted_ndcg[k]`` (relevance gain x (1 + q) / 4, IDCG from the
unweighted gains; :func:`judge.metrics._source_quality_recall.quality_weighted_ndcg`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from judge.backends import Backend
from judge.io import SitePriors
from judge.judging._aux_ask import ask_verdict, aux_config, kind_key, render, usage_of
from judge.judging._config import JudgeConfig, VerdictStore, bind_language
from judge.judging._dimension_models import SiteGrade, SourceQuality
from judge.judging._models import PassageVerdict
from judge.judging._templates import load_template
from judge.metrics import LOW_QUALITY_MAX, low_quality_share_at_k, quality_weighted_ndcg, source_quality_at_k

__all__ = ["SOURCE_CONVENTIONS", "grade_sites", "source_quality", "source_template_id"]

SOURCE_CONVENTIONS: dict[str, str] = {
    "site": "host of the passage's url (lower case, no www., no port), else its site/source field",
    "grade": "0-3: site priors (longest domain suffix) override the judge; one verdict per site, cached",
    "quality": "mean grade of the top-k passages with a known grade",
    "low_share": f"share of the top-k passages with a known grade that are <= {LOW_QUALITY_MAX}",
    "weighted_ndcg": "judge NDCG with gain x (1 + q) / 4 (unknown q: 1); IDCG from the unweighted gains",
    "unknown": "no site, or an unjudged site: no grade; left out of quality and low_share",
}


def source_template_id(language: str) -> str:
    return f"source_quality.{language}.v1"


def _from_verdict(site: str, v: PassageVerdict) -> SiteGrade:
    if not v.judged or v.grade is None:
        return SiteGrade(site=site, origin="unjudged", error=v.error or "no grade", cached=v.cached)
    return SiteGrade(site=site, grade=v.grade, reason=v.reason, origin="judge", cached=v.cached)


async def grade_sites(
    backend: Backend | None,
    sites: Sequence[str],
    config: JudgeConfig = JudgeConfig(),  # noqa: B008  # frozen dataclass: safe default
    *,
    priors: SitePriors | None = None,
    store: VerdictStore | None = None,
    template: str | None = None,
) -> tuple[dict[str, SiteGrade], list[PassageVerdict]]:
    """A grade for every distinct site (priors first, then the judge) and the verdicts asked
    (for usage). ``backend=None`` grades from the priors only (other sites: unjudged)."""
    grades: dict[str, SiteGrade] = {}
    todo: list[str] = []
    for site in dict.fromkeys(sites):
        prior = priors.lookup(site) if priors is not None else None
        if prior is not None:
            grades[site] = SiteGrade(
                site=site, grade=prior.grade, reason=prior.note, origin="prior", prior_domain=prior.domain
            )
        elif backend is None:
            grades[site] = SiteGrade(site=site, origin="unjudged", error="no site prior and no judge")
        else:
            todo.append(site)
    if not todo or backend is None:
        return grades, []
    config = bind_language(config, "", todo)  # auto: from the sites' names (新华网 -> zh)
    cfg = aux_config(config, "graded", template or source_template_id(config.language), backend)
    tpl = load_template(cfg.template_id())

    async def one(site: str) -> PassageVerdict:
        key = kind_key("source_quality", backend, cfg, tpl, {"site": site})
        return await ask_verdict(backend, cfg, render(tpl, site=site), key=key, store=store)

    verdicts = list(await asyncio.gather(*(one(site) for site in todo)))
    for site, v in zip(todo, verdicts, strict=True):
        grades[site] = _from_verdict(site, v)
    return grades, verdicts


def _gains(verdicts: Sequence[PassageVerdict]) -> list[float]:
    return [float(v.grade) if v.grade is not None else (1.0 if v.verdict == "yes" else 0.0) for v in verdicts]


async def source_quality(
    backend: Backend | None,
    sites: Sequence[str | None],
    config: JudgeConfig = JudgeConfig(),  # noqa: B008  # frozen dataclass: safe default
    *,
    relevance: Sequence[PassageVerdict] | None = None,
    priors: SitePriors | None = None,
    store: VerdictStore | None = None,
    k: Sequence[int] = (5, 10),
    template: str | None = None,
) -> SourceQuality:
    """Source quality of one ranking: ``sites`` per passage (rank order, None: unknown);
    ``relevance``: the passages' relevance verdicts (same order) for the weighted NDCG."""
    cutoffs = sorted({int(c) for c in k})
    if not cutoffs or cutoffs[0] < 1:
        raise ValueError("k must hold positive cutoffs")
    if relevance is not None and len(relevance) != len(sites):
        raise ValueError("relevance must hold one verdict per passage")
    known_sites = [s for s in sites if s]
    config = bind_language(config, "", known_sites)  # auto: from the sites' names (新华网 -> zh)
    site_grades, asked = await grade_sites(
        backend, known_sites, config, priors=priors, store=store, template=template
    )
    grades = [site_grades[s].grade if s else None for s in sites]
    weighted: dict[int, float | None] = dict.fromkeys(cutoffs)
    if relevance is not None:
        # Unjudged passages are dropped from the ranking, as for the judge NDCG.
        kept = [(v, g) for v, g in zip(relevance, grades, strict=True) if v.judged]
        if kept:
            gains = _gains([v for v, _ in kept])
            qualities = [g for _, g in kept]
            weighted = {c: quality_weighted_ndcg(gains, qualities, c) for c in cutoffs}
    tpl_id = template or source_template_id(config.language)
    tpl = load_template(tpl_id)
    return SourceQuality(
        sites=list(sites),
        grades=grades,
        site_grades=site_grades,
        quality={c: source_quality_at_k(grades, c) for c in cutoffs},
        low_share={c: low_quality_share_at_k(grades, c) for c in cutoffs},
        weighted_ndcg=weighted,
        unknown=sum(1 for g in grades if g is None),
        template_id=tpl.id,
        template_hash=tpl.hash,
        usage=usage_of(asked),
        conventions=dict(SOURCE_CONVENTIONS),
    )
