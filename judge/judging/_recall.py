"""Contextual recall: do the top-k passages support what a reference answer says?

Two steps per query:

1. **Claims.** The reference answer (``expected_output``) is split into short,
   self-contained claims by the judge, once per (query, reference, template, backend):
   template ``claims.<language>.v1``, reply ``{"claims": [...]}``. Parsing is strict on the
   list (a non-empty list of non-empty strings under ``claims``) and lenient on extras
   (other keys ignored, duplicates and blank items dropped, at most ``max_claims`` kept). An
   invalid reply is re-asked ``max_reasks`` times; still invalid, the reference is
   *unjudged* (``error`` set, recall None), never a recall of 0. The claims are cached in the
   verdict store under their own key kind (``claims``; the list is kept, as JSON, in the
   ``reason`` of a stored :class:`PassageVerdict`) and recorded in the output.
2. **Support.** Each claim is judged against the passages one at a time, in rank order
   (template ``claim_support.<language>.v1``: passage, question, claim -> yes/no with a
   Chinese reason), stopping at the first passage that supports it and never going past
   rank max(k). Verdicts are cached per (claim, passage) under the key kind
   ``claim_support``.

Why one call per (claim, passage) rather than one call per claim with all top-k passages,
or one call listing every claim: a prompt holds one passage, so it stays within a small
judge's context (ten 8000-character passages do not fit the embedded model's 4096 tokens);
every passage is read once per claim in either per-claim design, so prompt tokens are about
the same (plus the instructions per call), and the early stop saves the passages below the
first support; each verdict is a single yes/no, so probability mode applies (one forward
pass, no generated JSON to go wrong); verdicts are reusable across rankings and systems that
retrieve the same passage, and recall comes out at every cutoff k at once. One call listing
all claims would read the passages once, but needs a long generated reply whose per-claim
verdicts a small model misaligns or skips, has no probability mode and cannot be cached per
passage. The passage comes first in the prompt: on the embedded llama.cpp judge the claims
of one query are asked passage by passage, so the passage's KV cache is reused.

recall@k = supported claims / judged claims (:func:`judge.metrics._source_quality_recall.claim_recall_at_k`);
a claim whose top-k verdicts are partly missing is unjudged at k, never unsupported.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from judge.backends import PAIR_ERRORS, Backend, Message, Usage
from judge.io import InputError
from judge.judging._aux_ask import ask_verdict, aux_config, kind_key, render, usage_of
from judge.judging._config import JudgeConfig, Passage, VerdictStore, bind_language
from judge.judging._core import _call_cost
from judge.judging._dimension_models import (
    CallUsage,
    ClaimCheck,
    ClaimResult,
    ContextualRecall,
)
from judge.judging._models import PassageVerdict, TokenUsage
from judge.judging._parse import VerdictParseError, extract_json_object
from judge.judging._templates import PromptTemplate, load_template
from judge.metrics import ClaimSupport, claim_recall_at_k, claim_status_at_k

__all__ = [
    "RECALL_CONVENTIONS",
    "ClaimSet",
    "contextual_recall",
    "extract_claims",
    "parse_claims",
]

MAX_CLAIMS = 10
CLAIMS_MAX_TOKENS = 512

RECALL_CONVENTIONS: dict[str, str] = {
    "claims": "the reference answer split into short claims by the judge (once per query, cached)",
    "support": "one verdict per (claim, passage) in rank order, stopping at the first supporting passage",
    "recall": "supported claims / judged claims among the top-k passages",
    "unjudged": "a claim with a missing verdict in the top k and no support is unjudged, never unsupported",
    "no_claims": "claims that could not be extracted leave recall null (error recorded)",
}


def claims_template_id(language: str) -> str:
    return f"claims.{language}.v1"


def support_template_id(language: str) -> str:
    return f"claim_support.{language}.v1"


def parse_claims(text: str, *, max_claims: int = MAX_CLAIMS) -> list[str]:
    """The claims of a reply ``{"claims": ["...", ...]}``: strict on the list, lenient on
    extras (see the module docstring). Raises :class:`VerdictParseError`."""
    obj = extract_json_object(text)
    found = [value for key, value in obj.items() if isinstance(key, str) and key.strip().lower() == "claims"]
    if not found:
        raise VerdictParseError("missing field 'claims'")
    items = found[0]
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise VerdictParseError("'claims' must be a list of strings")
    claims: list[str] = []
    for item in items:
        claim = re.sub(r"\s+", " ", item).strip()
        if claim and claim not in claims:
            claims.append(claim)
    if not claims:
        raise VerdictParseError("'claims' must hold at least one non-empty claim")
    return claims[:max_claims]


@dataclass(frozen=True)
class ClaimSet:
    """The claims of one reference answer (empty with ``error`` when none could be had)."""

    claims: tuple[str, ...]
    template: PromptTemplate
    cached: bool = False
    error: str | None = None
    raw: str | None = None
    usage: CallUsage = field(default_factory=CallUsage)


async def extract_claims(
    backend: Backend,
    query: str,
    reference: str,
    config: JudgeConfig,
    *,
    store: VerdictStore | None = None,
    template: str | None = None,
    max_claims: int = MAX_CLAIMS,
) -> ClaimSet:
    """Split ``reference`` into claims (cached under the key kind ``claims``)."""
    tpl = load_template(template or claims_template_id(config.language))
    if tpl.mode != "claims":
        raise InputError(
            f"template {tpl.id} is a {tpl.mode} template, not a claims template", field="template"
        )
    # Only the generation settings change the claims (not the relevance mode or template).
    generation = config.generation() | {"max_tokens": max(config.max_tokens, CLAIMS_MAX_TOKENS)}
    config = JudgeConfig(
        language=config.language, max_reasks=config.max_reasks, template=tpl.id, **generation
    )
    key = kind_key(
        "claims",
        backend,
        config,
        tpl,
        {"query": query, "reference": reference, "max_claims": str(max_claims)},
    )
    if store is not None:
        hit = await store.get(key)
        if hit is not None and hit.judged:
            try:
                claims = json.loads(hit.reason)
            except json.JSONDecodeError:
                claims = None
            if isinstance(claims, list) and claims and all(isinstance(c, str) for c in claims):
                return ClaimSet(tuple(claims), tpl, cached=True, usage=CallUsage(cached=1))
    conversation = list(render(tpl, query=query, reference=reference))
    usage, cost, calls, error, raw = Usage(), 0.0, 0, "", None
    started = time.perf_counter()
    for _ in range(config.max_reasks + 1):
        request = config.chat_request(conversation, json_schema=tpl.json_schema)
        try:
            completion = await backend.complete(request)
        except PAIR_ERRORS as exc:
            error = f"backend error after retries: {type(exc).__name__}: {exc}"
            break
        calls += 1
        usage, cost, raw = usage + completion.usage, cost + _call_cost(completion), completion.text
        try:
            claims = parse_claims(completion.text, max_claims=max_claims)
        except VerdictParseError as exc:
            error = f"no valid claims after {calls} replies: {exc}"
            conversation += [
                Message("assistant", completion.text),
                Message("user", tpl.render_reask(str(exc))),
            ]
            continue
        spent = CallUsage(
            calls=calls,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cost=cost,
        )
        if store is not None:
            record = PassageVerdict(
                index=0,
                verdict="yes",
                reason=json.dumps(claims, ensure_ascii=False),
                template_id=tpl.id,
                template_hash=tpl.hash,
                backend=backend.name,
                latency_s=time.perf_counter() - started,
                tokens=TokenUsage(
                    prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens
                ),
                cost=cost,
                attempts=calls,
                reasks=calls - 1,
            )
            await store.put(key, record)
        return ClaimSet(tuple(claims), tpl, usage=spent)
    spent = CallUsage(
        calls=calls, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens, cost=cost
    )
    return ClaimSet((), tpl, error=error or "no reply", raw=raw, usage=spent)


def _check(v: PassageVerdict, passage_index: int) -> ClaimCheck:
    return ClaimCheck(
        passage_index=passage_index,
        verdict=v.verdict,
        reason=v.reason,
        p_yes=v.p_yes,
        cached=v.cached,
        error=v.error,
        raw=v.raw,
    )


async def _support(
    backend: Backend,
    config: JudgeConfig,
    template: PromptTemplate,
    query: str,
    claim: str,
    passages: Sequence[Passage],
    depth: int,
    store: VerdictStore | None,
) -> list[PassageVerdict]:
    """The claim's verdicts against passages 0..depth-1, stopping at the first yes."""
    verdicts: list[PassageVerdict] = []
    for i, passage in enumerate(passages[:depth]):
        key = kind_key(
            "claim_support",
            backend,
            config,
            template,
            {"query": query, "claim": claim, "passage": passage.text},
        )
        messages = render(template, passage=passage.text, query=query, claim=claim)
        verdict = await ask_verdict(backend, config, messages, key=key, store=store, index=i)
        verdicts.append(verdict)
        if verdict.verdict == "yes":
            break
    return verdicts


