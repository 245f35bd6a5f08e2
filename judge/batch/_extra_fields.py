"""Contextual recall and source quality in ``judge score``: the record fields of
one query and the summary section computed from every record.

Record fields (present only when the dimension applies):

* ``contextual_recall`` (lines with ``expected_output``, unless ``--no-recall``):
  ``recall`` ({k: recall@k}), ``claims`` (each with ``status``, ``support_rank`` and its
  per-passage ``checks``), ``unsupported_claims``, the ``supported``/``unsupported``/
  ``unjudged`` claim counts per k, ``error`` (claims could not be extracted), templates and
  ``usage``;
* ``source_quality`` (``--source-quality`` or ``--site-priors``): per passage ``sites`` and
  ``grades``, ``site_grades``, ``quality``/``low_share``/``weighted_ndcg`` per k,
  ``unknown``, template and ``usage``.

Their calls, tokens and cost are added to the record's ``usage`` (and so to the summary's).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from judge.backends import Backend
from judge.io import DatasetRecord, source_site
from judge.judging import (
    RECALL_CONVENTIONS,
    SOURCE_CONVENTIONS,
    ExtraOptions,
    JudgeConfig,
    JudgeResult,
    Passage,
    VerdictStore,
    judge_extras,
    with_extras,
)
from judge.metrics import LOW_QUALITY_MAX

__all__ = ["extras_record", "summarize_extras"]


def _dump(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json", exclude={"conventions"})
    return data


async def extras_record(
    backend: Backend,
    config: JudgeConfig,
    store: VerdictStore | None,
    rec: DatasetRecord,
    result: JudgeResult,
    options: ExtraOptions | None,
    k: Sequence[int],
) -> tuple[JudgeResult, dict[str, Any]]:
    """``result`` with the dimensions' usage added, and the record fields to merge."""
    if options is None:
        return result, {}
    wants_recall = options.recall and rec.expected_output is not None
    if not wants_recall and not options.wants_sources:
        return result, {}
    passages = [Passage(p.text, p.id, p.truncated, p.url) for p in rec.passages]
    recall, sources = await judge_extras(
        backend,
        rec.query,
        passages,
        result.verdicts,
        config,
        options,
        expected_output=rec.expected_output,
        store=store,
        k=k,
        sites=[source_site(p.url, p.site) for p in rec.passages],
    )
    fields: dict[str, Any] = {}
    if recall is not None:
        fields["contextual_recall"] = _dump(recall)
    if sources is not None:
        fields["source_quality"] = _dump(sources)
    return with_extras(result, recall, sources), fields


def _mean(values: Iterable[float | None]) -> float | None:
    xs = [float(x) for x in values if x is not None]
    return round(math.fsum(xs) / len(xs), 6) if xs else None


def _recall_summary(records: Sequence[Mapping[str, Any]], ks: Sequence[str]) -> dict[str, Any] | None:
    found = [r["contextual_recall"] for r in records if r.get("contextual_recall")]
    if not found:
        return None
    top = ks[-1] if ks else None
    claims = sum(len(x.get("claims") or []) for x in found)
    return {
        "queries": len(found),
        "queries_without_claims": sum(1 for x in found if x.get("error")),
        "claims": claims,
        "mean_recall": {c: _mean((x.get("recall") or {}).get(c) for x in found) for c in ks},
        "claims_supported": {c: sum((x.get("supported") or {}).get(c, 0) for x in found) for c in ks},
        "claims_unsupported": {c: sum((x.get("unsupported") or {}).get(c, 0) for x in found) for c in ks},
        "claims_unjudged": {c: sum((x.get("unjudged") or {}).get(c, 0) for x in found) for c in ks},
        "unsupported_claims_at": top,
        "conventions": {**RECALL_CONVENTIONS, "mean": "over queries whose recall is defined"},
    }


def _source_summary(records: Sequence[Mapping[str, Any]], ks: Sequence[str]) -> dict[str, Any] | None:
    found = [r["source_quality"] for r in records if r.get("source_quality")]
    if not found:
        return None
    passages: Counter[str] = Counter()
    queries: defaultdict[str, set[int]] = defaultdict(set)
    info: dict[str, Mapping[str, Any]] = {}
    for i, x in enumerate(found):
        for site in x.get("sites") or []:
            if site:
                passages[site] += 1
                queries[site].add(i)
        for site, grade in (x.get("site_grades") or {}).items():
            info.setdefault(site, grade)
    table = [
        {
            "site": site,
            "grade": info.get(site, {}).get("grade"),
            "origin": info.get(site, {}).get("origin"),
            "prior_domain": info.get(site, {}).get("prior_domain"),
            "passages": n,
            "queries": len(queries[site]),
            "reason": info.get(site, {}).get("reason", ""),
        }
        for site, n in sorted(passages.items(), key=lambda item: (-item[1], item[0]))
    ]
    grades = Counter(str(row["grade"]) for row in table if row["grade"] is not None)
    return {
        "queries": len(found),
        "passages": sum(len(x.get("sites") or []) for x in found),
        "unknown_passages": sum(int(x.get("unknown", 0)) for x in found),
        "mean_quality": {c: _mean((x.get("quality") or {}).get(c) for x in found) for c in ks},
        "mean_low_share": {c: _mean((x.get("low_share") or {}).get(c) for x in found) for c in ks},
        "mean_weighted_ndcg": {c: _mean((x.get("weighted_ndcg") or {}).get(c) for x in found) for c in ks},
        "low_quality": f"grade <= {LOW_QUALITY_MAX}",
        "site_grades": dict(sorted(grades.items())),
        "sites": table,
        "conventions": {**SOURCE_CONVENTIONS, "mean": "over queries where the value is defined"},
    }


def summarize_extras(records: Sequence[Mapping[str, Any]], k: Sequence[int]) -> dict[str, Any]:
    """The summary sections ``contextual_recall`` and ``source_quality`` (only those that
    some record has)."""
    ks = [str(c) for c in k]
    out: dict[str, Any] = {}
    recall = _recall_summary(records, ks)
    if recall is not None:
        out["contextual_recall"] = recall
    sources = _source_summary(records, ks)
    if sources is not None:
        out["source_quality"] = sources
    return out