def _as_passages(items: Sequence[Passage | str]) -> list[Passage]:
    out: list[Passage] = []
    for item in items:
        if isinstance(item, Passage):
            out.append(item)
        elif isinstance(item, str):
            out.append(Passage(text=item))
        else:
            raise TypeError(f"a passage must be a str or a Passage, not {type(item).__name__}")
    return out


async def contextual_recall(
    backend: Backend,
    query: str,
    passages: Sequence[Passage | str],
    reference: str,
    config: JudgeConfig = JudgeConfig(),  # noqa: B008  # frozen dataclass: safe default
    *,
    store: VerdictStore | None = None,
    k: Sequence[int] = (5, 10),
    claims_template: str | None = None,
    support_template: str | None = None,
    max_claims: int = MAX_CLAIMS,
) -> ContextualRecall:
    """Contextual recall@k of ``passages`` (rank order) against the reference answer."""
    if not isinstance(reference, str) or not reference.strip():
        raise InputError("the reference answer is empty", field="expected_output")
    cutoffs = sorted({int(c) for c in k})
    if not cutoffs or cutoffs[0] < 1:
        raise ValueError("k must hold positive cutoffs")
    items = _as_passages(passages)
    config = bind_language(config, query, [p.text for p in items])  # auto: this query's language
    claim_set = await extract_claims(
        backend, query, reference, config, store=store, template=claims_template, max_claims=max_claims
    )
    support_cfg = aux_config(
        config, "binary", support_template or support_template_id(config.language), backend
    )
    support_tpl = load_template(support_cfg.template_id())
    depth = min(cutoffs[-1], len(items))
    runs = await asyncio.gather(
        *(
            _support(backend, support_cfg, support_tpl, query, c, items, depth, store)
            for c in claim_set.claims
        )
    )
    supports = [
        ClaimSupport(tuple(None if not v.judged else v.verdict == "yes" for v in run), len(items))
        for run in runs
    ]
    claims: list[ClaimResult] = []
    for i, (claim, run, support) in enumerate(zip(claim_set.claims, runs, supports, strict=True)):
        rank = next((v.index + 1 for v in run if v.verdict == "yes"), None)
        status = claim_status_at_k(support, cutoffs[-1])
        claims.append(
            ClaimResult(
                index=i,
                claim=claim,
                status=status,  # type: ignore[arg-type]  # one of the three ClaimStatus values
                support_rank=rank,
                checks=[_check(v, v.index) for v in run],
            )
        )
    recall: dict[int, float | None] = {}
    supported: dict[int, int] = {}
    unsupported: dict[int, int] = {}
    unjudged: dict[int, int] = {}
    for c in cutoffs:
        recall[c], supported[c], unsupported[c], unjudged[c] = claim_recall_at_k(supports, c)
    verdicts = [v for run in runs for v in run]
    return ContextualRecall(
        reference=reference,
        claims=claims,
        recall=recall,
        supported=supported,
        unsupported=unsupported,
        unjudged=unjudged,
        unsupported_claims=[c.claim for c in claims if c.status == "unsupported"],
        claims_template_id=claim_set.template.id,
        claims_template_hash=claim_set.template.hash,
        support_template_id=support_tpl.id,
        support_template_hash=support_tpl.hash,
        claims_cached=claim_set.cached,
        error=claim_set.error,
        usage=claim_set.usage + usage_of(verdicts),
        conventions=dict(RECALL_CONVENTIONS),
    )
